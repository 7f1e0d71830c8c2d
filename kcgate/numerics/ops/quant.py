"""Quantized GEMMs: fp8 scaled_mm (activations and weights quantized with scales) and weight-only int8/int4
GEMM (weights stored quantized, dequantized with per-channel or per-group scales and zero points).

scaled_mm, shape ``[m, k, n]``: ``kernel(a, b, scale_a, scale_b)`` with a (m, k) and b (k, n) in the case dtype
and float32 dequantization scales (per tensor: shape (); per row: (m, 1) and (1, n)); the kernel quantizes
a/scale_a and b/scale_b to fp8 (``params.fp8``, saturating) and returns (a_q·scale_a)(b_q·scale_b), which is
``torch._scaled_mm``'s product. The oracle quantizes as the op defines (round to nearest even after scaling,
saturating) and the bound allows the other rounding direction where an operand lies within a few fp32 ulps of
an fp8 tie, so the fp8 rounding is accounted for exactly rather than as noise.

quant_gemm, shape ``[m, k, n]``: ``kernel(x, qweight, scales, zeros)`` with x (m, k) in the case dtype,
qweight (n, k) int8 holding one int8 or int4 value per element (unpacked), scales and zeros (n, k / group) in
the case dtype (group = k for per-channel): W = (q − zero)·scale; y = x·Wᵀ. The oracle dequantizes in fp64:
the quantization error is part of the op, the bound covers the activation dtype's arithmetic only.
Derivations: docs/ops.md#scaled_mm and #quant_gemm.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from kcgate.numerics.ops.base import BoundArgs, OpFamily, Tensors, draw, sqrt
from kcgate.vocab.catalogue import family_constraints

FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


@dataclass(frozen=True)
class ScaledMM:
    fp8: str = "e4m3"
    scaling: str = "tensor"  # "tensor" or "row"
    round_first: bool = False  # not a param: the mistake of rounding to fp8 before applying the scale


def row_magnitudes(n: int, gen: torch.Generator) -> torch.Tensor:
    """10^U(−1, 1) per row: activations and weights whose rows differ by orders of magnitude (why
    per-row scales exist, and what rounding to fp8 before scaling cannot represent)."""
    return 10 ** (2 * torch.rand(n, 1, generator=gen, dtype=torch.float64) - 1)


def fp8_scale(t: torch.Tensor, fmt: str, dim: int | None) -> torch.Tensor:
    """amax / fp8_max per tensor (dim None) or along ``dim``, in float32: the usual dequantization scale."""
    fmax = torch.finfo(FP8[fmt]).max
    amax = t.abs().amax() if dim is None else t.abs().amax(dim=dim, keepdim=True)
    return (amax.to(torch.float32) / fmax).clamp_min(1e-12)


def _mm_inputs(cfg: ScaledMM) -> Callable[..., Tensors]:
    def make(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
        m, k, n = shape
        a = (draw((m, k), torch.float64, gen, dist) * row_magnitudes(m, gen)).to(dtype)
        b = (draw((k, n), torch.float64, gen, dist) * row_magnitudes(n, gen).T).to(dtype)
        row = cfg.scaling == "row"
        return a, b, fp8_scale(a, cfg.fp8, 1 if row else None), fp8_scale(b, cfg.fp8, 0 if row else None)

    return make


def dequantized(t: torch.Tensor, scale: torch.Tensor, fmt: str, nudge: float = 0.0) -> torch.Tensor:
    """scale·fp8(t/scale) in fp64 (round to nearest even, saturating), with t/scale first moved by a relative
    ``nudge`` (to find the elements whose rounding direction a few ulps of fp32 arithmetic can flip)."""
    fmax = torch.finfo(FP8[fmt]).max
    r = (t.to(torch.float64) / scale.to(torch.float64) * (1 + nudge)).clamp(-fmax, fmax)
    return r.to(FP8[fmt]).to(torch.float64) * scale.to(torch.float64)


def _operand(t: torch.Tensor, cfg: ScaledMM) -> torch.Tensor:
    """The operand as the op reads it: exact, or (the mistake) first rounded to fp8 at its own magnitude."""
    return t.to(FP8[cfg.fp8]).to(torch.float64) if cfg.round_first else t


def _mm_oracle(cfg: ScaledMM) -> Callable[..., torch.Tensor]:
    def oracle(
        a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, **_: Any
    ) -> torch.Tensor:
        return dequantized(_operand(a, cfg), sa, cfg.fp8) @ dequantized(_operand(b, cfg), sb, cfg.fp8)

    return oracle


def _mm_mistakes(cfg: ScaledMM) -> tuple[tuple[str, OpFamily], ...]:
    what = "operands rounded to fp8 before the scale was applied"
    return ((what, _build_mm(replace(cfg, round_first=True))),)


def _mm_bound(cfg: ScaledMM) -> Callable[[Tensors, torch.Tensor, BoundArgs], torch.Tensor]:
    def bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        a, b, sa, sb = x
        a, b = _operand(a, cfg), _operand(b, cfg)
        qa, qb = dequantized(a, sa, cfg.fp8), dequantized(b, sb, cfg.fp8)
        # a kernel computing t·(1/scale), or t/scale in fp32, may round an operand lying within a few fp32
        # ulps of an fp8 tie the other way: one fp8 spacing on those operands only (exactly where they are)
        da, db = (
            (dequantized(t, s, cfg.fp8, NUDGE) - dequantized(t, s, cfg.fp8, -NUDGE)).abs()
            for t, s in ((a, sa), (b, sb))
        )
        flips = da @ (qb.abs() + db) + qa.abs() @ db
        acc = ba.lam * sqrt(a.shape[-1]) * ba.u_acc * (qa.abs() @ qb.abs())
        # the scales may be applied after the accumulator is rounded to the output dtype (an epilogue in the
        # output precision): two roundings of |y|
        return flips + acc + 2 * ba.u_out * y.abs()

    return bound


NUDGE = 8 * 2.0**-24  # relative: the quotient's fp32 error in a kernel, with margin


def quantize_fp8(t: torch.Tensor, scale: torch.Tensor, fmt: str) -> torch.Tensor:
    """t / scale rounded to fp8, saturating at the format's largest finite value."""
    fmax = torch.finfo(FP8[fmt]).max
    return (t.to(torch.float32) / scale).clamp(-fmax, fmax).to(FP8[fmt])


