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

Custom ops get the probes their contract's ``stability`` declares per input, and by default an offset probe
on each input the fp64 reference is shift-invariant in and a scale probe on each it is scale-invariant in
(kcgate.numerics.invariance; the metrics record ``inferred_<kind>_probe_<input>``). Quantised families given
their scales (``static_scales``) get a static-scale probe: the scales divided so inputs reach past the fp8
range, where a kernel without a clamp before its cast overflows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from kcgate.engine.checks import Finding, verdict
from kcgate.engine.diagnosis import sig
from kcgate.engine.harness import run_trial
from kcgate.engine.trial import CaseContext, Trial, oracle, probe_offset
from kcgate.numerics import domains
from kcgate.numerics.invariance import invariances
from kcgate.numerics.ops.base import Tensors, draw
from kcgate.results.model import Status
from kcgate.vocab.catalogue import CATALOGUE, families, params_of
from kcgate.vocab.causes import DRAWN, ISSUE_MESSAGES, NONFINITE
from kcgate.vocab.classes import CLASSES

OVERFLOW_SHIFT = 100.0  # > ln(float32 max) = 88.7: exp(x) without max-subtraction overflows in fp32 and below
# logits at about −8·cap: tanh(−8) = −1 + 2e-7, so padded lanes softcapped to −cap weigh as much as real ones
SATURATION_DEPTH = 8.0
EXP_FAMILIES = families("exp")
NORM_FAMILIES = families("normalizes")
PROBED_FAMILIES = families("offset_probes")
STATIC_SCALE_FAMILIES = families("static_scales")
# The static-scale probe divides the given scales by this: inputs reach up to 4x past the fp8 range (a
# calibration-time scale meeting larger activations), where only a clamp before the cast keeps them finite.
STATIC_SCALE_FACTOR = 4.0
INFER_SAMPLES = 2  # host-seeded draws the fp64 reference's invariance is tested on
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
    ties="wrong where two inputs are equal (a comparison or a subgradient at ties: |p − q|'s gradient at p == q "
    "is 0)",
    peaked="wrong on peaked, near-one-hot distributions (an exp that underflows to 0, then log 0 or 0/0)",
)
RANGE = domains.RANGE


