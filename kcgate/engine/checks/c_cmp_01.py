"""C-CMP-01 check: the fused kernel within the bound propagated through the unfused composition (the
fp64 oracle of the composition); a failure spread smoothly over the input range is an approximation.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from kcgate.engine.checks import Finding, named, trials, verdict
from kcgate.engine.checks import c_cmp_01_range as range_probe
from kcgate.engine.checks.c_support import count_budget, fold
from kcgate.engine.diagnosis import sig
from kcgate.engine.trial import CaseContext, Trial, severity
from kcgate.results.model import Signature, Status


def check(ctx: CaseContext) -> Finding:
    ts = trials(ctx)
    finding = verdict(ctx, ts)
    if finding.status == Status.PASS:
        return _range(ctx, finding)
    if finding.status != Status.FAIL or named(finding) or _semantics(finding):
        return finding
    found = approximation_signature(ts)
    return replace(finding, signature=found) if found else finding


def _range(ctx: CaseContext, finding: Finding) -> Finding:
    """An activation that passes on N(0, 1) must stay finite where its function is (c_cmp_01_range)."""
    found = range_probe.probe(ctx)
    if found is None:
        return finding
    # budget 2 per element made NaN/Inf (half a unit allowed, as the overflow policies of C-PRC-04)
    return fold(finding, count_budget(found.introduced), found.signature, found.message, found.extra())


def _semantics(finding: Finding) -> bool:
    """A known mistake already named (a wrong slope, the other gelu approximation): more specific than a smooth
    approximation, which such a mistake also is."""
    return finding.signature is not None and finding.signature.cause == "wrong-semantics"


def approximation_signature(ts: list[Trial]) -> Signature | None:
    """Systematic error: a large share of elements over the bound, varying smoothly with the input."""
    t = max(
        (t for t in ts if t.cmp is not None),
        key=severity,
        default=None,
    )
    if t is None or t.cmp is None or t.inputs[0].shape != t.cmp.ref.shape:
        return None
    cmp = t.cmp
    x = t.inputs[0].to(torch.float64).flatten()
    e = cmp.signed.flatten()
    ok = e.isfinite()
    order = x[ok].argsort()
    es = e[ok][order]
    if es.numel() < 16:
        return None
    # smooth in x: neighbouring inputs have nearly the same error (lag-1 correlation near 1)
    a, b = es[:-1], es[1:]
    corr = float(torch.corrcoef(torch.stack([a, b]))[0, 1])
    over = float((cmp.ratio > 1).float().mean())
    if corr < 0.9 or over < 0.05:
        return None
    return sig(
        "approximation",
        f"smooth systematic error over the input range (lag-1 correlation {corr:.3f}, "
        f"{over:.0%} of elements over): an approximation inside the fusion",
        correlation=round(corr, 4),
        fraction_over=round(over, 4),
    )
