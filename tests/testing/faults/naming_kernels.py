"""Kernels for the naming sets of issue 48 (tests/testing/faults/naming_tuning.py, naming_heldout.py): rebuilt
shipped bug classes of library kernels (Liger, transformers, vLLM, flash-attention, unsloth) and custom ops
(sliding-window attention, a chunked scan) whose reference a user writes."""

from __future__ import annotations

import math
from typing import Any

import torch

F = torch.nn.functional


# ---- rmsnorm ---------------------------------------------------------------------------------------------


def rmsnorm_offset_dropped(x, w):  # type: ignore[no-untyped-def]
    """Gemma's RMSNorm without its ``1 +``: x̂·w where x̂·(1 + w) is declared."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).to(x.dtype)


def rmsnorm_cast_before_weight(x, w):  # type: ignore[no-untyped-def]
    """Gemma casting (all in fp32) written Llama's way: x̂ rounded to the input dtype, then × (1 + w)."""
    xf = x.float()
    xhat = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)
    return (xhat.float() * (1 + w.float())).to(x.dtype)


class _RmsNormNoRstdPath(torch.autograd.Function):
    """rmsnorm whose backward drops the path through 1/rms: dx = r·w·dy (the −x̂·mean(x̂·w·dy) term lost)."""

    @staticmethod
    def forward(ctx, x, w):  # type: ignore[no-untyped-def]
        xf = x.float()
        r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
        ctx.save_for_backward(xf, w.float(), r)
        return (xf * r * w.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        xf, wf, r = ctx.saved_tensors
        g = dy.float()
        dx = r * wf * g
        dw = (g * xf * r).sum(0)
        return dx.to(dy.dtype), dw.to(dy.dtype)


def rmsnorm_backward_no_rstd_path(x, w):  # type: ignore[no-untyped-def]
    return _RmsNormNoRstdPath.apply(x, w)


class _RmsNormDwBf16(torch.autograd.Function):
    """Liger-style rmsnorm whose dW partial sums are added row by row into a bf16 buffer."""

    @staticmethod
    def forward(ctx, x, w):  # type: ignore[no-untyped-def]
        xf = x.float()
        r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
        ctx.save_for_backward(xf, w.float(), r)
        return (xf * r * w.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        xf, wf, r = ctx.saved_tensors
        g = dy.float()
        xhat = xf * r
        wg = wf * g
        dx = r * (wg - xhat * (wg * xhat).mean(-1, keepdim=True))
        dw = torch.zeros(xf.shape[-1], dtype=torch.bfloat16)
        for i in range(xf.shape[0]):
            dw = (dw.float() + g[i] * xhat[i]).to(torch.bfloat16)
        return dx.to(dy.dtype), dw.to(dy.dtype)


def rmsnorm_dw_bf16_running_sum(x, w):  # type: ignore[no-untyped-def]
    return _RmsNormDwBf16.apply(x, w)


# ---- layernorm backward ------------------------------------------------------------------------------------


def _ln_parts(x, w):  # type: ignore[no-untyped-def]
    xf = x.float()
    mu = xf.mean(-1, keepdim=True)
    r = torch.rsqrt(((xf - mu) ** 2).mean(-1, keepdim=True) + 1e-5)
    return xf, (xf - mu) * r, r


class _LayerNormDwBlock(torch.autograd.Function):
    """A layer-norm backward whose dW (and dB) reduce over one program's block of rows, never across blocks:
    ``rows`` rows summed (the first block), the rest lost."""

    @staticmethod
    def forward(ctx, x, w, b, rows, which):  # type: ignore[no-untyped-def]
        xf, xhat, r = _ln_parts(x, w)
        ctx.save_for_backward(xhat, w.float(), r)
        ctx.rows, ctx.which = rows, which
        return (xhat * w.float() + b.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        xhat, wf, r = ctx.saved_tensors
        g = dy.float()
        wg = wf * g
        dx = r * (wg - wg.mean(-1, keepdim=True) - xhat * (wg * xhat).mean(-1, keepdim=True))
        blk = (
            slice(0, ctx.rows)
            if ctx.which == "first"
            else slice(g.shape[0] // ctx.rows * ctx.rows - ctx.rows, None)
        )
        dw = (g * xhat)[blk].sum(0) if ctx.which == "first" else (g * xhat).sum(0)
        db = g.sum(0) if ctx.which == "first" else g[blk].sum(0)
        return dx.to(dy.dtype), dw.to(dy.dtype), db.to(dy.dtype), None, None


def layernorm_dw_first_block_of_4(x, w, b):  # type: ignore[no-untyped-def]
    return _LayerNormDwBlock.apply(x, w, b, 4, "first")


def layernorm_db_last_block_of_8(x, w, b):  # type: ignore[no-untyped-def]
    return _LayerNormDwBlock.apply(x, w, b, 8, "last")


class _LayerNormNoMeanPath(torch.autograd.Function):
    """A layer-norm backward whose dx loses the mean's path: r·(w·dy − x̂·mean(x̂·w·dy)), no −mean(w·dy)."""

    @staticmethod
    def forward(ctx, x, w, b):  # type: ignore[no-untyped-def]
        xf, xhat, r = _ln_parts(x, w)
        ctx.save_for_backward(xhat, w.float(), r)
        return (xhat * w.float() + b.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        xhat, wf, r = ctx.saved_tensors
        g = dy.float()
        wg = wf * g
        dx = r * (wg - xhat * (wg * xhat).mean(-1, keepdim=True))
        return dx.to(dy.dtype), (g * xhat).sum(0).to(dy.dtype), g.sum(0).to(dy.dtype)


def layernorm_backward_no_mean_path(x, w, b):  # type: ignore[no-untyped-def]
    return _LayerNormNoMeanPath.apply(x, w, b)


# ---- swiglu backward -----------------------------------------------------------------------------------------


class _SwigluNoSiluDerivative(torch.autograd.Function):
    """swiglu whose da uses σ(a) for silu'(a) = σ(a)·(1 + a·(1 − σ(a))): the a·σ'(a) term lost."""

    @staticmethod
    def forward(ctx, a, b):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(a.float(), b.float())
        return (F.silu(a.float()) * b.float()).to(a.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        a, b = ctx.saved_tensors
        g = dy.float()
        s = torch.sigmoid(a)
        return (g * b * s).to(dy.dtype), (g * a * s).to(dy.dtype)


def swiglu_backward_no_silu_derivative(a, b):  # type: ignore[no-untyped-def]
    return _SwigluNoSiluDerivative.apply(a, b)


# ---- rope ----------------------------------------------------------------------------------------------------


def rope_gptj_on_neox_table(q, k, cos, sin):  # type: ignore[no-untyped-def]
    """A GPT-J (interleaved) kernel fed a NeoX table: it reads the half table cos[..., :d/2] and rotates pairs
    (2j, 2j+1) by θ_j (vLLM's is_neox_style=False path)."""
    d = q.shape[-1]
    c, s = cos[..., : d // 2].unsqueeze(1), sin[..., : d // 2].unsqueeze(1)

    def rot(x):  # type: ignore[no-untyped-def]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * c - x1 * s, x1 * c + x0 * s], -1).flatten(-2)

    return rot(q), rot(k)


def rope_neox_on_gptj_table(q, k, cos, sin):  # type: ignore[no-untyped-def]
    """A NeoX (rotate-half) kernel fed a GPT-J table: it reads the pair angles cos[..., ::2] as its half table."""
    c, s = cos[..., 0::2], sin[..., 0::2]
    c, s = torch.cat([c, c], -1).unsqueeze(1), torch.cat([s, s], -1).unsqueeze(1)

    def rot(x):  # type: ignore[no-untyped-def]
        x1, x2 = x.chunk(2, -1)
        return x * c + torch.cat([-x2, x1], -1) * s

    return rot(q), rot(k)


def _rope_low_precision_angles(dt: torch.dtype):  # type: ignore[no-untyped-def]
    def kernel(q, k, base=10000.0):  # type: ignore[no-untyped-def]
        """positions × inv_freq computed in a narrow dtype (the angle table rounded), then cos and sin."""
        length, d = q.shape[-2], q.shape[-1]
        inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        t = torch.arange(length, dtype=torch.float32)
        theta = (t[:, None].to(dt) * inv[None, :].to(dt)).float()
        emb = torch.cat([theta, theta], -1)
        c, s = emb.cos()[None, None], emb.sin()[None, None]

        def rot(x):  # type: ignore[no-untyped-def]
            xf = x.float()
            x1, x2 = xf.chunk(2, -1)
            return (xf * c + torch.cat([-x2, x1], -1) * s).to(x.dtype)

        return rot(q), rot(k)

    return kernel


rope_angles_bf16 = _rope_low_precision_angles(torch.bfloat16)
rope_angles_fp16 = _rope_low_precision_angles(torch.float16)


# ---- cross-entropy ---------------------------------------------------------------------------------------------


def _ce(x, target, reduction, ignore_index, eps, cap, smooth_ignored):  # type: ignore[no-untyped-def]
    keep = target != ignore_index
    logp = x.log_softmax(-1)
    nll = -logp.gather(1, target.clamp(0)[:, None])[:, 0]
    smooth = -logp.mean(-1)
    loss = (1 - eps) * torch.where(keep, nll, 0.0) + eps * (
        smooth if smooth_ignored else torch.where(keep, smooth, 0.0)
    )
    return loss.sum() / keep.sum() if reduction == "mean" else loss


def ce_smoothing_over_ignored(
    logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, softcap=0.0
):  # type: ignore[no-untyped-def]
    """Liger's early fused CE: the smoothing term ε·mean(−log p) added on ignored rows too."""
    return _ce(logits.float(), target, reduction, ignore_index, label_smoothing, softcap, True).to(
        logits.dtype
    )


def ce_softcap_x_tanh(logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, softcap=0.0):  # type: ignore[no-untyped-def]
    """The logit softcap written x·tanh(x/c) for c·tanh(x/c)."""
    x = logits.float()
    return _ce(
        x * torch.tanh(x / softcap), target, reduction, ignore_index, label_smoothing, softcap, False
    ).to(logits.dtype)


def ce_softcap_no_multiply(
    logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, softcap=0.0
):  # type: ignore[no-untyped-def]
    """The logit softcap written tanh(x/c), the multiply by c lost."""
    x = logits.float()
    return _ce(torch.tanh(x / softcap), target, reduction, ignore_index, label_smoothing, softcap, False).to(
        logits.dtype
    )


# ---- custom ops: softcapped and sliding-window attention ------------------------------------------------------


def attn_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    b, h, length, d = shape
    return tuple(
        torch.randn((b, h, length, d), generator=gen, dtype=torch.float64).to(dtype) for _ in range(3)
    )


def _attn(
    q, k, v, cap: str = "", c: float = 20.0, window: int = 0, causal: bool = True, mask_first: bool = False
):  # type: ignore[no-untyped-def]
    s = (q.double() @ k.double().mT) / math.sqrt(q.shape[-1])
    lq, lk = s.shape[-2:]
    i, j = torch.arange(lq)[:, None], torch.arange(lk)[None, :]
    hide = (j > i) if causal else torch.zeros(lq, lk, dtype=torch.bool)
    if window:
        hide = hide | (i - j >= window)
    if mask_first:
        s = s.masked_fill(hide, -1e9)
    if cap == "c·tanh(s/c)":
        s = c * torch.tanh(s / c)
    elif cap == "s·tanh(s/c)":
        s = s * torch.tanh(s / c)
    elif cap == "t·tanh(t)":
        s = (s / c) * torch.tanh(s / c)
    s = s.masked_fill(hide, float("-inf"))
    return (s.softmax(-1) @ v.double()).to(q.dtype)


def attn_softcap_ref(q, k, v):  # type: ignore[no-untyped-def]
    return _attn(q, k, v, cap="c·tanh(s/c)")


def attn_softcap_t_tanh_t(q, k, v):  # type: ignore[no-untyped-def]
    return _attn(q.float(), k.float(), v.float(), cap="t·tanh(t)").to(q.dtype)


def attn_softcap_s_tanh(q, k, v):  # type: ignore[no-untyped-def]
    return _attn(q.float(), k.float(), v.float(), cap="s·tanh(s/c)").to(q.dtype)


def attn_softcap_after_mask(q, k, v):  # type: ignore[no-untyped-def]
    """The mask applied (as −1e9) before the softcap: masked scores become −c, no longer −inf (keys leak)."""
    return _attn(q.float(), k.float(), v.float(), cap="c·tanh(s/c)", mask_first=True).to(q.dtype)


def attn_window_ref(q, k, v):  # type: ignore[no-untyped-def]
    return _attn(q, k, v, window=32)


def attn_window_33(q, k, v):  # type: ignore[no-untyped-def]
    """A sliding window of 32 keys written i − j > 32: each query sees 33 keys."""
    return _attn(q.float(), k.float(), v.float(), window=33).to(q.dtype)


def attn_window_31(q, k, v):  # type: ignore[no-untyped-def]
    """A sliding window of 32 keys written i − j ≥ 31: each query sees 31 keys."""
    return _attn(q.float(), k.float(), v.float(), window=31).to(q.dtype)


# ---- custom ops: a chunked scan (a cumulative sum with decay, as linear attention's state) ----------------------


def scan_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    return (torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype),)


def scan_ref(x):  # type: ignore[no-untyped-def]
    return x.double().cumsum(-1).to(x.dtype)


def _chunked(x: Any, chunk: int, carry: bool, drop_tail: bool) -> Any:
    xf = x.float()
    n = xf.shape[-1]
    out = torch.zeros_like(xf)
    state = torch.zeros(xf.shape[:-1])
    end = n // chunk * chunk if drop_tail else n
    for s in range(0, end, chunk):
        c = xf[..., s : s + chunk].cumsum(-1) + state[..., None]
        out[..., s : s + chunk] = c
        state = c[..., -1] if carry else state
    return out.to(x.dtype)


def scan_no_carry_16(x):  # type: ignore[no-untyped-def]
    """A chunked scan over chunks of 16 that never carries its state to the next chunk."""
    return _chunked(x, 16, False, False)


def scan_no_carry_32(x):  # type: ignore[no-untyped-def]
    return _chunked(x, 32, False, False)


def scan_drops_partial_chunk(x):  # type: ignore[no-untyped-def]
    """A chunked scan over chunks of 64 whose loop skips the last partial chunk (left zero)."""
    return _chunked(x, 64, True, True)


# ---- precision controls (a precision cause is the right name) --------------------------------------------------


def sum_fp16_running(x):  # type: ignore[no-untyped-def]
    """An fp32 row sum kept in an fp16 running sum, 32 terms at a time."""
    acc = torch.zeros(x.shape[:-1], dtype=torch.float16)
    for j in range(0, x.shape[-1], 32):
        acc = (acc.float() + x[..., j : j + 32].float().sum(-1)).half()
    return acc.to(x.dtype)


def matmul_tf32_operands(a, b):  # type: ignore[no-untyped-def]
    """An fp32 matmul whose operands are truncated to tf32 (10 stored bits) before the product."""

    def trunc(t):  # type: ignore[no-untyped-def]
        i = t.float().contiguous().view(torch.int32)
        return (i & ~((1 << 13) - 1)).view(torch.float32)

    return (trunc(a).double() @ trunc(b).double()).float()


# ---- the attention family with its softcap and window params (the same bugs as kernels of the family) ----------


def _family_attn(cap: str = "c·tanh(s/c)", window_delta: int = 0, mask_first: bool = False):  # type: ignore[no-untyped-def]
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
            s = s.masked_fill(hide, -1e9)
        if softcap:
            c = softcap
            s = {
                "c·tanh(s/c)": c * torch.tanh(s / c),
                "t·tanh(t)": (s / c) * torch.tanh(s / c),
                "s·tanh(s/c)": s * torch.tanh(s / c),
            }[cap]
        if not mask_first:
            s = s.masked_fill(hide, float("-inf"))
        return (s.softmax(-1) @ vv.float()).to(q.dtype)

    return kernel


family_attn_right = _family_attn()
family_attn_t_tanh_t = _family_attn("t·tanh(t)")
family_attn_s_tanh = _family_attn("s·tanh(s/c)")
family_attn_mask_first = _family_attn(mask_first=True)
family_attn_window_33 = _family_attn(window_delta=1)
family_attn_window_31 = _family_attn(window_delta=-1)


# ---- partial rotary (GPT-NeoX's rotary_pct, Phi): the first lanes of the table's width rotate -------------------


def _partial(rot):  # type: ignore[no-untyped-def]
    def kernel(q, k, cos, sin):  # type: ignore[no-untyped-def]
        r = cos.shape[-1]
        qr, kr = rot(q[..., :r], k[..., :r], cos, sin)
        return torch.cat([qr, q[..., r:]], -1), torch.cat([kr, k[..., r:]], -1)

    return kernel


def _neox(q, k, cos, sin):  # type: ignore[no-untyped-def]
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)

    def rot(x):  # type: ignore[no-untyped-def]
        x1, x2 = x.chunk(2, -1)
        return x * c + torch.cat([-x2, x1], -1) * s

    return rot(q), rot(k)


rope_partial_right = _partial(_neox)
rope_partial_gptj_on_neox_table = _partial(rope_gptj_on_neox_table)
