"""A candidate sensitivity gate for custom ops, measured here and not shipped: the kernel's error against the
derived bound's own Monte Carlo samples (rounding-model implementations of the reference), per row, on the
families' line (kcgate.engine.excess_line: a 99% one-sided lower bound above the factor). docs/derived-bound.md
says why it is not in kcgate run (torch's own fp32 gelu fails the weighted form).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from kcgate.engine.excess_line import CONDITIONING, CONFIDENCE, Evidence, ratio_bound

SQRT3 = math.sqrt(3.0)  # one rounding modelled as u·|y|·U(−1, 1): its rms is u·|y|/√3


@dataclass(frozen=True)
class RowSums:
    """One trial's tensor as the gate counts it: per row, Σ z² of the kernel's error and the number of counted
    elements (the limit's Σ z², z = 1 per element), and the rms of the limit's error and of the reference."""

    kernel: np.ndarray
    limit: np.ndarray
    limit_rms: float
    ref_rms: float


@dataclass(frozen=True)
class Verdict:
    """The gate's reading of one tensor over a case's trials."""

    tensor: str
    evidence: Evidence
    trial_ratios: tuple[float, ...]
    factor: float
    inconclusive: bool

    @property
    def failed(self) -> bool:
        """Significant (the pooled lower bound above the factor) and consistent (every trial above it)."""
        if self.inconclusive or not self.trial_ratios:
            return False
        return self.evidence.rms_lower > self.factor and all(r > self.factor for r in self.trial_ratios)

    def message(self) -> str:
        ev = self.evidence
        return (
            f"{self.tensor}: error {ev.rms_ratio:.3g}x the rms error of the derived bound's rounding-model "
            f"samples ({CONFIDENCE:.0%} lower bound {ev.rms_lower:.3g}x from {ev.clusters} rows, every trial "
            f"above {self.factor:g}x): within the bound, but systematically less accurate than any "
            "implementation that rounds only where the reference's model allows (a formula or cast order that "
            "differs below one rounding)"
        )


def row_sums(
    err: torch.Tensor, spread: torch.Tensor, ref: torch.Tensor, u_out: float, weighted: bool
) -> RowSums | None:
    """A tensor's per-row sums, with s the samples' rms error σ̂, at least one output rounding's
    (u_out·|ref|/√3): ``weighted``, Σ (err/s)² against the count (the family gate's z); otherwise Σ err²
    against Σ s² (the row's rms error against the samples'). Elements with s = 0 (values moved exactly: the
    bound alone judges them) or a non-finite error are not counted. Rows are the last dimension (a row shares
    its statistic: a norm's rms, a softmax's sum); None when nothing is counted."""
    ref = ref.reshape(err.shape).double()
    s = torch.maximum(spread.reshape(err.shape).double(), u_out * ref.abs() / SQRT3)
    keep = (s > 0) & err.isfinite() & s.isfinite()
    if not bool(keep.any()):
        return None
    row = int(err.shape[-1]) if err.dim() >= 2 and err.shape[-1] > 0 else 1
    if weighted:
        a = torch.where(keep, (err.double() / s.where(keep, 1.0)).square(), 0.0).reshape(-1, row).sum(-1)
        b = keep.reshape(-1, row).sum(-1).double()
    else:
        a = torch.where(keep, err.double().square(), 0.0).reshape(-1, row).sum(-1)
        b = torch.where(keep, s.square(), 0.0).reshape(-1, row).sum(-1)
    rows = b > 0
    sel = keep.reshape(-1)
    limit_rms = float(s.reshape(-1)[sel].square().mean().sqrt())
    ref_rms = float(ref.reshape(-1)[sel].square().mean().sqrt())
    return RowSums(a[rows].numpy(), b[rows].numpy(), limit_rms, ref_rms)


def judge(tensor: str, trials: Sequence[RowSums | None], factor: float) -> Verdict | None:
    """The verdict over a case's trials (rows pooled across them), or None when no trial counted anything.
    Inconclusive where the limit's rms error is at least CONDITIONING of the reference's rms (fewer than 4
    correct bits: a ratio of such errors compares noise with noise)."""
    got = [t for t in trials if t is not None]
    if not got:
        return None
    ev = ratio_bound(np.concatenate([t.kernel for t in got]), np.concatenate([t.limit for t in got]))
    ratios = tuple(math.sqrt(float(t.kernel.sum()) / float(t.limit.sum())) for t in got)
    bad = any(t.ref_rms > 0 and t.limit_rms >= CONDITIONING * t.ref_rms for t in got)
    return Verdict(tensor, ev, ratios, factor, bad or any(not math.isfinite(t.ref_rms) for t in got))
