"""The gradient gate: a 16-bit gradient that sums over a reduction (a norm's dγ and dβ over rows, a matmul's
dA and dB) held to what a correct kernel's rounding gives, within the gradient's bound (Liger#950: dγ's block
sums over rows taken in bf16, 3.5-3.9x a correct kernel's error, budget 0.21).

A correct kernel may round each term of the sum to the gradient's dtype (dY·x̂ stored in bf16, as Liger's
llama mode does), sums in the accumulator and rounds the sum once. Per element, s = √(u²·‖terms‖₂²/3 +
ulp²/12) (u the dtype's unit roundoff, ‖terms‖₂ the fp64 terms' norm: ``grad_dot_scale``, ulp the dtype's at
the fp64 gradient) and z = |err|/s; the statistic is rms(z) over every compared element of the case's trials.
Correct kernels measure 0.5 (one rounding) to 1.07 (two roundings per term: the fixed twin of Liger#950); a
sum kept in bf16 over blocks of 16 rows 2.1-2.2 (docs/sensitivity.md#the-gradient-gate-issue-56). Over the
contract's ``tolerance.excess`` (1.5, the forward gate's factor) it fails as ``excess-error`` on that gradient.
A model, not a second reference run: nothing is drawn or run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from kcgate.engine.backward import GRAD_REDUCTION, grad_dot_scale
from kcgate.engine.trial import CaseContext, Trial
from kcgate.numerics.metrics import format_ulp
from kcgate.results.model import Signature
from kcgate.vocab import dtypes

MIN_ELEMENTS = 64  # the statistic's elements, pooled over the trials: fewer and it does not judge
TERM_ROUNDING = 1 / math.sqrt(3)  # a term rounded to nearest, in units of u·|term| (uniform, generous)


@dataclass(frozen=True)
class GradExcess:
    """The gate's measurement on one gradient, pooled over the case's trials."""

    grad: str
    ratio: float  # rms(z) over the elements
    elements: int
    trials: int
    dtype: str
    accumulate: str
    factor: float  # tolerance.excess (1.5 by default), as the forward gate's

    @property
    def over(self) -> bool:
        return self.ratio > self.factor and math.isfinite(self.ratio)

    def summary(self) -> str:
        pooled = f" of {self.trials} trials" if self.trials > 1 else ""
        return (
            f"gradient of {self.grad!r}: error {self.ratio:.3g}x a correct kernel's modelled rounding (its terms "
            f"rounded to {self.dtype}, summed in {self.accumulate}, rounded once; rms statistic over "
            f"{self.elements} elements{pooled}; allowed {self.factor:g}x): more rounding than a correct kernel makes "
            "(partial sums kept in bf16 over blocks of 16 rows, Liger#950, measure 2.1-2.2x)"
        )

    def signature(self) -> Signature:
        return Signature(
            "excess-error",
            self.summary(),
            (
                ("elements", float(self.elements)),
                ("factor", self.factor),
                ("grad", self.grad),
                ("grad_excess_ratio", round(self.ratio, 4)),
            ),
        )


def applies(ctx: CaseContext) -> bool:
    """A backward under the error-bound tolerance with the gate on, a family whose gradients reduce, in a
    dtype coarser than its accumulator (an fp32 gradient's final rounding is the accumulator's own)."""
    c = ctx.contract
    return (
        c.backward
        and c.tolerance.method == "error-bound"
        and c.tolerance.excess > 0
        and ctx.op.name in GRAD_REDUCTION
        and dtypes.unit_roundoff(ctx.case.dtype) > dtypes.unit_roundoff(c.accumulate)
    )


def measure(ctx: CaseContext, ts: Sequence[Trial]) -> list[GradExcess]:
    """Each reduced gradient's statistic over the trials that compared it (enough elements only)."""
    u = dtypes.unit_roundoff(ctx.case.dtype)
    dtype = getattr(torch, ctx.case.dtype)
    out = []
    for name in GRAD_REDUCTION[ctx.op.name]:
        zs = [z for t in ts if (z := _z(ctx, t, name, u, dtype)) is not None]
        n = sum(int(z.numel()) for z in zs)
        if n < MIN_ELEMENTS:
            continue
        rms = float(torch.cat(zs).pow(2).mean().sqrt())
        c = ctx.contract
        out.append(GradExcess(name, rms, n, len(zs), ctx.case.dtype, c.accumulate, c.tolerance.excess))
    return out


def _z(ctx: CaseContext, t: Trial, name: str, u: float, dtype: torch.dtype) -> torch.Tensor | None:
    """|err|/s per finite element of one trial's gradient ``name`` (None where it was not compared)."""
    cmp = t.cmps.get(name)
    if cmp is None or t.dy is None:
        return None
    found = grad_dot_scale(ctx, replace(t, grad=name))  # its scale reads the deciding gradient's name
    if found is None:
        return None
    ref = cmp.ref.detach().to("cpu", torch.float64)
    scale = found[1].detach().to("cpu", torch.float64).reshape(ref.shape)
    ulp = torch.from_numpy(format_ulp(ref.numpy(), dtype))
    s = ((u * TERM_ROUNDING * scale) ** 2 + ulp**2 / 12).sqrt()
    err = cmp.err.detach().to("cpu", torch.float64)
    ok = err.isfinite() & (s > 0)
    return (err[ok] / s[ok]).flatten() if bool(ok.any()) else None


def worst(found: Sequence[GradExcess]) -> GradExcess | None:
    """The gradient furthest over the factor, or None where every one is within it."""
    return max((g for g in found if g.over), key=lambda g: g.ratio, default=None)
