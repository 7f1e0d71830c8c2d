"""Error measurement: ULP distance in the output dtype, abs/rel error, and budget used against a bound.

``budget_used`` = max over elements of |error| / allowed. NaN where the oracle is finite is an
infinite error (a category change, not a large number).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kcgate.results.model import Metrics

_INT_VIEW = {
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float64: torch.int64,
}


def ulp_keys(x: torch.Tensor) -> torch.Tensor:
    """Monotone integer keys of the bit patterns; −0 and +0 are adjacent."""
    if x.dtype not in _INT_VIEW:
        x = x.to(torch.float32)
    bits = x.contiguous().view(_INT_VIEW[x.dtype]).to(torch.int64)
    low = (1 << (x.element_size() * 8 - 1)) - 1  # the magnitude bits
    return bits ^ ((bits >> 63) & low)  # negative patterns (sign-extended): -magnitude - 1, in two ops


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|key(a) − key(b)| as float64, measured in a's dtype (b is rounded to it first)."""
    return (ulp_keys(a) - ulp_keys(b.to(a.dtype))).abs().to(torch.float64)


@dataclass
class Comparison:
    """Elementwise comparison of one output against the oracle (kept as tensors for signatures)."""

    err: torch.Tensor  # |out − ref| in fp64, inf where categories differ
    signed: torch.Tensor  # out − ref (nan where categories differ)
    allowed: torch.Tensor
    ratio: torch.Tensor  # err / allowed
    ulp: torch.Tensor
    ref: torch.Tensor
    finite: bool = False  # known: every element of the output and the reference is finite


def compare(out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor, method: str) -> Comparison:
    """Compare a kernel output with the fp64 oracle under a per-element allowance."""
    o = out.detach().to("cpu")
    o64 = o.to(torch.float64)
    ref = ref.to(torch.float64).expand_as(o64) if ref.shape != o64.shape else ref.to(torch.float64)
    diff = o64 - ref
    if bool(diff.isfinite().all()):  # the usual case: both finite everywhere (the masks below are no-ops)
        ulp = ulp_distance(o, ref) if o.is_floating_point() else diff.abs()
        err, signed, finite = diff.abs(), diff, True
    else:
        (err, signed, ulp), finite = _special(o, o64, ref, diff), False
    if method in ("exact", "ulp"):
        ratio = _ulp_ratio(ulp, allowed, err)
    else:
        ratio = _ratio(err, allowed.to(torch.float64).expand_as(err))
    return Comparison(err, signed, allowed, ratio, ulp, ref, finite)


def _special(
    o: torch.Tensor, o64: torch.Tensor, ref: torch.Tensor, diff: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """err, signed error and ULPs where NaN or Inf occur: matching specials are exact, a category change is
    an infinite error (and a NaN signed error)."""
    same_class = (o64.isnan() == ref.isnan()) & (o64.isinf() == ref.isinf())
    both_special = (o64.isnan() & ref.isnan()) | (o64.isinf() & (o64 == ref))
    diff = torch.where(both_special, torch.zeros_like(o64), diff)
    err = torch.where(same_class, diff.abs(), torch.full_like(o64, float("inf")))
    ulp = ulp_distance(o, ref) if o.is_floating_point() else diff.abs()
    ulp = torch.where(both_special, torch.zeros_like(ulp), ulp)
    ulp = torch.where(same_class, ulp, torch.full_like(ulp, float("inf")))
    return err, torch.where(same_class, diff, torch.nan), ulp


def _ratio(err: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    if bool((allowed > 0).all()):  # the usual case: no zero allowance
        return err / allowed
    safe = torch.where(allowed > 0, allowed, torch.ones_like(allowed))
    return torch.where(allowed > 0, err / safe, torch.where(err > 0, torch.inf, 0.0))


def _ulp_ratio(ulp: torch.Tensor, allowed_ulps: torch.Tensor, err: torch.Tensor) -> torch.Tensor:
    ulp = torch.where(err.isinf(), torch.full_like(ulp, float("inf")), ulp)
    return _ratio(ulp, allowed_ulps.to(torch.float64).expand_as(ulp))


def to_metrics(cmp: Comparison, extra: dict[str, float] | None = None) -> Metrics:
    """Summarize a comparison; the worst element is the one with the largest err/allowed."""
    ratio = cmp.ratio.flatten()
    n = ratio.numel()
    if n == 0:
        return Metrics(budget_used=0.0, elements=0, extra=tuple(sorted((extra or {}).items())))
    budget = float(ratio.max().item())
    finite = math.isfinite(budget)  # no NaN (max propagates it) and no inf: argmax needs no nan_to_num
    worst = int(ratio.argmax() if finite else torch.nan_to_num(ratio, nan=float("inf")).argmax())
    idx = _unravel(worst, cmp.ratio.shape)
    mag = cmp.ref.flatten().abs()
    nz = mag > 0
    if bool(nz.all()):  # the usual case: no zero in the reference (no mask to apply)
        rel = (cmp.err.flatten() / mag).max().item()
    else:
        rel = (cmp.err.flatten()[nz] / mag[nz]).max().item() if bool(nz.any()) else 0.0
    allowed = cmp.allowed.to(torch.float64).expand_as(cmp.ratio)[idx]
    return Metrics(
        budget_used=budget,
        max_abs_err=float(cmp.err.max().item()),
        max_rel_err=float(rel),
        max_ulp=float(cmp.ulp.max().item()),
        mismatches=int((ratio > 1).sum().item()),
        elements=n,
        worst_index=idx,
        allowed_at_worst=float(allowed.item()),
        extra=tuple(sorted((extra or {}).items())),
    )


def _unravel(flat: int, shape: torch.Size) -> tuple[int, ...]:
    """The multi-index of a flat index (``torch.unravel_index`` costs 0.3 s on first use: it imports sympy)."""
    idx = []
    for dim in reversed(shape):
        flat, i = divmod(flat, dim)
        idx.append(i)
    return tuple(reversed(idx))


def merge_metrics(ms: list[Metrics]) -> Metrics:
    """The worst of several trials (by budget used), with mismatches and elements summed."""
    worst = max(ms, key=lambda m: -1.0 if m.budget_used is None else m.budget_used)
    return Metrics(
        budget_used=worst.budget_used,
        max_abs_err=max((m.max_abs_err for m in ms if m.max_abs_err is not None), default=None),
        max_rel_err=max((m.max_rel_err for m in ms if m.max_rel_err is not None), default=None),
        max_ulp=max((m.max_ulp for m in ms if m.max_ulp is not None), default=None),
        mismatches=sum(m.mismatches for m in ms),
        elements=sum(m.elements for m in ms),
        worst_index=worst.worst_index,
        allowed_at_worst=worst.allowed_at_worst,
        extra=worst.extra,
    )