@dataclass(frozen=True)
class Probe:
    """Inputs built to break an unstable kernel: input ``input`` shifted by ``offset`` or scaled by ``scale``
    (saturation: drawn around −``offset`` with a spread of ``scale``; ``rescale``: those inputs, the
    quantisation scales, divided by ``scale``). A family's offset probe draws its first input afresh; a
    custom op's (``own``) moves the generator's own draw."""

    name: str  # cancellation | overflow | saturation
    offset: float = 0.0
    scale: float = 1.0
    input: int = 0
    own: bool = False
    rescale: tuple[int, ...] = ()
    label: str = ""  # the input's name, for a custom op's message
    inferred: bool = False  # from the fp64 reference's invariance, not declared
    source: int = -1  # ties: the input whose rows are copied into ``input``
    kinds: tuple[tuple[int, str], ...] = ()  # peaked: (input, "prob" | "log") redrawn near one-hot
    other: str = ""  # ties: the source input's name
    # exp-range: the (largest, most negative) values tried in turn, the first the reference is valid on
    levels: tuple[tuple[float, float], ...] = ()

    def make(self, ctx: CaseContext, xs: Tensors, offset: float) -> Tensors:
        if self.rescale:
            return tuple(
                (t.to(torch.float64) / self.scale).to(t.dtype) if i in self.rescale else t
                for i, t in enumerate(xs)
            )
        if self.name == "peaked" or self.name in RANGE:
            g = ctx.generator("probe", self.name)
            new_xs = dict((i, self._moved(xs[i], k, g, offset)) for i, k in self.kinds)
            return tuple(new_xs.get(i, t) for i, t in enumerate(xs))
        x = xs[self.input]
        if self.name == "ties":
            new = domains.tied(x, xs[self.source])
        elif self.name == "saturation":
            z = draw(x.shape, torch.float64, ctx.generator("probe", self.name), "normal")
            new = (z * self.scale - offset).to(x.dtype)
        elif self.scale != 1.0:
            new = (x.to(torch.float64) * self.scale).to(x.dtype)
        elif self.own:
            new = (x.to(torch.float64) + offset).to(x.dtype)
        else:
            new = draw(x.shape, x.dtype, ctx.generator("probe", self.name), "large-mean", offset)
        return (*xs[: self.input], new, *xs[self.input + 1 :])

    def _moved(self, t: torch.Tensor, k: str, g: torch.Generator, offset: float) -> torch.Tensor:
        if self.name == "peaked":
            return domains.peaked(t, k, g)
        level = offset if self.name == "exp-range" else self.scale if self.scale != 1.0 else 0.0
        return domains.move(self.name, t, k, g, level)

    def detail(self, offset: float) -> str:
        return f"{self._what(offset)}{self._why}"

    def _what(self, offset: float) -> str:
        who = f"input '{self.label}'" if self.label else "inputs"
        if self.rescale:
            s = f"{self.scale:g}"
            return f"static scales {s}x below amax / fp8 max: inputs up to {s}x past the fp8 range"
        if self.name == "ties":
            return f"{who} equal to input '{self.other}' on every other row"
        if self.name == "peaked":
            who = "inputs " + ", ".join(f"'{n}'" for n in self.label.split("+"))
            return f"peaked, near-one-hot distributions in {who} (logits × {domains.PEAK:g})"
        if self.name in RANGE:
            return self._range_what(offset)
        if self.name == "saturation":
            where = f"{who} near" if self.label else "logits near"
            return f"{where} −{offset:g}, where the softcap's tanh saturates"
        if self.scale != 1.0:
            return f"{who} scaled by {self.scale:.3g}"
        if self.name == "overflow":
            return f"logits shifted by {offset:g}"
        return f"{who} offset by {offset:g}"

    def _range_what(self, offset: float) -> str:
        who = "inputs " + ", ".join(f"'{n}'" for n in self.label.split("+"))
        if self.name == "exp-range":
            return f"{who} scaled to span [{dict(self.levels)[offset]:.4g}, {offset:.4g}], near exp's limits"
        if self.name == "log-range":
            return f"every other element of {who} near the smallest normal"
        if self.name == "subnormal":
            return f"every other element of {who} subnormal"
        e = int(self.scale) if self.scale != 1.0 else "its dtype's"
        return f"each element of {who} times 2^k, k within ±{e} binades"

    @property
    def _why(self) -> str:
        if not self.inferred:
            return ""
        if self.name == "ties":
            return f"; a probe kcgate inferred: '{self.label}' and '{self.other}' have one shape and dtype"
        if self.name == "peaked":
            return "; a probe kcgate inferred: the input generator draws rows of probabilities or log-probabilities"
        if self.name in RANGE:
            return f"; a probe kcgate inferred: {RANGE[self.name].why}"
        kind = "scale" if self.scale != 1.0 else "shift"
        return f"; a probe kcgate inferred: the fp64 reference is {kind}-invariant in '{self.label}'"

    @property
    def scaled(self) -> bool:
        """A scale probe (fp16 norms), ties or peaked distributions: inputs no smaller offset makes milder."""
        return (self.scale != 1.0 and self.name != "saturation") or self.name in DRAWN

    @property
    def inferred_kind(self) -> str:
        """The word in the metrics' ``inferred_<kind>_probe_<input>`` note."""
        return self.name if self.name in DRAWN else "scale" if self.scaled else "offset"

    @property
    def key(self) -> str:
        """The probe's name in the metrics (``<key>_probe_budget``): a custom op's carries its input."""
        return f"{self.name}_{self.label}" if self.label else self.name