def torch_scaled_mm(
    a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *, fmt: str = "e4m3"
) -> torch.Tensor:
    """Quantize both operands, then torch._scaled_mm (b column-major, as it requires) in the inputs' dtype."""
    qa = quantize_fp8(a, scale_a, fmt)
    sbt = scale_b.mT if scale_b.dim() else scale_b
    qb = quantize_fp8(b.mT, sbt, fmt).mT
    return torch._scaled_mm(qa, qb, scale_a=scale_a, scale_b=scale_b, out_dtype=a.dtype)


def _configure_mm(params: dict[str, Any]) -> OpFamily:
    return _build_mm(
        ScaledMM(fp8=str(params.get("fp8", "e4m3")), scaling=str(params.get("scaling", "tensor")))
    )


def _build_mm(cfg: ScaledMM) -> OpFamily:
    return replace(
        SCALED_MM,
        make_inputs=_mm_inputs(cfg),
        oracle=_mm_oracle(cfg),
        bound=_mm_bound(cfg),
        mistakes=lambda: _mm_mistakes(cfg),
        composite=lambda a, b, sa, sb, **_: torch_scaled_mm(a, b, sa, sb, fmt=cfg.fp8),
    )


_MM = ScaledMM()
SCALED_MM = OpFamily(
    name="scaled_mm",
    make_inputs=_mm_inputs(_MM),
    oracle=_mm_oracle(_MM),
    mistakes=lambda: _mm_mistakes(_MM),
    bound=_mm_bound(_MM),
    reduction_len=lambda s: s[1],
    float_inputs=(0, 1),
    batch_inputs=(),
    composite=lambda a, b, sa, sb, **_: torch_scaled_mm(a, b, sa, sb),
    configure=_configure_mm,
    input_names=("a", "b", "scale_a", "scale_b"),
    shape_constraints=family_constraints("scaled_mm"),  # CUDA needs k, n divisible by 16; CPU takes any
)


# ---- weight-only quantized GEMM ------------------------------------------------------------------


@dataclass(frozen=True)
class QuantGemm:
    bits: int = 4  # 4 or 8
    group_size: int = 128  # 0: per channel (one group spanning k)
    zero_point: bool = True  # asymmetric (q − zero)·scale; False: symmetric q·scale
    shift: int = 0  # not a param: the mistake of reading group j + shift's scale and zero
    first_group: bool = False  # not a param: the mistake of reading group 0's scale and zero for every column
    zero_sign: int = -1  # not a param: +1 is the mistake of adding the zero-point, (q + zero)·scale

    def group(self, k: int) -> int:
        return self.group_size if 0 < self.group_size < k else k


