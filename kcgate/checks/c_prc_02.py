"""C-PRC-02 check: within bound on inputs built to cancel or overflow (mean or logit offset from the
``offset`` param), with the same kernel's error at offset 0 as evidence for the signature.
"""

from __future__ import annotations

from dataclasses import replace

from kcgate.checks import Finding, trials, verdict
from kcgate.harness import CaseContext, run_trial
from kcgate.signatures import sig


def check(ctx: CaseContext) -> Finding:
    finding = verdict(ctx, trials(ctx))
    if finding.status != "fail" or (
        finding.signature and finding.signature.cause in ("overflow", "nan-pattern", "excess-error")
    ):
        return finding
    centred = replace(ctx, contract=replace(ctx.contract, distribution="normal"), previous_outputs=[])
    at_zero = run_trial(centred, salt="offset-0").metrics.budget_used
    offset = float(ctx.contract.param("offset"))
    if at_zero is not None and at_zero <= 1.0:
        b = finding.metrics.budget_used
        return replace(
            finding,
            signature=sig(
                "cancellation",
                f"fine at mean 0 (budget {at_zero:.2g}), fails at offset {offset:g} "
                f"(budget {'inf' if b is None else f'{b:.3g}'}): catastrophic cancellation",
                budget_at_offset_0=at_zero,
                offset=offset,
            ),
        )
    return finding