def probes(ctx: CaseContext, offset: float | None = None) -> list[Probe]:
    """The probes for this family and dtype (``offset``: the cancellation offset asked for, C-PRC-02's
    params.offset; DEFAULT_OFFSET when None). Custom ops get the cancellation probe; a softcapped family the
    saturation probe."""
    asked = DEFAULT_OFFSET if offset is None else offset
    shift = probe_offset(ctx.dtype, asked)
    if ctx.contract.op == "custom":
        own = custom_probes(ctx, shift)
        # C-PRC-02 asserts stability: with nothing declared or inferred, the first input is offset
        return own or ([Probe("cancellation", offset=shift, own=True)] if offset is not None else [])
    if ctx.contract.op in STATIC_SCALE_FAMILIES:
        idx = CATALOGUE[ctx.contract.op].static_scales
        return [Probe("overflow", scale=STATIC_SCALE_FACTOR, rescale=idx)]
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
    return out + _family_range_probes(ctx)


def _family_range_probes(ctx: CaseContext) -> list[Probe]:
    """A family's range probes, inferred as a custom op's from its fp64 oracle traced and its inputs'
    domains; the first input, which the cancellation (and overflow) probes move, gets no exp-range."""
    names = CATALOGUE[ctx.contract.op].inputs
    label = lambda i: names[i] if i < len(names) else f"input{i}"  # noqa: E731
    samples = [ctx.inputs(ctx.case.shape, ("infer", k)) for k in range(INFER_SAMPLES)]
    top = domains.EXP_LEVELS[0][0]
    return [
        Probe(name, own=True, kinds=got, label="+".join(label(i) for i, _ in got), inferred=True,
              levels=domains.EXP_LEVELS if name == "exp-range" else (),
              offset=top if name == "exp-range" else 0.0)
        for name, got in domains.plan(ctx.op.oracle, samples, ctx.dtype, set(), {0}).items()
    ]  # fmt: skip


def custom_probes(ctx: CaseContext, shift: float) -> list[Probe]:
    """A custom op's probes: each input's declared ones (``stability``), then, for an input the contract does
    not name, those its fp64 reference's invariance implies (an offset for a shift, the fp16 overflow scale
    for a scale; kcgate.numerics.invariance)."""
    names = ctx.op.input_names
    declared = dict(ctx.contract.stability)
    samples = [ctx.inputs(ctx.case.shape, ("infer", k)) for k in range(INFER_SAMPLES)]
    out = [p for name, kinds in declared.items() for p in _declared(ctx, names, name, dict(kinds), shift)]
    out += [
        p for name, kinds in declared.items() for p in _declared_ranges(names, name, dict(kinds), samples)
    ]
    out += _drawn_probes(ctx, samples, set(declared))
    found = invariances(ctx.op.oracle, samples)
    out += _range_probes(ctx, samples, set(declared), {i for i, k in found if k == "offset"})
    for i, kind in found:
        label = names[i] if i < len(names) else f"input{i}"
        if label in declared:
            continue
        if kind == "offset":
            out.append(Probe("cancellation", offset=shift, input=i, own=True, label=label, inferred=True))
        elif (scale := _overflow_scale(ctx)) is not None:
            out.append(Probe("overflow", scale=scale, input=i, own=True, label=label, inferred=True))
    return out


def _drawn_probes(ctx: CaseContext, samples: list[Tensors], declared: set[str]) -> list[Probe]:
    """The inputs real loss kernels break on, inferred from what the generator draws (kcgate.numerics.domains):
    rows of one input equal to another's (ties), and peaked distributions where it draws probabilities or
    log-probabilities. An input the contract's ``stability`` names (an empty table included) is left alone;
    the reference's own verdict on the probe inputs (a non-finite result) skips a probe it finds invalid."""
    names = ctx.op.input_names
    label = lambda i: names[i] if i < len(names) else f"input{i}"  # noqa: E731
    out = [
        Probe("ties", input=i, source=j, own=True, label=label(i), other=label(j), inferred=True)
        for i, j in domains.tie_pairs(samples[0] if samples else ())
        if label(i) not in declared
    ]
    kinds = tuple((i, k) for i, k in domains.distributions(samples) if label(i) not in declared)
    if kinds:
        who = "+".join(label(i) for i, _ in kinds)  # the metrics' key: peaked_log_q+log_p
        out.append(Probe("peaked", own=True, kinds=kinds, label=who, inferred=True))
    return out