def _q_inputs(cfg: QuantGemm) -> Callable[..., Tensors]:
    def make(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
        m, k, n = shape
        g = cfg.group(k)
        lo, hi = (0, 2**cfg.bits - 1) if cfg.zero_point else (-(2 ** (cfg.bits - 1)), 2 ** (cfg.bits - 1) - 1)
        q = torch.randint(lo, hi + 1, (n, k), generator=gen, dtype=torch.int8)
        scales = (0.02 * (1 + torch.rand(n, k // g, generator=gen, dtype=torch.float64))).to(dtype)
        mid = (hi + lo) / 2
        zeros = (
            torch.round(mid + torch.randn(n, k // g, generator=gen, dtype=torch.float64))
            if cfg.zero_point
            else torch.zeros(n, k // g, dtype=torch.float64)
        )
        return draw((m, k), dtype, gen, dist), q, scales, zeros.to(dtype)

    return make


def dequantize(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor) -> torch.Tensor:
    """W = (q − zero)·scale with group j covering columns j·g … j·g + g − 1."""
    g = q.shape[-1] // scales.shape[-1]
    s, z = scales.repeat_interleave(g, dim=-1), zeros.repeat_interleave(g, dim=-1)
    return (q.to(s.dtype) - z) * s


def _q_weight(cfg: QuantGemm, q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor) -> torch.Tensor:
    """W as the contract dequantizes it, or as one of its known mistakes does (cfg's non-param fields)."""
    s, z = scales.roll(-cfg.shift, -1), zeros.roll(-cfg.shift, -1)
    if cfg.first_group:
        s, z = s[..., :1].expand_as(s), z[..., :1].expand_as(z)
    return dequantize(q, s, -cfg.zero_sign * z)


def _q_oracle(cfg: QuantGemm) -> Callable[..., torch.Tensor]:
    def oracle(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor) -> torch.Tensor:
        return x @ _q_weight(cfg, q, scales, zeros).T

    return oracle


def _q_bound(cfg: QuantGemm) -> Callable[[Tensors, torch.Tensor, BoundArgs], torch.Tensor]:
    def bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        a, q, scales, zeros = x
        w = _q_weight(cfg, q, scales, zeros)
        # W dequantized in the activation dtype before the GEMM: (q − z) then ·scale, two roundings of |W|
        # (independent, so λ·2u_in·√Σ(x·w)²), then the GEMM's own λ√k·u_acc·|x||W| and the output rounding
        deq = ba.lam * 2 * ba.u_in * ((a * a) @ (w * w).T).sqrt()
        return deq + ba.lam * sqrt(a.shape[-1]) * ba.u_acc * (a.abs() @ w.abs().T) + ba.u_out * y.abs()

    return bound


def _q_mistakes(cfg: QuantGemm) -> tuple[tuple[str, OpFamily], ...]:
    out = [("the scale and zero of the next group (a group index off by one)", replace(cfg, shift=1))]
    # AutoGPTQ's g_idx left at zero: one scale per channel where the contract has one per group
    out.append(("the first group's scale and zero read for every column (one per channel, not per group)",
                replace(cfg, first_group=True)))  # fmt: skip
    if cfg.zero_point:  # AutoAWQ's (q − zero)·scale written with the sign flipped
        out.append(("the zero-point added, (q + zero)·scale, not subtracted", replace(cfg, zero_sign=1)))
    return tuple((what, _build_q(c)) for what, c in out)


def torch_quant_gemm(
    x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor
) -> torch.Tensor:
    """Dequantize in the activation dtype, then F.linear: what an unfused weight-only kernel does."""
    return torch.nn.functional.linear(x, dequantize(q, scales, zeros).to(x.dtype))


def _configure_q(params: dict[str, Any]) -> OpFamily:
    return _build_q(
        QuantGemm(
            bits=int(params.get("bits", 4)),
            group_size=int(params.get("group_size", 128)),
            zero_point=bool(params.get("zero_point", True)),
        )
    )


def _build_q(cfg: QuantGemm) -> OpFamily:
    groups = family_constraints("quant_gemm", {"group_size": cfg.group_size})
    return replace(
        QUANT_GEMM,
        make_inputs=_q_inputs(cfg),
        oracle=_q_oracle(cfg),
        bound=_q_bound(cfg),
        mistakes=lambda: _q_mistakes(cfg),
        shape_constraints=groups,
    )


_Q = QuantGemm()
QUANT_GEMM = OpFamily(
    name="quant_gemm",
    make_inputs=_q_inputs(_Q),
    oracle=_q_oracle(_Q),
    bound=_q_bound(_Q),
    reduction_len=lambda s: s[1],
    float_inputs=(0, 2, 3),
    batch_inputs=(0,),
    composite=torch_quant_gemm,
    configure=_configure_q,
    mistakes=lambda: _q_mistakes(_Q),
    input_names=("x", "qweight", "scales", "zeros"),
    shape_constraints=family_constraints("quant_gemm"),  # k is a whole number of groups
)
