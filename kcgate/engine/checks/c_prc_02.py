"""C-PRC-02 check: within bound on the contract's inputs, then on the stability probes
(kcgate.engine.checks.stability: cancellation, overflow, saturation), which this class asserts with the
offset its ``params.offset`` asks for. ``distribution = "large-mean"`` only adds to them. A failing probe is
named in the signature. Every other class runs the same probes after its own check (``protocol.probes``).
"""

from __future__ import annotations

from dataclasses import replace

from kcgate.engine.checks import Finding, trials, verdict
from kcgate.engine.checks.stability import NAMED, name_probe, probes, run_probe, with_notes
from kcgate.engine.diagnosis import sig
from kcgate.engine.harness import run_trial
from kcgate.engine.trial import CaseContext, probe_offset
from kcgate.results.model import Status


def check(ctx: CaseContext) -> Finding:
    base = trials(ctx)
    finding = verdict(ctx, base)
    if finding.status != Status.PASS:
        return _name_base(ctx, finding)
    notes: dict[str, float] = {}
    for probe in probes(ctx, float(ctx.contract.param("offset"))):
        measured = run_probe(ctx, probe, base, notes)
        if measured is None:
            continue  # no offset kcgate may choose leaves this probe measurable: skipped, and the result says so
        result, offset = measured
        if result.status == Status.FAIL:
            return with_notes(name_probe(ctx, probe, offset, result, finding), notes)
        extra = finding.metrics.extra or result.metrics.extra
        # a limitation note of the contract's own inputs stays (the probes run without the gate)
        finding = replace(
            result, metrics=replace(result.metrics, extra=extra), message=result.message or finding.message
        )
    return with_notes(finding, notes)


def _name_base(ctx: CaseContext, finding: Finding) -> Finding:
    """The contract's own inputs fail (large-mean declared): compare with centred inputs, as before."""
    if (
        finding.status != Status.FAIL
        or ctx.contract.distribution != "large-mean"
        or (finding.signature and finding.signature.cause in (*NAMED, "excess-error"))
    ):
        return finding
    centred = replace(ctx, contract=replace(ctx.contract, distribution="normal"), previous_outputs=[])
    at_zero = run_trial(centred, salt="offset-0").metrics.budget_used
    offset = probe_offset(ctx.dtype, float(ctx.contract.param("offset")))
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
