"""Kernels for issue 48's shipped-bug set (tests/testing/faults/naming_sets_shipped.py): each rebuilds on the CPU
one bug that a public library shipped and later fixed; the set cites the fix."""

from __future__ import annotations

import math

import torch

F = torch.nn.functional


# ---- rmsnorm -----------------------------------------------------------------------------------------------------


def rmsnorm_downcast_before_weight(x, w):  # type: ignore[no-untyped-def]
    """torch's rms_norm before pytorch#147203: x̂ cast down to the input dtype, then up again for × w."""
    xf = x.float()
    xhat = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)
    return (xhat.float() * w.float()).to(x.dtype)


class _RmsNormBlockDwBf16(torch.autograd.Function):
    """Liger's block rmsnorm backward before Liger#950: dW's per-block sum over rows taken in bf16 (llama mode:
    dy · x̂ rounded to bf16, summed in bf16), then added into an fp32 dW."""

    @staticmethod
    def forward(ctx, x, w):  # type: ignore[no-untyped-def]
        xf = x.float()
        r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
        ctx.save_for_backward(xf, w.float(), r)
        return (xf * r).to(x.dtype).float().mul(w.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        xf, wf, r = ctx.saved_tensors
        g = dy.float()
        xhat = xf * r
        wg = wf * g
        dx = r * (wg - xhat * (wg * xhat).mean(-1, keepdim=True))
        term = (dy.to(torch.bfloat16) * xhat.to(torch.bfloat16)).to(torch.bfloat16)
        dw = torch.zeros(xf.shape[-1])
        for s in range(0, xf.shape[0], 16):
            part = torch.zeros(xf.shape[-1], dtype=torch.bfloat16)
            for i in range(s, min(s + 16, xf.shape[0])):
                part = (part.float() + term[i].float()).to(torch.bfloat16)
            dw = dw + part.float()
        return dx.to(dy.dtype), dw.to(dy.dtype)


def rmsnorm_block_dw_bf16_sum(x, w):  # type: ignore[no-untyped-def]
    return _RmsNormBlockDwBf16.apply(x, w)


# ---- layernorm backward ------------------------------------------------------------------------------------------


def _ln(x):  # type: ignore[no-untyped-def]
    xf = x.float()
    mu = xf.mean(-1, keepdim=True)
    r = torch.rsqrt(((xf - mu) ** 2).mean(-1, keepdim=True) + 1e-5)
    return (xf - mu) * r, r


class _LayerNormBwd(torch.autograd.Function):
    """A layer norm whose backward is ``ctx.variant``'s (each a shipped bug, see the set)."""

    @staticmethod
    def forward(ctx, x, w, b, variant):  # type: ignore[no-untyped-def]
        xhat, r = _ln(x)
        ctx.save_for_backward(xhat, w.float(), r)
        ctx.variant = variant
        return (xhat * w.float() + b.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        xhat, wf, r = ctx.saved_tensors
        g = dy.float()
        wg = wf * g
        n = xhat.shape[-1]
        s1, s2 = wg.sum(-1, keepdim=True), (wg * xhat).sum(-1, keepdim=True)
        dw, db = (g * xhat).sum(0), g.sum(0)
        v = ctx.variant
        if v == "row-block-sums":  # FlagGems#59: tl.sum over the whole (rows × cols) block, not per row
            block = torch.arange(xhat.shape[0]) // 4  # the last block partial (masked rows) where rows % 4
            s1 = torch.zeros(int(block[-1]) + 1).index_add_(0, block, wg.sum(-1))[block][:, None]
            s2 = torch.zeros(int(block[-1]) + 1).index_add_(0, block, (wg * xhat).sum(-1))[block][:, None]
        elif v == "double-mean":  # tt-metal#53215 bug 1: mean(dy·γ) subtracted twice
            s1 = 2 * s1
        elif v == "last-col-block":  # tt-metal#53215 bug 2: only the last block of columns of Σ dy·γ·x̂ kept
            s2 = (wg * xhat)[:, -128:].sum(-1, keepdim=True)
        elif v == "bf16-atomics":  # llm.c#476: dW and dB accumulated by bf16 atomic adds, 4 rows at a time
            dwb = torch.zeros(n, dtype=torch.bfloat16)
            dbb = torch.zeros(n, dtype=torch.bfloat16)
            for s in range(0, xhat.shape[0], 4):
                dwb = (dwb.float() + (g * xhat)[s : s + 4].sum(0)).to(torch.bfloat16)
                dbb = (dbb.float() + g[s : s + 4].sum(0)).to(torch.bfloat16)
            dw, db = dwb.float(), dbb.float()
        dx = r * (wg - s1 / n - xhat * s2 / n)
        return dx.to(dy.dtype), dw.to(dy.dtype), db.to(dy.dtype), None


def layernorm_bwd_row_block_sums(x, w, b):  # type: ignore[no-untyped-def]
    return _LayerNormBwd.apply(x, w, b, "row-block-sums")


def layernorm_bwd_double_mean(x, w, b):  # type: ignore[no-untyped-def]
    return _LayerNormBwd.apply(x, w, b, "double-mean")


def layernorm_bwd_last_col_block(x, w, b):  # type: ignore[no-untyped-def]
    return _LayerNormBwd.apply(x, w, b, "last-col-block")


def layernorm_bwd_bf16_atomics(x, w, b):  # type: ignore[no-untyped-def]
    return _LayerNormBwd.apply(x, w, b, "bf16-atomics")


# ---- rope -------------------------------------------------------------------------------------------------------


def _rope_own_table(inv_dtype: torch.dtype, theta_dtype: torch.dtype, table_dtype: torch.dtype):  # type: ignore[no-untyped-def]
    def kernel(q, k, base=10000.0):  # type: ignore[no-untyped-def]
        """A NeoX rope computing its own table: inv_freq in ``inv_dtype``, positions × inv_freq in ``theta_dtype``,
        cos and sin stored in ``table_dtype``."""
        length, d = q.shape[-2], q.shape[-1]
        inv = (1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))).to(inv_dtype)
        t = torch.arange(length, dtype=torch.float32).to(theta_dtype)
        theta = (t[:, None] * inv[None, :].to(theta_dtype)).float()
        emb = torch.cat([theta, theta], -1)
        c = emb.cos().to(table_dtype).float()[None, None]
        s = emb.sin().to(table_dtype).float()[None, None]

        def rot(x):  # type: ignore[no-untyped-def]
            xf = x.float()
            x1, x2 = xf.chunk(2, -1)
            return (xf * c + torch.cat([-x2, x1], -1) * s).to(x.dtype)

        return rot(q), rot(k)

    return kernel


