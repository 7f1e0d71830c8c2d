"""Stability probes: inputs built to break an unstable kernel (a cancellation probe: the first input's mean
moved by an offset the input dtype can still represent; an overflow probe: logits shifted past exp's range,
fp16 norms scaled so squares overflow the input dtype; a saturation probe: softcapped logits pushed so far
below −cap that tanh saturates and every lane weighs alike).

C-PRC-02 asserts them (kcgate.engine.checks.c_prc_02). Every other class whose check compares outputs with
the fp64 oracle (``ContractClass.probes``) runs them too, on the families with the ``offset_probes`` trait,
after its own check passes (``after_class``), as every contract runs boundary shapes: an unstable kernel
fails under the class a user naturally picks. ``protocol.probes = false`` turns that off. The probes are
kcgate's choice of inputs: one whose exact result overflows the output dtype is scaled down or skipped, one
that would make the case unmeasurable (REFUSED) is scaled down or skipped, and the metrics say which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from kcgate.engine.checks import Finding, verdict
from kcgate.engine.diagnosis import sig
from kcgate.engine.harness import run_trial
from kcgate.engine.trial import CaseContext, Trial, oracle, probe_offset
from kcgate.numerics.ops.base import Tensors, draw
from kcgate.results.model import Status
from kcgate.vocab.catalogue import families, params_of
from kcgate.vocab.causes import ISSUE_MESSAGES, NONFINITE
from kcgate.vocab.classes import CLASSES

OVERFLOW_SHIFT = 100.0  # > ln(float32 max) = 88.7: exp(x) without max-subtraction overflows in fp32 and below
# logits at about −8·cap: tanh(−8) = −1 + 2e-7, so padded lanes softcapped to −cap weigh as much as real ones
SATURATION_DEPTH = 8.0
EXP_FAMILIES = families("exp")
NORM_FAMILIES = families("normalizes")
PROBED_FAMILIES = families("offset_probes")
# causes that already say what happened: kept, with the probe added to the summary
NAN_CAUSES = NONFINITE
NAMED = (*NAN_CAUSES, *ISSUE_MESSAGES)
# The cancellation offset every other class probes with: the overflow shift, 100 (C-PRC-02 reads its own
# params.offset, 1e4 by default). It overflows exp without max subtraction and cancels a one-pass variance
# in fp32, while a correct kernel whose error grows with |x| (exp(x − lse) from a saved logsumexp: u·|x|)
# stays within its bound; at C-PRC-02's 1e4 that kernel uses ~30 budgets, which only that class asserts.
DEFAULT_OFFSET = OVERFLOW_SHIFT
# A probe's offset is kcgate's choice, not the contract's: where it makes the case unmeasurable (a gradient's
# allowed error reaching its size: fp32 layernorm's dx at offset 1e4 on some seeds), it is divided by this
# up to PROBE_RETRIES times, then the probe is skipped; the metrics record either.
PROBE_SHRINK = 16.0
PROBE_RETRIES = 3


# What a failing probe means, in the signature's words
_WHAT = dict(
    cancellation="catastrophic cancellation",
    overflow="an intermediate overflowed",
    saturation="lanes where the softcap saturates are counted wrongly (padded lanes leaking into the sum?)",
)


@dataclass(frozen=True)
class Probe:
    """Inputs built to break an unstable kernel: the first input shifted by ``offset`` or scaled by ``scale``
    (saturation: drawn around −``offset`` with a spread of ``scale``)."""

    name: str  # cancellation | overflow | saturation
    offset: float = 0.0
    scale: float = 1.0

    def make(self, ctx: CaseContext, xs: Tensors, offset: float) -> Tensors:
        x = xs[0]
        if self.name == "saturation":
            z = draw(x.shape, torch.float64, ctx.generator("probe", self.name), "normal")
            return ((z * self.scale - offset).to(x.dtype), *xs[1:])
        if self.scale != 1.0:
            return ((x.to(torch.float64) * self.scale).to(x.dtype), *xs[1:])
        return (draw(x.shape, x.dtype, ctx.generator("probe", self.name), "large-mean", offset), *xs[1:])

    def detail(self, offset: float) -> str:
        if self.name == "saturation":
            return f"logits near −{offset:g}, where the softcap's tanh saturates"
        if self.scale != 1.0:
            return f"inputs scaled by {self.scale:.3g}"
        return f"logits shifted by {offset:g}" if self.name == "overflow" else f"inputs offset by {offset:g}"

    @property
    def scaled(self) -> bool:
        """A scale probe (fp16 norms): its inputs cannot be made milder by a smaller offset."""
        return self.scale != 1.0 and self.name != "saturation"


def probes(ctx: CaseContext, offset: float | None = None) -> list[Probe]:
    """The probes for this family and dtype (``offset``: the cancellation offset asked for, C-PRC-02's
    params.offset; DEFAULT_OFFSET when None). Custom ops get the cancellation probe; a softcapped family the
    saturation probe."""
    asked = DEFAULT_OFFSET if offset is None else offset
    shift = probe_offset(ctx.dtype, asked)
    out = [Probe("cancellation", offset=shift)]
    if ctx.op.name in EXP_FAMILIES and shift < OVERFLOW_SHIFT:
        out.append(Probe("overflow", offset=OVERFLOW_SHIFT))
    if ctx.op.name in NORM_FAMILIES and torch.finfo(ctx.dtype).max < 1e30:
        n = max(ctx.case.shape[-1], 1)
        out.append(
            Probe("overflow", scale=2 * math.sqrt(torch.finfo(ctx.dtype).max / n))
        )  # Σx² > the dtype's max
    cap = _softcap(ctx)
    if cap > 0:
        out.append(Probe("saturation", offset=SATURATION_DEPTH * cap, scale=cap))
    return out


def _softcap(ctx: CaseContext) -> float:
    """The family's softcap (cap·tanh(x / cap) before the exp), 0 where it has none."""
    if "softcap" not in params_of(ctx.contract.op):
        return 0.0
    return float(ctx.contract.param("softcap") or 0.0)


