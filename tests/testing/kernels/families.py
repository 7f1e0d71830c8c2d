"""Planted faults for the newer op families, each in the family's call convention."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kcgate.numerics.ops import quant, rope


def rope_wrong_layout(q, k, cos, sin):  # type: ignore[no-untyped-def]
    """GPT-J (interleaved) pairs where the contract says NeoX (rotate-half)."""
    return tuple(rope.apply(t, cos[:, None], sin[:, None], "gptj") for t in (q, k))


def rope_gptj_as_neox(q, k, cos, sin):  # type: ignore[no-untyped-def]
    return tuple(rope.apply(t, cos[:, None], sin[:, None], "neox") for t in (q, k))


def ce_no_max(logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0):  # type: ignore[no-untyped-def]
    """log Σ exp(x) without subtracting the row max first: exp overflows for large logits."""
    x = logits.float()
    lse = torch.log(torch.exp(x).sum(-1))
    keep = target != ignore_index
    loss = torch.where(keep, lse - x.gather(1, target.clamp(0)[:, None])[:, 0], 0.0)
    return (loss.sum() / keep.sum() if reduction == "mean" else loss).to(logits.dtype)


def scaled_mm_round_then_scale(a, b, scale_a, scale_b):  # type: ignore[no-untyped-def]
    """Rounds the operands to fp8 at their own magnitude, then divides by the scale: small rows lose
    their bits among the subnormals, large ones saturate."""
    f8 = torch.float8_e4m3fn
    qa = quant.quantize_fp8(a.to(f8).float(), scale_a, "e4m3")
    sbt = scale_b.mT if scale_b.dim() else scale_b
    qb = quant.quantize_fp8(b.mT.to(f8).float(), sbt, "e4m3").mT
    return torch._scaled_mm(qa, qb, scale_a=scale_a, scale_b=scale_b, out_dtype=a.dtype)


def quant_gemm_wrong_group(x, qweight, scales, zeros):  # type: ignore[no-untyped-def]
    """Column j dequantized with the scale and zero of group j // g + 1 (an off-by-one group index)."""
    w = quant.dequantize(qweight, scales.roll(-1, -1), zeros.roll(-1, -1))
    return F.linear(x, w.to(x.dtype))


class _RopeWrongBackward(torch.autograd.Function):
    """Correct NeoX forward; the backward applies the rotation again instead of its transpose."""

    @staticmethod
    def forward(ctx, q, k, cos, sin):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(cos, sin)
        return tuple(rope.apply(t, cos[:, None], sin[:, None], "neox") for t in (q, k))

    @staticmethod
    def backward(ctx, dq, dk):  # type: ignore[no-untyped-def]
        cos, sin = ctx.saved_tensors
        return (*(rope.apply(t, cos[:, None], sin[:, None], "neox") for t in (dq, dk)), None, None)


def rope_wrong_backward(q, k, cos, sin):  # type: ignore[no-untyped-def]
    return _RopeWrongBackward.apply(q, k, cos, sin)


class _SwigluWrongBackward(torch.autograd.Function):
    """da = dy·b·silu(a): the activation where its derivative belongs."""

    @staticmethod
    def forward(ctx, a, b):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(a, b)
        return F.silu(a) * b

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        a, b = ctx.saved_tensors
        return dy * b * F.silu(a), dy * F.silu(a)


def swiglu_wrong_backward(a, b):  # type: ignore[no-untyped-def]
    return _SwigluWrongBackward.apply(a, b)


class _CeMeanOverAllRows(torch.autograd.Function):
    """The mean loss with a backward that divides by every row, ignored ones included."""

    @staticmethod
    def forward(ctx, x, t, ignore_index):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(x, t)
        ctx.ignore_index = ignore_index
        return F.cross_entropy(x, t, ignore_index=ignore_index)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        x, t = ctx.saved_tensors
        keep = (t != ctx.ignore_index)[:, None]
        p = torch.softmax(x.float(), -1)
        onehot = torch.zeros_like(p).scatter_(1, t.clamp(0)[:, None], 1.0)
        return (dy * (p - onehot) * keep / x.shape[0]).to(x.dtype), None, None


def ce_mean_over_all_rows(logits, target, reduction="mean", ignore_index=-100):  # type: ignore[no-untyped-def]
    return _CeMeanOverAllRows.apply(logits, target, ignore_index)