# transformers#29285: inv_freq autocast to bf16, the product in bf16 (the table rounded to bf16)
rope_table_bf16 = _rope_own_table(torch.bfloat16, torch.bfloat16, torch.float32)
# gpt-neox#1003: the whole table (angles, cos, sin) in fp16
rope_table_fp16 = _rope_own_table(torch.float16, torch.float16, torch.float16)
# sglang-jax#1473: only inv_freq rounded to bf16, the phase product in fp32
rope_inv_freq_bf16 = _rope_own_table(torch.bfloat16, torch.float32, torch.float32)


def rope_partial_neox_on_gptj(q, k, cos, sin):  # type: ignore[no-untyped-def]
    """vLLM before #941: GPT-J (interleaved pairs over its first rotary_dim lanes) run by the NeoX kernel."""
    r = cos.shape[-1]
    c, s = cos[..., 0::2], sin[..., 0::2]
    c, s = torch.cat([c, c], -1).unsqueeze(1), torch.cat([s, s], -1).unsqueeze(1)

    def rot(x):  # type: ignore[no-untyped-def]
        xr = x[..., :r].float()
        x1, x2 = xr.chunk(2, -1)
        return torch.cat([(xr * c + torch.cat([-x2, x1], -1) * s).to(x.dtype), x[..., r:]], -1)

    return rot(q), rot(k)


# ---- cross-entropy ----------------------------------------------------------------------------------------------


