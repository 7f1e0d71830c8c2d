"""Violation signatures: turn measured error evidence into a named cause (``results.Signature``).

The classifiers are small pure functions over tensors (testable with injected faults, see
docs/signature-accuracy.md); ``diagnose`` picks the first that fires for a failed case.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from kcgate.results import Signature

CAUSES: dict[str, str] = {
    "low-precision-accumulator": "accumulation happens at fewer bits than declared (fitted from error vs K)",
    "operand-truncation": "operands rounded to fewer mantissa bits before the multiply (TF32-, bf16-like)",
    "biased-rounding": "errors share a sign and grow ~K, not ~√K (truncation, round toward zero, stagnation)",
    "cancellation": "catastrophic cancellation: the error scales with |mean|/std or the inputs' offset",
    "overflow": "an intermediate overflowed (inf or NaN where the oracle is finite)",
    "approximation": "a smooth, systematic error over the input range (a fast-math approximation)",
    "order-dependence": "the result depends on the reduction order beyond the non-associativity bound",
    "nondeterminism": "identical calls return different bits",
    "batch-dependence": "a row's result depends on batch size, position or batch-mates",
    "tail-pattern": "errors concentrated in the last partial tile",
    "tile-pattern": "errors repeat with a tile period along an index",
    "nan-pattern": "NaN/Inf appear or vanish against the declared policy",
    "subnormal-flush": "subnormal inputs or outputs flushed to zero against the declared policy",
    "out-of-bounds": "out-of-range indices or accesses not handled per the declared policy",
    "stale-output": "the output was not computed from this call's inputs (a stale buffer)",
    "input-mutation": "the kernel modified its inputs",
    "wrong-dtype": "the output's dtype differs from the declared out_dtype",
    "missing-gradient": "the backward gave no gradient for a differentiated input (or the output has no graph)",
    "zero-gradient": "the backward returned all zeros for a gradient that is not zero",
    "shape-overfitting": "correct at the declared shapes, wrong at held-out shapes of the same class",
    "wrong-semantics": "the output is the op under other semantics (a dropped mask, another layout, a shifted "
    "group index): the family's known mistakes, each matched against its own oracle",
    "exceeds-bound": "error beyond the derived bound with no more specific pattern",
    "excess-error": "within the bound, but the error exceeds a correct implementation's on the same inputs",
}

# Significand bits (with the implicit bit) of the formats an accumulator or operand path may use.
FORMAT_BITS: dict[str, int] = {"fp32": 24, "fp16 or tf32": 11, "bf16": 8, "fp8 e4m3": 4}
# err_rms ≈ C·√K·u·‖a∘b‖₂ for a running sum rounded every 32 terms (the MMA-tile granularity);
# C was fitted once on emulated fp16/bf16 accumulators so their effective bits come out as 11 and 8.
_ACC_C = 0.0588


def sig(cause: str, summary: str, **evidence: float | str) -> Signature:
    return Signature(cause, summary, tuple(sorted(evidence.items())))


# ---- accumulator width -------------------------------------------------------------------------


def normalized_error(err: torch.Tensor, scale: torch.Tensor) -> float:
    """rms of err/scale over elements with a positive scale (scale = ‖a∘b‖₂ per output element)."""
    ok = (scale > 0) & err.isfinite()
    if not bool(ok.any()):
        return math.nan
    return float(((err[ok] / scale[ok]) ** 2).mean().sqrt())


def fit_accumulator(ks: Sequence[int], nerr: Sequence[float]) -> tuple[float, float]:
    """(effective bits, log-log slope of normalized error vs K) from a K sweep."""
    pts = [(k, e) for k, e in zip(ks, nerr) if e > 0 and math.isfinite(e)]
    if not pts:
        return math.inf, math.nan
    us = [e / (_ACC_C * math.sqrt(k)) for k, e in pts]  # nerr = err/‖a∘b‖₂ ≈ C·√K·u
    bits = -sum(math.log2(u) for u in us) / len(us)
    slope = _slope([math.log(k) for k, _ in pts], [math.log(e) for _, e in pts]) if len(pts) > 1 else math.nan
    return bits, slope


def _slope(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else math.nan


def nearest_format(bits: float) -> str:
    return min(FORMAT_BITS, key=lambda f: abs(FORMAT_BITS[f] - bits))


def accumulator_signature(ks: Sequence[int], nerr: Sequence[float], declared_bits: int) -> Signature | None:
    """ "behaves like an fp16 accumulator (≈11 bits)" when the fitted width is well below the declared one."""
    bits, slope = fit_accumulator(ks, nerr)
    if not math.isfinite(bits) or bits > declared_bits - 3:
        return None
    # error vs K: √K-like growth is 0.5 in K·u/‖a∘b‖ units, i.e. slope ≈ 0.5 healthy, ≈ 1 biased
    if math.isfinite(slope) and slope > 0.8:
        return sig(
            "biased-rounding",
            f"error grows like K^{slope:.2f} (biased rounding), ≈{bits:.1f} effective bits",
            effective_bits=round(bits, 2),
            slope=round(slope, 3),
        )
    fmt = nearest_format(bits)
    return sig(
        "low-precision-accumulator",
        f"behaves like a {fmt} accumulator (≈{bits:.1f} effective bits)",
        effective_bits=round(bits, 2),
        nearest=fmt,
        slope=round(slope, 3) if math.isfinite(slope) else "",
    )


def dot_scale(op: str, inputs: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """‖a∘b‖₂ per output element for dot-product ops (None where the op is not a plain dot/sum)."""
    f = [t.to(torch.float64) for t in inputs]
    if op in ("matmul", "bmm"):
        return ((f[0] ** 2) @ (f[1] ** 2)).sqrt()
    if op == "linear":
        return ((f[0] ** 2) @ (f[1] ** 2).T + f[2] ** 2).sqrt()
    if op in ("sum", "mean"):
        s = (f[0] ** 2).sum(-1).sqrt()
        return s / f[0].shape[-1] if op == "mean" else s
    return None


# ---- operand rounding, bias, patterns --------------------------------------------------------------


def round_operands(t: torch.Tensor, bits: int, mode: str) -> torch.Tensor:
    from kcgate.kernels.emulate import round_mantissa

    return round_mantissa(t, bits - 1, mode).to(torch.float64)


def operand_signature(
    out: torch.Tensor,
    ref: torch.Tensor,
    inputs: Sequence[torch.Tensor],
    oracle: Any,
    float_inputs: Sequence[int],
) -> Signature | None:
    """Does the output match the oracle on operands rounded to 11 or 8 bits far better than the exact one?"""
    o = out.to(torch.float64)
    e_exact = _rms(o - ref)
    if not e_exact > 0:
        return None
    best = None
    for name, bits in (("tf32", 11), ("bf16", 8)):
        for mode in ("truncate", "nearest"):
            xs = [round_operands(t, bits, mode) if i in float_inputs else t for i, t in enumerate(inputs)]
            e = _rms(o - oracle(*xs).to(torch.float64))
            if e < 0.25 * e_exact and (best is None or e < best[0]):
                best = (e, name, bits, mode)
    if best is None:
        return None
    e, name, bits, mode = best
    return sig(
        "operand-truncation",
        f"operands rounded to {bits} bits ({name}-like, {'truncated' if mode == 'truncate' else 'rounded'})",
        operand_bits=float(bits),
        residual_ratio=round(e / e_exact, 4),
        mode=mode,
    )


def _rms(x: torch.Tensor) -> float:
    x = x[x.isfinite()]
    return float((x**2).mean().sqrt()) if x.numel() else math.nan


def bias_signature(signed: torch.Tensor, ref: torch.Tensor) -> Signature | None:
    """Errors that push magnitudes one way: mean of sign(ref)·error well away from 0 relative to its spread."""
    d = (signed * ref.sign()).flatten()
    d = d[d.isfinite()]
    if d.numel() < 16 or not bool((d != 0).any()):
        return None
    t = float(d.mean() / (d.std() / math.sqrt(d.numel()) + 1e-300))
    frac = float((d != 0).float().mean())
    if abs(t) < 8 or frac < 0.1:
        return None
    direction = "toward zero" if t < 0 else "away from zero"
    return sig(
        "biased-rounding",
        f"biased rounding {direction} (mean error t = {t:.1f})",
        t_statistic=round(t, 2),
        direction=direction,
    )


def tail_signature(ratio: torch.Tensor) -> Signature | None:
    """Violations concentrated in a suffix of the last dimension: a tail tile mishandled."""
    if ratio.dim() == 0 or ratio.shape[-1] < 4:
        return None
    bad_cols = (ratio > 1).reshape(-1, ratio.shape[-1]).any(0)
    if not bool(bad_cols.any()) or bool(bad_cols.all()):
        return None
    n = bad_cols.numel()
    first = int(bad_cols.nonzero()[0])
    if not bool(bad_cols[first:].all()):
        return periodic_signature(bad_cols)
    tail = n - first
    return sig(
        "tail-pattern",
        f"errors only in the last {tail} of {n} columns (a mishandled tail tile)",
        tail_columns=float(tail),
        columns=float(n),
    )


def periodic_signature(bad_cols: torch.Tensor) -> Signature | None:
    idx = bad_cols.nonzero().flatten()
    for period in (8, 16, 32, 64, 128):
        if (
            bad_cols.numel() >= 2 * period
            and idx.numel() > 1
            and bool(((idx % period) == idx[0] % period).all())
        ):
            return sig(
                "tile-pattern",
                f"errors repeat every {period} columns (a tile-period pattern)",
                period=float(period),
            )
    return None


def nan_signature(out: torch.Tensor, ref: torch.Tensor) -> Signature | None:
    """NaN/Inf introduced where the oracle is finite, or swallowed where the oracle is not."""
    o = out.to(torch.float64)
    introduced = int((~o.isfinite() & ref.isfinite()).sum())
    swallowed = int((o.isfinite() & ~ref.isfinite()).sum())
    if swallowed:
        return sig(
            "nan-pattern",
            f"{swallowed} non-finite result(s) replaced by finite values (NaN/Inf swallowed)",
            swallowed=float(swallowed),
            introduced=float(introduced),
        )
    if introduced:
        cause = "overflow" if bool(o.isinf().any()) or bool(ref.abs().max() < 1e30) else "nan-pattern"
        return sig(
            cause, f"{introduced} NaN/Inf result(s) where the oracle is finite", introduced=float(introduced)
        )
    return None


# ---- the entry point used by kcgate.checks.verdict -------------------------------------------------


def diagnose(ctx: Any, ts: Sequence[Any]) -> Signature | None:
    """Name the failure mode of a failed case from its trials (the most specific classifier first)."""
    worst = max(
        (t for t in ts if t.cmp is not None), key=lambda t: t.metrics.budget_used or math.inf, default=None
    )
    if worst is None:
        return None
    cmp = worst.cmp
    for found in (
        nan_signature(worst.out, cmp.ref),
        semantics_signature(ctx, worst),
        tail_signature(cmp.ratio),
        _operand(ctx, worst),
        _accumulator(ctx, ts),
        bias_signature(cmp.signed, cmp.ref),
    ):
        if found is not None:
            return found
    b = worst.metrics.budget_used
    return sig(
        "exceeds-bound",
        f"error {'inf' if b is None else f'{b:.3g}'}× the allowed bound, no specific pattern",
        budget_used=b if b is not None else "inf",
    )


def semantics_signature(ctx: Any, trial: Any) -> Signature | None:
    """The forward output within the bound of one of the family's known mistakes (``OpFamily.mistakes``):
    "matches the op with the causal mask dropped"."""
    if trial.grad or getattr(ctx.op, "mistakes", None) is None or trial.out is None:
        return None
    if ctx.contract.tolerance.method not in ("error-bound", "relative"):
        return None  # the allowance must be an absolute error to hold another oracle to it
    up = tuple(t.to(torch.float64) if t.is_floating_point() else t for t in trial.inputs)
    for what, family in ctx.op.mistakes():
        with torch.no_grad():
            alt = family.oracle(*up).to(torch.float64)
            allowed = family.bound(up, alt, ctx.bound_args())
        if alt.shape != trial.out.shape:
            continue
        err = (trial.out.to(torch.float64) - alt).abs()
        there = float((err / allowed.clamp_min(1e-300)).nan_to_num(nan=math.inf).max())
        if there <= 1:
            return sig(
                "wrong-semantics",
                f"matches the op with {what} (budget {there:.2g} against it)",
                mistake=what,
                budget_there=round(there, 4),
            )
    return None


def _operand(ctx: Any, trial: Any) -> Signature | None:
    if ctx.op.name not in ("matmul", "bmm", "linear") or trial.grad:
        return None
    return operand_signature(trial.out, trial.cmp.ref, trial.inputs, ctx.op.oracle, ctx.op.float_inputs)


def _accumulator(ctx: Any, ts: Sequence[Any]) -> Signature | None:
    from kcgate import dtypes

    pts = []
    for t in ts:
        if t.grad:  # the trial is decided by a gradient: fit its own reduction
            from kcgate.backward import grad_dot_scale

            found = grad_dot_scale(ctx, t) if t.cmp is not None else None
            if found is not None:
                pts.append((found[0], normalized_error(t.cmp.err, found[1])))
            continue
        scale = dot_scale(ctx.op.name, t.inputs) if t.cmp is not None else None
        if scale is not None:
            pts.append((ctx.op.reduction_len(t.shape), normalized_error(t.cmp.err, scale)))
    if not pts:
        return None
    pts.sort()
    declared = dtypes.FORMATS[dtypes.canonical(ctx.contract.accumulate)].p
    return accumulator_signature([k for k, _ in pts], [e for _, e in pts], declared)
