"""The fixed twins of the shipped-bug set's kernels (tests/testing/faults/shipped_kernels.py): each as its upstream
fix computes, in the buggy rebuild's structure with the fix applied. ``FIXED`` maps each bug id of
naming_sets_shipped.SHIPPED to its fixed kernel's name here (benchmarks/false_alarms.py --set shipped-fixed)."""

from __future__ import annotations

import math

import torch

F = torch.nn.functional
EPS = 1e-5


# ---- rmsnorm -----------------------------------------------------------------------------------------------------


def _rstd(xf):  # type: ignore[no-untyped-def]
    return torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)


def rmsnorm_weight_in_fp32(x, w):  # type: ignore[no-untyped-def]
    """pytorch#147203's fix: x̂ · w in fp32, cast to the input dtype once."""
    xf = x.float()
    return (xf * _rstd(xf) * w.float()).to(x.dtype)


def gemma_rmsnorm_offset_weight_in_fp32(x, w):  # type: ignore[no-untyped-def]
    """transformers#29402's fix (Gemma): x̂ · (1 + w) in fp32, cast to the input dtype once."""
    xf = x.float()
    return (xf * _rstd(xf) * (1.0 + w.float())).to(x.dtype)


class _RmsNormBlockDwFp32(torch.autograd.Function):
    """Liger's block rmsnorm after Liger#950: dW's per-block sum over rows in fp32 (llama mode: each term
    dy · x̂ in the input dtype, x̂ rounded to it), each block added into an fp32 dW."""

    @staticmethod
    def forward(ctx, x, w):  # type: ignore[no-untyped-def]
        xf = x.float()
        r = _rstd(xf)
        ctx.save_for_backward(xf, w.float(), r)
        ctx.dtype = x.dtype
        return (xf * r).to(x.dtype).float().mul(w.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        xf, wf, r = ctx.saved_tensors
        g = dy.float()
        xhat = xf * r
        wg = wf * g
        dx = r * (wg - xhat * (wg * xhat).mean(-1, keepdim=True))
        term = (dy.to(ctx.dtype) * xhat.to(ctx.dtype)).float()  # dY · x̂ rounded to the input dtype, as before
        dw = torch.zeros(xf.shape[-1])
        for s in range(0, xf.shape[0], 16):
            dw = dw + term[s : s + 16].sum(0)  # the fix: the block's sum of those terms in fp32
        return dx.to(dy.dtype), dw.to(dy.dtype)


def rmsnorm_block_dw_fp32_sum(x, w):  # type: ignore[no-untyped-def]
    """Liger-Kernel#950's fix: block rmsnorm backward sums dW over each block of rows in fp32."""
    return _RmsNormBlockDwFp32.apply(x, w)


# ---- layernorm backward ------------------------------------------------------------------------------------------


class _LayerNormBwdFixed(torch.autograd.Function):
    """A layer norm whose backward is ``ctx.variant``'s fixed form, in the blocked structure of its bug."""

    @staticmethod
    def forward(ctx, x, w, b, variant):  # type: ignore[no-untyped-def]
        xf = x.float()
        mu = xf.mean(-1, keepdim=True)
        r = torch.rsqrt(((xf - mu) ** 2).mean(-1, keepdim=True) + EPS)
        xhat = (xf - mu) * r
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
        if v == "row-block-sums":  # blocks of 4 rows, each row's sums over its own columns (tl.sum(axis=1))
            s1 = torch.cat([wg[i : i + 4].sum(-1, keepdim=True) for i in range(0, xhat.shape[0], 4)])
            s2 = torch.cat([(wg * xhat)[i : i + 4].sum(-1, keepdim=True) for i in range(0, xhat.shape[0], 4)])
        elif v == "col-blocks":  # Σ dy·γ·x̂ accumulated over every block of 128 columns, not overwritten
            s2 = torch.zeros_like(s2)
            for j in range(0, n, 128):
                s2 = s2 + (wg * xhat)[:, j : j + 128].sum(-1, keepdim=True)
        elif v == "fp32-scratch":  # dW and dB added 4 rows at a time into fp32 scratch, cast once at the end
            dw, db = torch.zeros(n), torch.zeros(n)
            for s in range(0, xhat.shape[0], 4):
                dw = dw + (g * xhat)[s : s + 4].sum(0)
                db = db + g[s : s + 4].sum(0)
        dx = r * (wg - s1 / n - xhat * s2 / n)
        return dx.to(dy.dtype), dw.to(dy.dtype), db.to(dy.dtype), None


def layernorm_bwd_row_sums(x, w, b):  # type: ignore[no-untyped-def]
    """FlagGems#59's fix: with BLOCK_ROW_SIZE > 1, dx's sums are taken per row (axis 1), not over the block."""
    return _LayerNormBwdFixed.apply(x, w, b, "row-block-sums")


def layernorm_bwd_single_mean(x, w, b):  # type: ignore[no-untyped-def]
    """tt-metal#53215's fix (bug 1): mean(dy·γ) subtracted once in dx."""
    return _LayerNormBwdFixed.apply(x, w, b, "single-mean")


def layernorm_bwd_all_col_blocks(x, w, b):  # type: ignore[no-untyped-def]
    """tt-metal#53215's fix (bug 2): mean(dy·γ·x̂) accumulated over every column block in dx."""
    return _LayerNormBwdFixed.apply(x, w, b, "col-blocks")


def layernorm_bwd_fp32_scratch(x, w, b):  # type: ignore[no-untyped-def]
    """llm.c#476's fix: dweight/dbias accumulated in an fp32 scratch buffer, rounded to bf16 once."""
    return _LayerNormBwdFixed.apply(x, w, b, "fp32-scratch")


# ---- rope -------------------------------------------------------------------------------------------------------


def _rope_fp32_table(q, k, base=10000.0, eager=False):  # type: ignore[no-untyped-def]
    """A NeoX rope computing its own table in fp32: inv_freq, positions × inv_freq, cos and sin; ``eager``:
    cos and sin cast to the input dtype and the rotation computed in it (transformers' apply_rotary_pos_emb),
    else in fp32 and rounded once."""
    length, d = q.shape[-2], q.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    t = torch.arange(length, dtype=torch.float32)
    theta = t[:, None] * inv[None, :]
    emb = torch.cat([theta, theta], -1)
    c, s = emb.cos()[None, None], emb.sin()[None, None]

    def rot(x):  # type: ignore[no-untyped-def]
        xc = x if eager else x.float()
        cc, sc = (c.to(x.dtype), s.to(x.dtype)) if eager else (c, s)
        x1, x2 = xc.chunk(2, -1)
        return (xc * cc + torch.cat([-x2, x1], -1) * sc).to(x.dtype)

    return rot(q), rot(k)


def hf_rope_table_fp32(q, k, base=10000.0):  # type: ignore[no-untyped-def]
    """transformers#29285's fix: autocast disabled, positions × inv_freq in fp32; cos, sin cast to x's dtype."""
    return _rope_fp32_table(q, k, base, eager=True)


def neox_rope_table_fp32(q, k, base=10000.0):  # type: ignore[no-untyped-def]
    """gpt-neox#1003's fix: the rotary table (angles, cos, sin) computed in fp32, then used in x's dtype."""
    return _rope_fp32_table(q, k, base, eager=True)


def sglang_rope_inv_freq_fp32(q, k, base=10000.0):  # type: ignore[no-untyped-def]
    """sglang-jax#1473's fix: inv_freq kept in fp32 for the phase product."""
    return _rope_fp32_table(q, k, base)


def rope_partial_gptj(q, k, cos, sin):  # type: ignore[no-untyped-def]
    """vLLM#941's fix: GPT-J run with is_neox_style=False: interleaved pairs over the first rotary_dim lanes."""
    r = cos.shape[-1]
    c, s = cos[..., 0::2].float().unsqueeze(1), sin[..., 0::2].float().unsqueeze(1)

    def rot(x):  # type: ignore[no-untyped-def]
        xr = x[..., :r].float()
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        o = torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], -1).flatten(-2)
        return torch.cat([o.to(x.dtype), x[..., r:]], -1)

    return rot(q), rot(k)