def applies(ctx: CaseContext) -> bool:
    """Whether the class's check is followed by the probes: a class that compares with the oracle, a family
    with the trait, the family's own bound (``error-bound``: a fixed atol/rtol or ulp count was set for the
    contract's inputs, not for kcgate's), and ``protocol.probes`` on."""
    c = ctx.contract
    return (
        c.protocol.probes
        and CLASSES[c.klass].probes
        and c.op in PROBED_FAMILIES
        and c.tolerance.method == "error-bound"
        and ctx.dtype.is_floating_point
    )


def after_class(ctx: CaseContext, finding: Finding) -> Finding:
    """A class's passing finding, then every probe: the first failing probe's finding, named by the probe
    (the class's own measurements are kept where every probe passes; ``<probe>_probe_budget`` records the
    worst budget each probe used)."""
    if finding.status != Status.PASS or not applies(ctx):
        return finding
    notes: dict[str, float] = {}
    for probe in probes(ctx):
        result = run_probe(ctx, probe, [], notes)
        if result is None:
            continue
        found, offset = result
        if found.status == Status.FAIL:
            named = name_probe(ctx, probe, offset, found, finding)
            return with_notes(replace(named, message=f"{named.message}{_UNDER_CLASS}"), notes)
        b = found.metrics.budget_used
        notes[f"{probe.name}_probe_budget"] = max(notes.get(f"{probe.name}_probe_budget", 0.0), b or 0.0)
    return with_notes(finding, notes)


_UNDER_CLASS = (
    " (a stability probe every contract of this family runs, as it runs boundary shapes; "
    "protocol.probes = false turns it off, C-PRC-02 asserts it)"
)


def run_probe(
    ctx: CaseContext, probe: Probe, base: list[Trial], notes: dict[str, float]
) -> tuple[Finding, float] | None:
    """The probe's verdict with its offset, or None where it is skipped (``notes`` says why)."""
    found = probe_inputs(ctx, probe)
    if found is None:  # the exact result overflows the output dtype at any offset: nothing to compare
        notes[f"{probe.name}_probe_skipped"] = 1.0
        return None
    xs, offset = found
    if offset != probe.offset:  # scaled down so that the exact result fits the output dtype
        notes[f"{probe.name}_probe_offset"] = offset
    return measurable(ctx, probe, base, xs, offset, notes)


def measurable(
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
        if probe.scaled or attempt == PROBE_RETRIES:
            break
        offset /= PROBE_SHRINK
        xs = probe.make(ctx, clean, offset)
    notes[f"{probe.name}_probe_skipped"] = 1.0
    return None


def with_notes(finding: Finding, notes: dict[str, float]) -> Finding:
    if not notes:
        return finding
    extra = tuple(sorted({**dict(finding.metrics.extra), **notes}.items()))
    return replace(finding, metrics=replace(finding.metrics, extra=extra))


def probe_inputs(ctx: CaseContext, probe: Probe) -> tuple[Tensors, float] | None:
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
        if probe.scaled:
            return None
        offset /= 16
    return None


def name_probe(ctx: CaseContext, probe: Probe, offset: float, found: Finding, base: Finding) -> Finding:
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
    cause = probe.name  # each probe's cause has the probe's name (kcgate.vocab.causes)
    what = _WHAT[probe.name]
    return replace(
        found,
        signature=sig(
            cause,
            f"fine on the contract's inputs (budget {at_base:.2g}), fails with {detail} "
            f"(budget {budget}): {what}",
            probe=probe.name,
            budget_at_offset_0=at_base,
            offset=offset if not probe.scaled else probe.scale,
        ),
    )
