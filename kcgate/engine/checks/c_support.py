"""Shared measurement helpers for the class checks (kcgate.engine.checks.c_*): reduction-axis handling,
bitwise comparisons, and folding an extra measured budget into a Finding.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from kcgate.engine.checks import Finding
from kcgate.engine.trial import CaseContext
from kcgate.numerics.metrics import f64, format_ulp, tensor, ulp_distance
from kcgate.results.model import UNEVALUATED, Signature, Status
from kcgate.vocab import dtypes
from kcgate.vocab.catalogue import CATALOGUE

# Which input dimension is the reduction axis, per op family: {input index: dim}. Permuting it (in the
# same way on every listed input) is a valid reordering of the same mathematical sum.
REDUCTION_AXES: dict[str, dict[int, int]] = {
    n: op.reduction_axes for n, op in CATALOGUE.items() if op.reduction_axes
}
# Position of the reduction length in the case shape.
SHAPE_K: dict[str, int] = {n: op.k_dim for n, op in CATALOGUE.items() if op.k_dim is not None}


def permute_reduction(
    op: str, inputs: tuple[torch.Tensor, ...], perm: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    axes = REDUCTION_AXES[op]
    return tuple(t.index_select(axes[i] % t.dim(), perm) if i in axes else t for i, t in enumerate(inputs))


def with_k(op: str, shape: tuple[int, ...], k: int) -> tuple[int, ...]:
    """The case shape with its reduction length replaced by k."""
    s = list(shape)
    s[SHAPE_K[op]] = k
    return tuple(s)


def bitwise_budget(a: torch.Tensor, b: torch.Tensor) -> float:
    """2 × the largest ULP distance: a bitwise postcondition allows half an ulp, so one ulp is budget 2."""
    if a.shape != b.shape:
        return float("inf")
    both_nan = a.isnan() & b.isnan()
    d = torch.where(both_nan, torch.zeros((), dtype=torch.float64), ulp_distance(a, b))
    return 2.0 * float(d.max()) if d.numel() else 0.0


def count_budget(violations: int) -> float:
    """Discrete postconditions (policies) also allow half a unit: one violation uses budget 2."""
    return 2.0 * violations


def fold(
    finding: Finding,
    budget: float,
    signature: Signature | None,
    message: str,
    extra: dict[str, float] | None = None,
) -> Finding:
    """Combine the within-bound finding with a class-specific budget: the worse of the two decides."""
    metrics = finding.metrics
    if extra:
        metrics = replace(metrics, extra=tuple(sorted({**dict(metrics.extra), **extra}.items())))
    if finding.status in UNEVALUATED:
        return replace(finding, metrics=metrics)
    base = metrics.budget_used
    if budget <= 1.0:
        return replace(finding, metrics=metrics)
    worst = budget if base is None or budget > base else base
    metrics = replace(metrics, budget_used=None if worst == float("inf") else worst)
    if finding.status == Status.FAIL and (base is None or base >= budget):
        return replace(finding, metrics=metrics, signature=finding.signature or signature)
    return Finding(Status.FAIL, metrics, signature, message)


def out_ulp(ref: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """The output format's ulp at |ref| (normal range; subnormals use the smallest normal's ulp)."""
    return tensor(format_ulp(f64(ref), out_dtype))


def rne(ref: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """The exact value rounded to nearest even on the output format's grid (no overflow handling):
    computed by kcgate in fp64, not by a torch cast (ref/ulp is exact, torch.round ties to even)."""
    ulp = out_ulp(ref, out_dtype)
    return torch.round(ref / ulp) * ulp


def rounding_slack(ctx: CaseContext, inputs: tuple[torch.Tensor, ...], ref: torch.Tensor) -> torch.Tensor:
    """The compute precision's own error, absolute: a few roundings of |y|, or of |x| where 1 + erf(x)
    style terms cancel. RNE can only be pinned down to that."""
    scale = ref.abs()
    x = inputs[0]
    if x.is_floating_point() and x.shape == ref.shape:
        scale = torch.maximum(scale, x.to(torch.float64).abs())
    return 8 * dtypes.unit_roundoff(ctx.contract.accumulate) * scale