def _range_probes(
    ctx: CaseContext, samples: list[Tensors], declared: set[str], shifted: set[int]
) -> list[Probe]:
    """The range probes the traced reference and the inputs' domains call for (kcgate.numerics.domains.plan),
    each on every input it applies to; an input the contract's ``stability`` names is left alone."""
    names = ctx.op.input_names
    label = lambda i: names[i] if i < len(names) else f"input{i}"  # noqa: E731
    leave = {i for i in range(len(samples[0]) if samples else 0) if label(i) in declared}
    reference = getattr(ctx.op.oracle, "__wrapped__", ctx.op.oracle)
    top = domains.EXP_LEVELS[0][0]
    return [
        Probe(name, own=True, kinds=got, label="+".join(label(i) for i, _ in got), inferred=True,
              levels=domains.EXP_LEVELS if name == "exp-range" else (),
              offset=top if name == "exp-range" else 0.0)
        for name, got in domains.plan(reference, samples, ctx.dtype, leave, shifted, _tracer(ctx)).items()
    ]  # fmt: skip


def _tracer(ctx: CaseContext) -> Any:
    """Where a sandboxed reference is traced: its own child, whose answer is checked as data; else None."""
    remote = getattr(ctx.op.oracle, "remote", None)
    if remote is None:
        return None

    def traced(sample: Tensors, dtype: Any) -> tuple[frozenset[str], frozenset[str]] | None:
        got = remote("range_ops")(list(sample), dtype)
        if not (isinstance(got, list) and len(got) == 2 and all(isinstance(g, list) for g in got)):
            return None
        ops, kinds = (frozenset(str(x)[:100] for x in g) for g in got)
        return ops, kinds

    return traced


def _declared(
    ctx: CaseContext, names: tuple[str, ...], name: str, kinds: dict[str, float], shift: float
) -> list[Probe]:
    if name not in names:
        c = ctx.contract
        raise ProbeSetupError(
            f"contract {c.id!r} (line {c.line}) stability.{name}: the reference takes no input {name!r} "
            f"(its inputs: {', '.join(names) or 'unnamed'}); fix: key stability by one of those names"
        )
    i, out = names.index(name), []
    if "offset" in kinds:
        out.append(Probe("cancellation", offset=probe_offset(ctx.dtype, kinds["offset"]), input=i, own=True,
                         label=name))  # fmt: skip
    if "scale" in kinds:
        out.append(Probe("overflow", scale=kinds["scale"], input=i, own=True, label=name))
    if "saturation" in kinds:
        cap = kinds["saturation"]
        out.append(
            Probe("saturation", offset=SATURATION_DEPTH * cap, scale=cap, input=i, own=True, label=name)
        )
    return out


def _declared_ranges(
    names: tuple[str, ...], name: str, kinds: dict[str, float], samples: list[Tensors]
) -> list[Probe]:
    """An input's declared range probes (``exp_range``, ``log_range``, ``subnormal``, ``binades``), on its
    domain as the samples show it (signed where they show none)."""
    if name not in names:
        return []  # _declared has said so
    i = names.index(name)
    dom = (domains.domains_of(samples)[i] if samples else "") or "signed"
    out = []
    if kinds.get("exp_range"):
        top = float(kinds["exp_range"])
        out.append(Probe("exp-range", offset=top, own=True, kinds=((i, dom),), label=name,
                         levels=((top, -top / 2),)))  # fmt: skip
    for key, probe in (("log_range", "log-range"), ("subnormal", "subnormal")):
        if kinds.get(key):
            out.append(Probe(probe, own=True, kinds=((i, dom),), label=name))
    if kinds.get("binades"):
        out.append(
            Probe("dynamic-range", scale=float(kinds["binades"]), own=True, kinds=((i, dom),), label=name)
        )
    return out


class ProbeSetupError(ValueError):
    """A contract's ``stability`` names an input its reference does not take."""


