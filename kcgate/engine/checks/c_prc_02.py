"""C-PRC-02 check: within bound on the contract's inputs, then on probes every contract gets: a
cancellation probe (the first input's mean moved by an offset the input dtype can still represent) and an
overflow probe (logits shifted past exp's range; fp16 norms scaled so squares overflow the input dtype).
``distribution = "large-mean"`` only adds to them. A failing probe is named in the signature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from kcgate.engine.checks import Finding, trials, verdict
from kcgate.engine.diagnosis import sig
from kcgate.engine.harness import run_trial
from kcgate.engine.trial import CaseContext, Trial, oracle, probe_offset
from kcgate.numerics.ops.base import Tensors, draw
from kcgate.results.model import Status
from kcgate.vocab.catalogue import families
from kcgate.vocab.causes import ISSUE_MESSAGES, NONFINITE

OVERFLOW_SHIFT = 100.0  # > ln(float32 max) = 88.7: exp(x) without max-subtraction overflows in fp32 and below
EXP_FAMILIES = families("exp")
NORM_FAMILIES = families("normalizes")
# causes that already say what happened: kept, with the probe added to the summary
NAN_CAUSES = NONFINITE
NAMED = (*NAN_CAUSES, *ISSUE_MESSAGES)


@dataclass(frozen=True)
class Probe:
    """Inputs built to break an unstable kernel: the first input shifted by ``offset`` or scaled by ``scale``."""

    name: str  # cancellation | overflow
    offset: float = 0.0
    scale: float = 1.0

    def make(self, ctx: CaseContext, xs: Tensors, offset: float) -> Tensors:
        x = xs[0]
        if self.scale != 1.0:
            return ((x.to(torch.float64) * self.scale).to(x.dtype), *xs[1:])
        return (draw(x.shape, x.dtype, ctx.generator("probe", self.name), "large-mean", offset), *xs[1:])

    def detail(self, offset: float) -> str:
        if self.scale != 1.0:
            return f"inputs scaled by {self.scale:.3g}"
        return f"logits shifted by {offset:g}" if self.name == "overflow" else f"inputs offset by {offset:g}"


def probes(ctx: CaseContext) -> list[Probe]:
    """The probes for this family and dtype (every contract; custom ops get the cancellation probe)."""
    offset = probe_offset(ctx.dtype, float(ctx.contract.param("offset")))
    out = [Probe("cancellation", offset=offset)]
    if ctx.op.name in EXP_FAMILIES and offset < OVERFLOW_SHIFT:
        out.append(Probe("overflow", offset=OVERFLOW_SHIFT))
    if ctx.op.name in NORM_FAMILIES and torch.finfo(ctx.dtype).max < 1e30:
        n = max(ctx.case.shape[-1], 1)
        out.append(
            Probe("overflow", scale=2 * math.sqrt(torch.finfo(ctx.dtype).max / n))
        )  # Σx² > the dtype's max
    return out


def check(ctx: CaseContext) -> Finding:
    base = trials(ctx)
    finding = verdict(ctx, base)
    if finding.status != Status.PASS:
        return _name_base(ctx, finding)
    notes: dict[str, float] = {}
    for probe in probes(ctx):
        found = _probe_inputs(ctx, probe)
        if found is None:
            continue  # the exact result overflows the output dtype at any offset: nothing to compare
        xs, offset = found
        measured = _measurable(ctx, probe, base, xs, offset, notes)
        if measured is None:
            continue  # no offset kcgate may choose leaves this probe measurable: skipped, and the result says so
        result, offset = measured
        if result.status == Status.FAIL:
            return _with_notes(_name_probe(ctx, probe, offset, result, finding), notes)
        extra = finding.metrics.extra or result.metrics.extra
        finding = replace(result, metrics=replace(result.metrics, extra=extra))
    return _with_notes(finding, notes)


# A probe's offset is kcgate's choice, not the contract's: where it makes the case unmeasurable (a gradient's
# allowed error reaching its size: fp32 layernorm's dx at offset 1e4 on some seeds), it is divided by this
# up to PROBE_RETRIES times, then the probe is skipped; the metrics record either.
PROBE_SHRINK = 16.0
PROBE_RETRIES = 3


def _measurable(
    ctx: CaseContext, probe: Probe, base: list[Trial], xs: Tensors, offset: float, notes: dict[str, float]
) -> tuple[Finding, float] | None:
    """The probe's verdict at the largest offset (from the probe's own) that leaves the case measurable.
    A refusal on kcgate's own probe inputs is not the contract's fault: the offset shrinks, and a probe no
    offset makes measurable is skipped; ``notes`` gets ``<probe>_probe_offset`` or ``<probe>_probe_skipped``."""
    clean = ctx.inputs(ctx.case.shape, ("probe", probe.name))
    for attempt in range(PROBE_RETRIES + 1):
        ts = [run_trial(ctx, inputs=xs, salt=("probe", probe.name))]
        result = verdict(ctx, base + ts, excess=False)
        if result.status != Status.REFUSED:
            if attempt:
                notes[f"{probe.name}_probe_offset"] = offset
            return result, offset
        if probe.scale != 1.0 or attempt == PROBE_RETRIES:
            break
        offset /= PROBE_SHRINK
        xs = probe.make(ctx, clean, offset)
    notes[f"{probe.name}_probe_skipped"] = 1.0
    return None


def _with_notes(finding: Finding, notes: dict[str, float]) -> Finding:
    if not notes:
        return finding
    extra = tuple(sorted({**dict(finding.metrics.extra), **notes}.items()))
    return replace(finding, metrics=replace(finding.metrics, extra=extra))


def _probe_inputs(ctx: CaseContext, probe: Probe) -> tuple[Tensors, float] | None:
    """The probe's inputs, with the offset divided by 16 until the exact result fits the output dtype
    (a sum of 1024 fp16 values offset by 128 overflows fp16 whatever the kernel does)."""
    xs = ctx.inputs(ctx.case.shape, ("probe", probe.name))
    top = torch.finfo(ctx.out_dtype).max if ctx.out_dtype.is_floating_point else math.inf
    offset = probe.offset
    for _ in range(4):
        ys = probe.make(ctx, xs, offset)
        ref = oracle(ctx, ys)
        if not ref.numel() or bool(ref.isfinite().all()) and float(ref.abs().max()) <= top / 2:
            return ys, offset
        if probe.scale != 1.0:
            return None
        offset /= 16
    return None


def _name_probe(ctx: CaseContext, probe: Probe, offset: float, found: Finding, base: Finding) -> Finding:
    """A probe fails where the contract's own inputs passed: name the probe, unless an integrity issue or a
    more specific signature (overflow-nan, overflow) already says what happened."""
    s = found.signature
    b = found.metrics.budget_used
    budget = "inf" if b is None else f"{b:.3g}"
    at_base = base.metrics.budget_used or 0.0
    detail = probe.detail(offset)
    nan_from_cancel = probe.name == "cancellation" and ctx.op.name not in EXP_FAMILIES
    if s is not None and s.cause in NAMED and not (nan_from_cancel and s.cause in NAN_CAUSES):
        summary = f"{s.summary} under the {probe.name} probe ({detail})"
        return replace(
            found,
            signature=replace(
                s, summary=summary, evidence=tuple(sorted({**dict(s.evidence), "probe": probe.name}.items()))
            ),
        )
    cause = "cancellation" if probe.name == "cancellation" else "overflow"
    what = "catastrophic cancellation" if cause == "cancellation" else "an intermediate overflowed"
    return replace(
        found,
        signature=sig(
            cause,
            f"fine on the contract's inputs (budget {at_base:.2g}), fails with {detail} "
            f"(budget {budget}): {what}",
            probe=probe.name,
            budget_at_offset_0=at_base,
            offset=offset if probe.scale == 1.0 else probe.scale,
        ),
    )


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