# ---- cross-entropy ----------------------------------------------------------------------------------------------


def _loss(x, target, reduction, ignore_index, eps=0.0):  # type: ignore[no-untyped-def]
    """Per-row loss with label smoothing ε, zero on ignored rows; the mean over the rows not ignored."""
    keep = target != ignore_index
    logp = x.log_softmax(-1)
    nll = -logp.gather(1, target.clamp(0)[:, None])[:, 0]
    loss = torch.where(keep, (1 - eps) * nll + eps * -logp.mean(-1), 0.0)
    return loss.sum() / keep.sum() if reduction == "mean" else loss


def ce_softcap_c_tanh(logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, softcap=0.0):  # type: ignore[no-untyped-def]
    """unsloth-zoo#593's fix: the logit softcap is c · tanh(x / c)."""
    x = logits.float()
    return _loss(softcap * torch.tanh(x / softcap), target, reduction, ignore_index).to(logits.dtype)


def ce_softcap_masked_lanes(
    logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, softcap=0.0
):  # type: ignore[no-untyped-def]
    """unsloth#10616's fix: lanes past the vocabulary masked to −inf after the softcap, out of the logsumexp."""
    x = logits.float()
    n = x.shape[-1]
    block = 1 << (n - 1).bit_length()
    xp = F.pad(x, (0, block - n), value=float("-inf"))
    xp = softcap * torch.tanh(xp / softcap)
    xp = torch.where(torch.arange(block) < n, xp, float("-inf"))
    logp = (xp - torch.logsumexp(xp, -1, keepdim=True))[:, :n]
    keep = target != ignore_index
    loss = torch.where(keep, -logp.gather(1, target.clamp(0)[:, None])[:, 0], 0.0)
    out = loss.sum() / keep.sum() if reduction == "mean" else loss
    return out.to(logits.dtype)


def ce_mean_over_kept_rows(
    logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, softcap=0.0
):  # type: ignore[no-untyped-def]
    """TransformerEngine#2476's fix: the mean divides by the number of tokens not ignored."""
    return _loss(logits.float(), target, reduction, ignore_index).to(logits.dtype)


