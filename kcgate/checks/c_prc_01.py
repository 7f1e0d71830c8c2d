"""C-PRC-01 check: within the declared accumulator's bound, plus a K sweep that fits the effective
accumulator width for the signature ("behaves like an fp16 accumulator").
"""

from __future__ import annotations

from dataclasses import replace

from kcgate.checks import ISSUE_MESSAGES, Finding, trials, verdict
from kcgate.checks.c_support import SHAPE_K, with_k
from kcgate.harness import CaseContext, run_trial

DEFAULT_SWEEP = (64, 256, 1024)


def check(ctx: CaseContext) -> Finding:
    ts = trials(ctx)
    finding = verdict(ctx, ts)
    if finding.status != "fail" or ctx.op.name not in SHAPE_K or _excess(finding):
        return finding
    if finding.signature is not None and finding.signature.cause in ISSUE_MESSAGES:
        return finding  # an integrity finding is named before any numerical diagnosis
    sweep = [
        run_trial(ctx, with_k(ctx.op.name, ctx.case.shape, k), salt=("k", k))
        for k in ctx.contract.protocol.k_sweep or DEFAULT_SWEEP
    ]
    from kcgate.signatures import _accumulator

    sig = _accumulator(ctx, [t for t in ts + sweep if t.cmp is not None])
    return replace(finding, signature=sig) if sig else finding


def _excess(finding: Finding) -> bool:
    """Within the bound but over a correct implementation's error: no accumulator to fit."""
    return finding.signature is not None and finding.signature.cause == "excess-error"
