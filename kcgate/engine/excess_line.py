"""The sensitivity gate's line (issue 46): when an excess over the least accurate correct implementation fails
a case, and the note a case below the line passes with (docs/sensitivity.md#the-line)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from kcgate.engine import sequential
from kcgate.engine.sensitivity import Array, Errors, Excess, reference_name
from kcgate.engine.trial import CaseContext
from kcgate.numerics.metrics import sum_squares
from kcgate.vocab.catalogue import has

# one-sided, at each look of the sequential bound (kcgate.engine.sequential): the rms statistic fails only
# where its lower bound exceeds the factor, and is decided within it only where its upper bound is at or below
CONFIDENCE = sequential.LOOK_CONFIDENCE
# the least accurate correct implementation's rms error at or above this share of the output's rms: the
# outputs keep fewer than 4 correct bits, and a ratio of such errors compares noise with noise (inconclusive)
CONDITIONING = 1 / 16


@dataclass(frozen=True)
class Evidence:
    """The rms statistic pooled over a case's trials, with its confidence: the errors of one output row
    share its row statistic (a norm's mean, a softmax's sum, an attention row's max), so rows, not elements,
    are the independent units (``clusters``); 3 rows of 1021 are 3 observations, not 3063."""

    rms_ratio: float  # rms(z_kernel) / rms(z_limit) over every trial's counted elements
    rms_lower: float  # its one-sided CONFIDENCE lower bound
    clusters: int  # the independent units counted (rows or elements, over the trials)
    rms_upper: float = math.inf  # its one-sided CONFIDENCE upper bound

    def extra(self) -> dict[str, float]:
        upper = {"excess_rms_upper": self.rms_upper} if math.isfinite(self.rms_upper) else {}
        return {"excess_rms_lower": self.rms_lower, "excess_clusters": float(self.clusters), **upper}


def evidence(ctx: CaseContext, parts: list[Errors]) -> Evidence | None:
    """The rms ratio over all the trials' errors against the limiting correct implementation (the one whose
    pooled rms z is largest, or the rounding / sequential floor), and its lower confidence bound from the
    spread of per-cluster ratios (a ratio estimator's linearised standard error, Student's t with C − 1
    degrees of freedom). None without parts."""
    if not parts:
        return None
    own_ran = any(p.primary for p in parts)
    seq = reference_name(ctx, own_ran) != "composite"
    names = [name for name, _ in parts[0].refs if all(name in dict(p.refs) for p in parts)]

    def limit_z(p: Errors, name: str | None) -> Array | None:
        if name is None:
            return None if seq else p.rounding
        return dict(p.refs)[name]

    def pooled_sq(name: str | None) -> float:
        return sum(float(p.n) if (x := limit_z(p, name)) is None else _sq(x) for p in parts)

    best = max([None, *names], key=pooled_sq)
    rows = _row_clusters(ctx)
    a, b = [], []
    for p in parts:
        ids, counts = _clusters(p, rows)
        a.append(_by_cluster(p.z, ids, counts))
        x = limit_z(p, best)
        b.append(counts.astype(np.float64) if x is None else _by_cluster(x, ids, counts))
    return ratio_bound(np.concatenate(a), np.concatenate(b))


def decide(
    worst: Excess, measured: list[Excess], ev: Evidence | None, final: bool
) -> tuple[sequential.Decision, str]:
    """The gate's decision at one look of the sequential test (kcgate.engine.sequential), and the note a
    passing case records (a ``kcgate.results.records.PASS_NOTES`` prefix, or ""). In order:

    * not near the line where no trial's statistic reaches NEAR_EXCESS of the factor (the kernel's error at
      most the least accurate correct implementation's): passes;
    * inconclusive where the least accurate correct implementation keeps fewer than 4 correct bits of the
      output (rms error ≥ CONDITIONING × rms output) and a trial is over the factor: a ratio of such errors
      compares noise with noise, and more trials do not change that;
    * the max statistic (one element beyond every correct implementation's largest error and twice the
      Gaussian tail √(2 ln 2N) at their rms): Wald's SPRT on the trials whose max crosses the factor fails
      the case once the crossings are significant (``sequential.crossings``);
    * the rms statistic, pooled over the trials with rows as the independent units: fails when its lower
      CONFIDENCE bound exceeds the factor on the least accurate correct implementation, is decided within it
      when its upper bound is at or below the factor;
    * undecided: "more" trials, or at the ``final`` look, passes as **inconclusive**: never blocks, shown."""
    factor = worst.factor
    if worst.ratio > 1 and worst.out_rms > 0 and worst.ref_rms >= CONDITIONING * worst.out_rms:
        return sequential.PASS, (
            f"inconclusive: {worst.tensor}: the correct implementations' rms error is "
            f"{worst.ref_rms / worst.out_rms:.2g} of the output's rms (fewer than 4 correct bits), so its "
            f"error {max(worst.rms_ratio, worst.max_ratio):.3g}x theirs cannot tell a wrong kernel from a "
            "correct one; passes, tracked as drift"
        )
    if worst.ratio <= sequential.NEAR_EXCESS:  # every error at most the correct implementations': not near
        return sequential.PASS, ""
    on_max = sequential.crossings(sum(e.max_ratio > e.factor for e in measured), len(measured))
    if ev is None:  # Freivalds' residuals: its own statistics, one look, as before
        if on_max != sequential.PASS or worst.rms_ratio > factor:
            return sequential.FAIL, ""
        return sequential.PASS, ""
    on_rms = sequential.bounded(ev.rms_lower, ev.rms_upper, factor)
    if sequential.FAIL in (on_max, on_rms):
        return sequential.FAIL, ""
    if on_max == on_rms == sequential.PASS:
        return sequential.PASS, ""
    if not final:
        return sequential.MORE, ""
    return sequential.PASS, _inconclusive(worst, measured, ev)


def _inconclusive(worst: Excess, measured: list[Excess], ev: Evidence) -> str:
    crossed = sum(e.max_ratio > e.factor for e in measured)
    return (
        f"inconclusive: {worst.tensor}: error {max(worst.rms_ratio, worst.max_ratio):.3g}x "
        f"{worst.against()} on the worst of {len(measured)} trials; over them {ev.rms_ratio:.3g}x, "
        f"{CONFIDENCE:.2%} bounds {ev.rms_lower:.3g}x to {ev.rms_upper:.3g}x from {ev.clusters} independent "
        f"rows, max statistic over the factor on {crossed} of {len(measured)} (allowed {worst.factor:g}x): "
        f"undecided after {sequential.MAX_EXTRA} more trials at most; passes, never blocks, tracked as drift"
    )


def ratio_bound(a: np.ndarray, b: np.ndarray) -> Evidence:
    """√(Σa/Σb) and its CONFIDENCE lower and upper bounds, from per-cluster sums of squares a (kernel) and b
    (limit): a ratio estimator's linearised standard error, Student's t with C − 1 degrees of freedom, on
    the log scale."""
    c, total_a, total_b = int(a.size), float(a.sum()), float(b.sum())
    if total_b <= 0:
        big = math.inf if total_a > 0 else 0.0
        return Evidence(big, big, c, big)
    r = total_a / total_b
    if c < 2:
        return Evidence(math.sqrt(r), 0.0, c)
    if r <= 0:
        return Evidence(0.0, 0.0, c, 0.0)
    se = math.sqrt(c / (c - 1) * float(np.square(a - r * b).sum())) / total_b
    # on the log scale (the delta method: SE(ln R) = SE/R), where a ratio's sampling error is closer to
    # symmetric: each side's error at a look is then near its nominal 1 - CONFIDENCE, down to 3 rows a trial
    half = sequential.t_look(c - 1) * se / r
    return Evidence(math.sqrt(r), math.sqrt(r * math.exp(-half)), c, math.sqrt(r * math.exp(half)))


def _row_clusters(ctx: CaseContext) -> bool:
    """Rows are the units where a row statistic is shared (norms, softmax, attention, rope's positions);
    a product's or a sum's elements err independently (each its own dot product or row sum)."""
    name = ctx.op.name
    independent = has(name, "plain_product") or name == "linear" or ctx.op.reduction_len(ctx.case.shape) <= 1
    return not independent or name == "rope"


def _clusters(p: Errors, rows: bool) -> tuple[Array | None, np.ndarray]:
    """Each counted element's cluster (None: consecutive runs of the row length, every element counted)
    and each cluster's element count (host numpy)."""
    row = int(p.shape[-1]) if rows and len(p.shape) >= 2 and p.shape[-1] > 0 else 1
    if p.flat is None:
        return None, np.full(p.n // row, row, dtype=np.int64)
    flat = p.flat.cpu().numpy() if isinstance(p.flat, torch.Tensor) else np.asarray(p.flat)
    _, inverse, counts = np.unique(flat // row, return_inverse=True, return_counts=True)
    return inverse, counts


def _by_cluster(z: Array, ids: np.ndarray | None, counts: np.ndarray) -> np.ndarray:
    """Σ z² per cluster, as a host float64 array (one small array back from a device)."""
    sq = z * z
    if ids is None:
        out = sq.reshape(counts.size, -1).sum(-1)
    elif isinstance(sq, torch.Tensor):
        idx = torch.as_tensor(ids, device=sq.device)
        out = torch.zeros(counts.size, dtype=sq.dtype, device=sq.device).index_add_(0, idx, sq)
    else:
        out = np.bincount(ids, weights=sq, minlength=counts.size)
    return out.double().cpu().numpy() if isinstance(out, torch.Tensor) else np.asarray(out, dtype=np.float64)


def _sq(z: Array) -> float:
    return float(z.dot(z)) if isinstance(z, torch.Tensor) else sum_squares(z)