def ce_smoothing_kept_rows(
    logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, softcap=0.0
):  # type: ignore[no-untyped-def]
    """pytorch#73205's fix: the label-smoothing term masked on ignored samples like the nll."""
    return _loss(logits.float(), target, reduction, ignore_index, label_smoothing).to(logits.dtype)


class _CeNoneRowGrad(torch.autograd.Function):
    """Liger's fused linear CE after #1298: reduction='none' scales each row's gradient by its grad_output."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index):  # type: ignore[no-untyped-def]
        x = logits.float()
        keep = target != ignore_index
        loss = _loss(x, target, "none", ignore_index)
        grad = x.softmax(-1) - F.one_hot(target.clamp(0), x.shape[-1]).float()
        ctx.save_for_backward(torch.where(keep[:, None], grad, 0.0))
        return loss.to(logits.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        (grad,) = ctx.saved_tensors
        return (grad * dy.float()[:, None]).to(dy.dtype), None, None


def ce_none_row_grad(logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, softcap=0.0):  # type: ignore[no-untyped-def]
    """Liger-Kernel#1298's fix: reduction='none' backward loads grad_output per row."""
    return _CeNoneRowGrad.apply(logits, target, ignore_index)


# ---- gelu -------------------------------------------------------------------------------------------------------


def gelu_tanh(x):  # type: ignore[no-untyped-def]
    """transformers#29402's fix: Gemma's activation is gelu_pytorch_tanh, torch's gelu(approximate='tanh')."""
    return F.gelu(x.float(), approximate="tanh").to(x.dtype)


# ---- attention (the family's kernel signature) --------------------------------------------------------------------


def _attn(q, k, v, is_causal, scale, softcap, window):  # type: ignore[no-untyped-def]
    kk = k.repeat_interleave(q.shape[-3] // k.shape[-3], -3)
    vv = v.repeat_interleave(q.shape[-3] // v.shape[-3], -3)
    s = (q.float() @ kk.float().mT) * (scale or 1 / math.sqrt(q.shape[-1]))
    lq, lk = s.shape[-2:]
    i, j = torch.arange(lq)[:, None], torch.arange(lk)[None, :]
    hide = (j > i) if is_causal else torch.zeros(lq, lk, dtype=torch.bool)
    if window:
        hide = hide | (i - j >= window)  # each query sees itself and the window - 1 keys before it
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(hide, float("-inf"))  # after the softcap: a hidden key stays at −inf
    return (s.softmax(-1) @ vv.float()).to(q.dtype)


def attn_softcap_then_mask(q, k, v, is_causal=False, scale=None, enable_gqa=False, softcap=0.0, window=0):  # type: ignore[no-untyped-def]
    """flash-attention#1025 (review) / onnx#7867's fix: the softcap applied to the scores, then the mask."""
    return _attn(q, k, v, is_causal, scale, softcap, window)


def attn_window_exact(q, k, v, is_causal=False, scale=None, enable_gqa=False, softcap=0.0, window=0):  # type: ignore[no-untyped-def]
    """transformers#26792 / mlx-lm#390's fix: the sliding window lets each query see exactly window keys."""
    return _attn(q, k, v, is_causal, scale, softcap, window)


# bug id (naming_sets_shipped.SHIPPED) -> its fixed kernel here
FIXED: dict[str, str] = {
    "rmsnorm-downcast-before-weight-fp16": "rmsnorm_weight_in_fp32",
    "gemma-rmsnorm-downcast-before-offset-weight": "gemma_rmsnorm_offset_weight_in_fp32",
    "liger-rmsnorm-block-dw-bf16": "rmsnorm_block_dw_fp32_sum",
    "llmc-layernorm-dw-bf16-atomics": "layernorm_bwd_fp32_scratch",
    "flaggems-layernorm-dx-row-block-sums": "layernorm_bwd_row_sums",
    "ttmetal-layernorm-dx-double-mean": "layernorm_bwd_single_mean",
    "ttmetal-layernorm-dx-last-block": "layernorm_bwd_all_col_blocks",
    "hf-rope-table-bf16": "hf_rope_table_fp32",
    "neox-rope-table-fp16": "neox_rope_table_fp32",
    "sglang-rope-inv-freq-bf16": "sglang_rope_inv_freq_fp32",
    "vllm-gptj-partial-rope-as-neox": "rope_partial_gptj",
    "unsloth-ce-softcap-x-tanh": "ce_softcap_c_tanh",
    "unsloth-ce-softcap-padded-lanes": "ce_softcap_masked_lanes",
    "te-ce-mean-over-all-rows": "ce_mean_over_kept_rows",
    "torch-ce-smoothing-over-ignored": "ce_smoothing_kept_rows",
    "liger-ce-none-grad-output-scalar": "ce_none_row_grad",
    "fa-attn-mask-before-softcap": "attn_softcap_then_mask",
    "hf-mistral-window-plus-one": "attn_window_exact",
    "mlx-gemma3-window-plus-one-bf16": "attn_window_exact",
    "hf-gemma-exact-gelu-for-tanh": "gelu_tanh",
}