def _nll(logp, target, ignore_index):  # type: ignore[no-untyped-def]
    keep = target != ignore_index
    nll = -logp.gather(1, target.clamp(0)[:, None])[:, 0]
    return torch.where(keep, nll, 0.0), keep


def ce_softcap_padded_lanes(
    logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, softcap=0.0
):  # type: ignore[no-untyped-def]
    """unsloth before #10616: lanes past the vocabulary loaded as −inf, then softcapped to −c: they join the
    logsumexp."""
    x = logits.float()
    n = x.shape[-1]
    block = 1 << (n - 1).bit_length()
    xp = F.pad(x, (0, block - n), value=float("-inf"))
    xp = softcap * torch.tanh(xp / softcap)
    logp = (xp - torch.logsumexp(xp, -1, keepdim=True))[:, :n]
    loss, keep = _nll(logp, target, ignore_index)
    out = loss.sum() / keep.sum() if reduction == "mean" else loss
    return out.to(logits.dtype)


def ce_mean_over_all_rows(
    logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, softcap=0.0
):  # type: ignore[no-untyped-def]
    """TransformerEngine before #2476: the mean divides by every row, ignored ones included."""
    loss, keep = _nll(logits.float().log_softmax(-1), target, ignore_index)
    out = loss.sum() / loss.shape[0] if reduction == "mean" else loss
    return out.to(logits.dtype)


class _CeNoneFirstGrad(torch.autograd.Function):
    """Liger's fused linear CE before #1298: reduction='none', but the backward loads grad_output as a scalar
    (its first element) for every row."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index):  # type: ignore[no-untyped-def]
        x = logits.float()
        loss, keep = _nll(x.log_softmax(-1), target, ignore_index)
        p = x.softmax(-1)
        grad = p - F.one_hot(target.clamp(0), x.shape[-1]).float()
        ctx.save_for_backward(torch.where(keep[:, None], grad, 0.0))
        return loss.to(logits.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        (grad,) = ctx.saved_tensors
        return (grad * dy.reshape(-1)[0].float()).to(dy.dtype), None, None


def ce_none_first_grad(logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, softcap=0.0):  # type: ignore[no-untyped-def]
    return _CeNoneFirstGrad.apply(logits, target, ignore_index)


# ---- gelu -------------------------------------------------------------------------------------------------------


def gelu_exact_for_tanh(x):  # type: ignore[no-untyped-def]
    """Gemma before transformers#29402: the exact (erf) gelu where the model's is the tanh approximation."""
    return F.gelu(x.float()).to(x.dtype)


# ---- attention (the family's kernel signature) --------------------------------------------------------------------


def _family_attn(window_delta: int = 0, mask_first: bool = False):  # type: ignore[no-untyped-def]
    def kernel(q, k, v, is_causal=False, scale=None, enable_gqa=False, softcap=0.0, window=0):  # type: ignore[no-untyped-def]
        kk = k.repeat_interleave(q.shape[-3] // k.shape[-3], -3)
        vv = v.repeat_interleave(q.shape[-3] // v.shape[-3], -3)
        s = (q.float() @ kk.float().mT) * (scale or 1 / math.sqrt(q.shape[-1]))
        lq, lk = s.shape[-2:]
        i, j = torch.arange(lq)[:, None], torch.arange(lk)[None, :]
        hide = (j > i) if is_causal else torch.zeros(lq, lk, dtype=torch.bool)
        if window:
            hide = hide | (i - j >= window + window_delta)
        if mask_first:
            s = s.masked_fill(hide, float("-inf"))
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        if not mask_first:
            s = s.masked_fill(hide, float("-inf"))
        return (s.softmax(-1) @ vv.float()).to(q.dtype)

    return kernel


# flash-attention#1025 (review) and onnx#7867: the mask (−inf) applied before the softcap, which maps it to −c
attn_mask_before_softcap = _family_attn(mask_first=True)
# transformers#26792 (Mistral), mlx-lm#390 (Gemma 3): a sliding window that lets each query see window + 1 keys
attn_window_plus_one = _family_attn(window_delta=1)