def _overflow_scale(ctx: CaseContext) -> float | None:
    """The scale that makes Σx² over the last dim exceed the dtype's max, where that is an fp16-like range
    (a correct kernel squares in fp32; in bf16 and fp32 it would overflow too)."""
    top = float(torch.finfo(ctx.dtype).max)
    if top >= 1e30:
        return None
    return 2 * math.sqrt(top / max(ctx.case.shape[-1] if ctx.case.shape else 1, 1))


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
        and (c.op in PROBED_FAMILIES or c.op in STATIC_SCALE_FAMILIES or c.op == "custom")
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
        if probe.inferred:
            notes[f"inferred_{probe.inferred_kind}_probe_{probe.label}"] = 1.0
        result = run_probe(ctx, probe, [], notes)
        if result is None:
            continue
        found, offset = result
        if found.status == Status.FAIL:
            named = name_probe(ctx, probe, offset, found, finding)
            return with_notes(replace(named, message=f"{named.message}{_UNDER_CLASS}"), notes)
        b = found.metrics.budget_used
        notes[f"{probe.key}_probe_budget"] = max(notes.get(f"{probe.key}_probe_budget", 0.0), b or 0.0)
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
        notes[f"{probe.key}_probe_skipped"] = 1.0
        return None
    xs, offset = found
    if offset != probe.offset:  # scaled down so that the exact result fits the output dtype
        notes[f"{probe.key}_probe_offset"] = offset
    result = measurable(ctx, probe, base, xs, offset, notes)
    if (
        result is not None
        and result[0].status == Status.FAIL
        and probe.name in RANGE
        and _reference_fails(ctx, probe, xs)
    ):
        notes[f"{probe.key}_probe_invalid"] = 1.0
        return None
    return result


def _reference_fails(ctx: CaseContext, probe: Probe, xs: Tensors) -> bool:
    """Whether the reference itself, run as the kernel in the case's dtypes, fails kcgate's probe inputs: then
    they are not inputs it is accurate on, and the probe does not apply (a probe never fails a kernel the
    reference's own formula would)."""
    reference = getattr(ctx.op.oracle, "__wrapped__", None)
    if reference is None:
        return False
    t = run_trial(ctx, inputs=xs, salt=("probe", probe.name, "reference"), kernel=reference)
    return verdict(ctx, [t], excess=False).status != Status.PASS


def measurable(
    ctx: CaseContext, probe: Probe, base: list[Trial], xs: Tensors, offset: float, notes: dict[str, float]
) -> tuple[Finding, float] | None:
    """The probe's verdict at the largest offset (from the probe's own) that leaves the case measurable.
    A refusal on kcgate's own probe inputs is not the contract's fault: the offset shrinks, and a probe no
    offset makes measurable is skipped; ``notes`` gets ``<probe>_probe_offset`` or ``<probe>_probe_skipped``."""
    clean: Tensors = ()  # the probe's unmoved inputs, drawn again (the same salt) only for a smaller offset
    for attempt in range(PROBE_RETRIES + 1):
        ts = [run_trial(ctx, inputs=xs, salt=("probe", probe.name))]
        result = verdict(ctx, base + ts, excess=False)
        if result.status != Status.REFUSED:
            if attempt:
                notes[f"{probe.key}_probe_offset"] = offset
            return result, offset
        if probe.scaled or attempt == PROBE_RETRIES:
            break
        offset /= PROBE_SHRINK
        clean = clean or ctx.inputs(ctx.case.shape, ("probe", probe.name))
        xs = probe.make(ctx, clean, offset)
    notes[f"{probe.key}_probe_skipped"] = 1.0
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
    offsets = [hi for hi, _ in probe.levels] or [
        probe.offset / 16**k for k in range(1 if probe.scaled else 4)
    ]
    for offset in offsets:
        ys = probe.make(ctx, xs, offset)
        ref = oracle(ctx, ys)
        if not ref.numel() or bool(ref.isfinite().all()) and float(ref.abs().max()) <= top / 2:
            return ys, offset
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
    what = RANGE[probe.name].what if probe.name in RANGE else _WHAT[probe.name]
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
