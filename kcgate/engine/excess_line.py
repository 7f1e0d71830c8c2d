"""The sensitivity gate's line (issue 46): when an excess over the least accurate correct implementation fails
a case, and the note a case below the line passes with (docs/sensitivity.md#the-line)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from kcgate.engine.sensitivity import Array, Errors, Excess, reference_name
from kcgate.engine.trial import CaseContext
from kcgate.numerics.metrics import sum_squares
from kcgate.vocab.catalogue import has

CONFIDENCE = (
    0.99  # one-sided: the rms statistic fails only where its lower confidence bound exceeds the factor
)
# Student's t at 0.99 one-sided by degrees of freedom (a df between two rows takes the smaller row's,
# larger t: conservative); beyond the table the normal quantile
T99 = {1: 31.82, 2: 6.965, 3: 4.541, 4: 3.747, 5: 3.365, 6: 3.143, 7: 2.998, 8: 2.896, 9: 2.821,
       10: 2.764, 12: 2.681, 15: 2.602, 20: 2.528, 30: 2.457, 60: 2.390, 120: 2.358}  # fmt: skip
Z99 = 2.326
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

    def extra(self) -> dict[str, float]:
        return {"excess_rms_lower": self.rms_lower, "excess_clusters": float(self.clusters)}


def t99(df: int) -> float:
    """Student's t quantile at CONFIDENCE for ``df`` degrees of freedom (T99's nearest row at or below)."""
    if df < 1:
        return math.inf
    if df > max(T99):
        return Z99
    return T99[max(k for k in T99 if k <= df)]


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


def below_the_line(worst: Excess, measured: list[Excess], ev: Evidence | None) -> str:
    """ "" when the evidence carries a failure; otherwise the note the passing case records (a
    ``kcgate.results.records.PASS_NOTES`` prefix). The line, in order:

    * inconclusive where the least accurate correct implementation keeps fewer than 4 correct bits of the
      output (rms error ≥ CONDITIONING × rms output): a ratio of such errors compares noise with noise;
    * the max statistic fails as before: one element beyond every correct implementation's largest error
      and twice the Gaussian tail √(2 ln 2N) at their rms is significant by itself (p < 1e-6 for N ≥ 64);
    * the rms statistic fails only when its lower CONFIDENCE bound, pooled over the trials with rows as the
      independent units, exceeds the factor on the least accurate correct implementation, and every trial's
      own ratio does (consistent over independent inputs);
    * anything else passes with a limitation note: a ratio above the factor that the evidence does not carry."""
    if worst.out_rms > 0 and worst.ref_rms >= CONDITIONING * worst.out_rms:
        return (
            f"inconclusive: {worst.tensor}: the correct implementations' rms error is "
            f"{worst.ref_rms / worst.out_rms:.2g} of the output's rms (fewer than 4 correct bits), so its "
            f"error {max(worst.rms_ratio, worst.max_ratio):.3g}x theirs cannot tell a wrong kernel from a "
            "correct one; passes, tracked as drift"
        )
    if any(e.max_ratio > e.factor for e in measured):
        return ""
    if ev is None:  # Freivalds' residuals: its own statistics, as before
        return "" if worst.rms_ratio > worst.factor else _limitation(worst, ev)
    if ev.rms_lower > worst.factor and all(e.rms_ratio > e.factor for e in measured):
        return ""
    return _limitation(worst, ev)


def _limitation(worst: Excess, ev: Evidence | None) -> str:
    pooled = (
        f"; over the case's trials {ev.rms_ratio:.3g}x, {CONFIDENCE:.0%} lower bound {ev.rms_lower:.3g}x "
        f"from {ev.clusters} independent rows"
        if ev is not None
        else ""
    )
    return (
        f"limitation: {worst.tensor}: error {worst.rms_ratio:.3g}x {worst.against()} on the worst trial"
        f"{pooled} (allowed {worst.factor:g}x): above the line on one trial, but not significant at "
        f"{CONFIDENCE:.0%} or not consistent across trials; passes, tracked as drift"
    )


def ratio_bound(a: np.ndarray, b: np.ndarray) -> Evidence:
    """√(Σa/Σb) and its lower confidence bound, from per-cluster sums of squares a (kernel) and b (limit)."""
    c, total_a, total_b = int(a.size), float(a.sum()), float(b.sum())
    if total_b <= 0:
        big = math.inf if total_a > 0 else 0.0
        return Evidence(big, big, c)
    r = total_a / total_b
    if c < 2:
        return Evidence(math.sqrt(r), 0.0, c)
    se = math.sqrt(c / (c - 1) * float(np.square(a - r * b).sum())) / total_b
    return Evidence(math.sqrt(r), math.sqrt(max(r - t99(c - 1) * se, 0.0)), c)


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
