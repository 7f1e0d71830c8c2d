"""Class checks: ``CHECKS[class_id](ctx) -> Finding``. A violation is a Finding, never an exception.

Every class starts from ``verdict(ctx, trials(ctx))`` (the output against the fp64 oracle under the
contract's tolerance, over fresh-input trials) and adds its own measurements; where it passes, the
stability probes follow (``kcgate.engine.checks.stability.after_class``; ``protocol.probes``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace

from kcgate.engine import excess_line, grad_excess, naming, sensitivity, sequential
from kcgate.engine.diagnosis import first_issue
from kcgate.engine.harness import run_trial
from kcgate.engine.mistakes import explain_excess, reproduced
from kcgate.engine.placement import placement_signature
from kcgate.engine.trial import CaseContext, Trial, signal_ratio
from kcgate.numerics.metrics import merge_metrics
from kcgate.results.model import Metrics, Signature, Status
from kcgate.vocab.causes import ISSUE_MESSAGES, KEPT, ON_OUTPUT
from kcgate.vocab.classes import CLASSES


@dataclass(frozen=True)
class Finding:
    """A class check's verdict on one case."""

    status: str  # a Status
    metrics: Metrics
    signature: Signature | None = None
    message: str = ""


def named(finding: Finding) -> bool:
    """The finding's signature already names its cause (an integrity issue, a non-finite result, a structural
    pattern, excess-error): a class's own follow-up measurement must not rename it."""
    s = finding.signature
    return s is not None and (s.cause in ISSUE_MESSAGES or s.cause in KEPT or s.cause == "excess-error")


def trials(ctx: CaseContext, n: int | None = None) -> list[Trial]:
    """``protocol.trials`` fresh-input trials at the case shape."""
    return [run_trial(ctx, salt=i) for i in range(n or ctx.contract.protocol.trials)]


def verdict(
    ctx: CaseContext,
    ts: list[Trial],
    extra: dict[str, float] | None = None,
    *,
    excess: bool = True,
    signal_decided: bool = False,
) -> Finding:
    """Turn trials into a Finding: errors first, then integrity issues, the signal check, the budget, then
    the sensitivity gate (``excess=False`` skips it, e.g. for probe inputs no reference is meant for). The
    signal check refuses a case of the protocol's own trials only once the refusal is decided (``_refusal``;
    ``signal_decided``: already done, judge)."""
    metrics = merge_metrics([t.metrics for t in ts])
    if extra:
        metrics = _with_extra(metrics, extra)
    raised = next((t for t in ts if "raised" in t.issues), None)
    if raised:
        return Finding(Status.ERROR, metrics, None, f"kernel raised: {raised.error}")
    issues = sorted({i for t in ts for i in t.issues})
    if issues:
        first = first_issue(issues)
        issues = [first, *(i for i in issues if i != first)]
        phase = next((t.found_in[first] for t in ts if first in t.found_in), "")  # forward or backward
        said = ISSUE_MESSAGES.get(first, first) + (f" during the {phase}" if phase else "")
        named_tensor = _issue_tensor(ctx, ts, first)
        if named_tensor:
            said = f"{named_tensor[2]}: {said}"
        sig = Signature(
            first,
            said,
            tuple(
                sorted(
                    (
                        ("issues", ", ".join(issues)),
                        *((("phase", phase),) if phase else ()),
                        *((named_tensor[:2],) if named_tensor else ()),
                    )
                )
            ),
        )
        detail = next((t.error for t in ts if t.error), "")
        return Finding(
            Status.FAIL,
            metrics,
            sig,
            "; ".join(ISSUE_MESSAGES.get(i, i) for i in issues) + (f": {detail}" if detail else ""),
        )
    worst_signal = max((signal_ratio(t) for t in ts), default=0.0)
    method = ctx.contract.tolerance.method
    checked = method in ("error-bound", "abs-rel", "relative") and not signal_decided
    sequential_signal = checked and excess and _standard(ctx, ts) and worst_signal >= sequential.NEAR_SIGNAL
    if sequential_signal or (checked and worst_signal >= 1.0):
        decision, more = _refusal(ctx, ts) if sequential_signal else (sequential.FAIL, ts)
        if decision == sequential.FAIL:
            vacuous = sum(signal_ratio(t) >= 1.0 for t in more)
            worst_signal = max(signal_ratio(t) for t in more)
            return Finding(
                Status.REFUSED,
                _with_extra(metrics, {"signal_extra_trials": float(len(more) - len(ts))})
                if len(more) > len(ts)
                else metrics,
                None,
                f"tolerance exceeds the signal (allowed error / output = {worst_signal:.3g}"
                + (f", on {vacuous} of {len(more)} trials" if len(more) > len(ts) else "")
                + "); a kernel returning zeros would pass: use a higher-precision accumulator, a smaller "
                "reduction length or a tighter tolerance",
            )
        if len(more) > len(ts):
            return _judged_past_the_signal(ctx, more, extra, decision, worst_signal, len(more) - len(ts))
    budget = metrics.budget_used
    if budget is None or budget > 1.0:
        return Finding(
            Status.FAIL, metrics, _relative_signature(metrics) or diagnose(ctx, ts), _fail_message(metrics)
        )
    if not excess:
        return Finding(Status.PASS, metrics)
    return _grad_gate(ctx, ts, _rounding_mistake(ctx, ts, _excess_gate(ctx, ts, metrics)))


def _standard(ctx: CaseContext, ts: list[Trial]) -> bool:
    """The case's own fresh-input trials (``trials``: integer salts, the case shape), which more of the
    same can join; not a class's probe, held-out shape or planted inputs."""
    shape = tuple(ctx.case.shape)
    return bool(ts) and all(isinstance(t.salt, int) and tuple(t.shape) == shape for t in ts)


def _refusal(ctx: CaseContext, ts: list[Trial]) -> tuple[sequential.Decision, list[Trial]]:
    """Whether the tolerance reaches the signal (‖allowed‖/‖output‖ ≥ 1) often enough to refuse the case,
    once a trial's ratio is near that line (``sequential.NEAR_SIGNAL``): Wald's SPRT on the trials where it
    does (``sequential.crossings``; none crossing decides only once its evidence does), fresh trials (salts
    ``signal-seq-i``) drawn at each look while it is undecided, at most ``sequential.MAX_EXTRA``. FAIL:
    refuse; PASS: judge the case on every trial; MORE at the last look: inconclusive, judged, and noted if
    it passes."""
    looks = sequential.totals(len(ts))
    for total in looks:
        drawn = range(len(ts) - looks[0], total - looks[0])
        ts = [*ts, *(run_trial(ctx, salt=f"signal-seq-{j}") for j in drawn)]
        crossed = sum(signal_ratio(t) >= 1.0 for t in ts)
        decision = sequential.crossings(
            crossed, len(ts), near=True, p0=sequential.SIGNAL_P0, p1=sequential.SIGNAL_P1
        )
        if decision != sequential.MORE:
            return decision, ts
    return sequential.MORE, ts


def _judged_past_the_signal(
    ctx: CaseContext,
    ts: list[Trial],
    extra: dict[str, float] | None,
    decision: str,
    worst: float,
    added: int,
) -> Finding:
    """The case judged on every trial once refusing it was ruled out (PASS) or left undecided (MORE): a
    fresh trial's error or issue counts as the protocol's would; an undecided refusal is noted on a pass."""
    more = {"signal_extra_trials": float(added)} if added else {}
    found = verdict(ctx, ts, {**(extra or {}), **more}, signal_decided=True)
    if decision == sequential.PASS or found.status != Status.PASS:
        return found
    vacuous = sum(signal_ratio(t) >= 1.0 for t in ts)
    note = (
        f"inconclusive: the tolerance reaches the signal (allowed error / output up to {worst:.3g}) on "
        f"{vacuous} of {len(ts)} trials, too few to refuse and too many to rule out at "
        f"{1 - sequential.ALPHA:.0%}; judged on every trial, passes, never blocks, tracked as drift"
    )
    return replace(found, message=note + (f"; {found.message}" if found.message else ""))


def _issue_tensor(ctx: CaseContext, ts: list[Trial], issue: str) -> tuple[str, str, str] | None:
    """(evidence key, value, words) of the tensor a backward case's integrity issue was seen on: an input's
    gradient or the forward output; None where the issue concerns no one tensor (a write into an input, a
    raise) or no backward ran (one tensor, nothing to tell apart)."""
    if not ctx.contract.backward:
        return None
    name = next((t.tensor_of[issue] for t in ts if issue in t.tensor_of), "")
    if name and name != "out":
        return "grad", name, f"gradient of {name!r}"
    if name == "out" or issue in ON_OUTPUT:
        return "tensor", "forward output", "forward output"
    return None


def _rounding_mistake(ctx: CaseContext, ts: list[Trial], found: Finding) -> Finding:
    """A passing case whose output a known rounding mistake reproduces bit for bit (kcgate.engine.mistakes.
    reproduced: x̂ cast to bf16 before the weight, declared all in fp32) fails, named by that mistake: the
    bound and the gate cannot see one rounding, the comparison with the mistake's rounded output can. A custom
    op's reference places its own roundings (kcgate.engine.placement: an upcast dropped, a downcast moved up)."""
    if found.status != Status.PASS:
        return found
    named = reproduced(ctx, ts) or placement_signature(ctx, ts)
    if named is None:
        return found
    budget = found.metrics.budget_used or 0.0
    return Finding(
        Status.FAIL, found.metrics, named, f"within the bound (budget {budget:.3g}) but {named.summary}"
    )


def _excess_gate(ctx: CaseContext, ts: list[Trial], metrics: Metrics) -> Finding:
    """Within the bound: the sensitivity gate (kcgate.engine.sensitivity) compares the forward output's error
    with the least accurate correct implementation's; its worst trial's ratio is recorded either way
    (``excess_ratio``, <= 1 passes). Outputs too small for its statistic are pooled over trials (fresh ones
    added), and where no reference ran, or the pool stays short, the bound alone judges. A verdict near the
    line draws more forward trials until it is decided, or passes as inconclusive (``_decided``)."""
    if not sensitivity.applies(ctx):
        return Finding(Status.PASS, metrics)
    measured, parts = _excess_measured(ctx, ts)
    if not measured:
        return Finding(Status.PASS, metrics)
    decision, note, measured, ev, added = _decided(ctx, measured, parts)
    worst = max(measured, key=lambda e: e.ratio)
    metrics = _with_extra(metrics, worst.extra())
    if ev is not None and worst.ratio > 1.0:
        metrics = _with_extra(metrics, ev.extra())
    if added:
        metrics = _with_extra(metrics, {"excess_extra_trials": float(added)})
    if decision == sequential.PASS:
        return Finding(
            Status.PASS, metrics, None, note
        )  # an inconclusive note: tracked as drift, never blocks
    out_budget = dict(metrics.extra).get("out_budget", metrics.budget_used or 0.0)
    # a parameter mismatch or a known mistake (eps) says more than "excess"
    named = reproduced(ctx, ts, every=True) or explain_excess(
        ctx, ts, worst.factor / worst.rms_ratio if worst.rms_ratio > 0 else 0.0
    )
    if named is not None:
        return Finding(
            Status.FAIL, metrics, named, f"within the bound (budget {out_budget:.3g}) but {named.summary}"
        )
    signature = Signature(
        "excess-error",
        worst.summary(),
        (
            ("excess_max_ratio", worst.max_ratio),
            ("excess_rms_ratio", worst.rms_ratio),
            ("factor", worst.factor),
            ("kernel_rms_err", worst.kernel_rms),
            ("reference_rms_err", worst.ref_rms),
            ("tensor", worst.tensor),
            ("elements", float(worst.elements)),
            *((("limit", worst.limit),) if worst.limit else ()),
        ),
    )
    return Finding(
        Status.FAIL,
        metrics,
        signature,
        f"within the bound (the {worst.tensor}'s budget {out_budget:.3g}) but its error is "
        f"{max(worst.rms_ratio, worst.max_ratio):.3g}x {worst.against()} "
        f"(allowed {worst.factor:g}x; excess ratio {worst.ratio:.3g})"
        + worst.order_hint()
        + _freivalds_count(metrics),
    )


def _grad_gate(ctx: CaseContext, ts: list[Trial], found: Finding) -> Finding:
    """A passing backward whose 16-bit reduced gradient errs past a correct kernel's modelled rounding
    (kcgate.engine.grad_excess: Liger#950's dγ summed in bf16) fails as ``excess-error`` on that gradient;
    every measured ratio is recorded (``grad_excess.NAME``)."""
    if found.status != Status.PASS or not grad_excess.applies(ctx):
        return found
    measured = grad_excess.measure(ctx, ts)
    if not measured:
        return found
    metrics = _with_extra(found.metrics, {f"grad_excess.{g.grad}": g.ratio for g in measured})
    worst = grad_excess.worst(measured)
    if worst is None:
        return replace(found, metrics=metrics)
    budget = dict(metrics.extra).get(f"grad_budget.{worst.grad}", metrics.budget_used or 0.0)
    return Finding(
        Status.FAIL,
        metrics,
        worst.signature(),
        f"within the bound (budget {budget:.3g}) but {worst.summary()}",
    )


def _decided(
    ctx: CaseContext, measured: list[sensitivity.Excess], parts: list[sensitivity.Errors]
) -> tuple[sequential.Decision, str, list[sensitivity.Excess], excess_line.Evidence | None, int]:
    """The sequential test (kcgate.engine.sequential): at each look, the line's decision on every
    observation so far; undecided, fresh forward trials at the case shape (salts ``excess-seq-i``) until the
    next look's count, at most ``sequential.MAX_EXTRA``; undecided at the last look, or when a fresh trial
    raises or breaks the bound, inconclusive. Returns the decision, its note, every observation, the evidence
    pooled over them and how many observations were added."""
    looks = sequential.totals(len(measured))
    drawn = 0
    for i, total in enumerate(looks):
        stopped = False
        while len(measured) < total and not stopped:
            t = _forward_trial(ctx, f"excess-seq-{drawn}")
            more, more_parts = (
                ([], []) if t is None else _excess_measured(ctx, [t], f"excess-seq-{drawn}-pool")
            )
            drawn += 1
            stopped = not more
            measured, parts = [*measured, *more], [*parts, *more_parts]
        worst = max(measured, key=lambda e: e.ratio)
        ev = excess_line.evidence(ctx, parts) if worst.ratio > sequential.NEAR_EXCESS else None
        decision, note = excess_line.decide(worst, measured, ev, final=stopped or i == len(looks) - 1)
        if decision != sequential.MORE:
            return decision, note, measured, ev, drawn
    raise AssertionError("the last look decides")  # pragma: no cover


def _excess_measured(
    ctx: CaseContext, ts: list[Trial], pool: str = "excess-pool"
) -> tuple[list[sensitivity.Excess], list[sensitivity.Errors]]:
    """Each trial's statistics where its output has the elements the statistic needs; the small ones pooled
    (with fresh trials at the case shape, salts ``{pool}-i``, until the pool holds
    ``sensitivity.MIN_ELEMENTS``). Also every trial's weighted errors, for the
    evidence pooled over them (none from Freivalds trials)."""
    out: list[sensitivity.Excess] = []
    small: list[sensitivity.Errors] = []
    parts: list[sensitivity.Errors] = []
    for t in ts:
        if t.freivalds is not None:
            if (e := sensitivity.measure(ctx, t)) is not None:
                out.append(e)
        elif (part := sensitivity.errors(ctx, t)) is not None:
            if part.n >= sensitivity.MIN_ELEMENTS:
                out.append(sensitivity.statistics(ctx, [part]))
                parts.append(part)
            else:
                small.append(part)
    if small:
        grown: list[sensitivity.Errors] = []
        pooled = sensitivity.pooled(ctx, small, lambda i: _forward_trial(ctx, f"{pool}-{i}"), grown)
        if pooled is not None:
            out.append(pooled)
            parts.extend(grown)
    return out, parts


def _forward_trial(ctx: CaseContext, salt: str) -> Trial | None:
    """A fresh forward trial at the case shape for a pool or the sequential test (the gate reads the forward
    output only); None stops drawing (it raised or broke the bound: the case's own trials judge the kernel,
    the fresh ones only its error's size)."""
    forward = (
        ctx
        if not ctx.contract.backward
        else replace(ctx, contract=replace(ctx.contract, direction="forward"))
    )
    t = run_trial(forward, salt=salt)
    return t if t.ok and not t.error else None


def _freivalds_count(m: Metrics) -> str:
    """Freivalds trials: how many elements of the recomputed rows are beyond a correct product's error."""
    e = dict(m.extra)
    if "freivalds_k" not in e:
        return ""
    return (
        f"; Freivalds ({e['freivalds_k']:.0f} vectors): {e.get('freivalds_excess_elements', 0):.0f} of the "
        f"{m.elements} elements in the {e.get('freivalds_rows_rechecked', 0):.0f} flagged rows, recomputed "
        "in fp64, are beyond a correct product's error"
    )


def _relative_signature(m: Metrics) -> Signature | None:
    """method = "relative", within the bound but over factor × the baseline's error: excess-error."""
    e = dict(m.extra)
    if "relative_ratio" not in e or e.get("bound_budget", float("inf")) > 1.0:
        return None
    return Signature(
        "excess-error",
        f"error {e['relative_ratio']:.3g}x the baseline's on the same inputs",
        tuple(
            sorted((k, v) for k, v in e.items() if k in ("relative_ratio", "relative_err", "baseline_err"))
        ),
    )


def _fail_message(m: Metrics) -> str:
    b = "inf" if m.budget_used is None else f"{m.budget_used:.3g}"
    e = dict(m.extra)
    if "freivalds_k" in e:
        return (
            f"error exceeds the allowed bound: budget used {b}; Freivalds ({e['freivalds_k']:.0f} vectors) "
            f"flagged {e.get('freivalds_rows_over', 0):.0f} of {e.get('freivalds_rows', 0):.0f} rows; "
            f"{e.get('freivalds_rows_rechecked', 0):.0f} recomputed in fp64: {m.mismatches} of their "
            f"{m.elements} elements over the bound"
        )
    ratio = dict(m.extra).get("relative_ratio")
    if ratio is not None:
        e = dict(m.extra)
        return (
            f"error {ratio:.3g}x the baseline's (max |err| {e.get('relative_err', 0):.3g} against "
            f"{e.get('baseline_err', 0):.3g}), bound budget {e.get('bound_budget', 0):.3g}: budget used {b}"
        )
    # the one of several outputs or gradients that decided, then the others over their bounds
    decided = f"the gradient of {m.worst_grad!r}" if m.worst_grad else f"output {m.worst_output!r}"
    at = f" in {decided}" if m.worst_grad or m.worst_output else ""
    also = ", ".join(f"{name} ({v:.3g})" for name, v in m.parts_over if name != decided)
    return (
        f"error exceeds the allowed bound{at}: budget used {b} ({m.mismatches} of {m.elements} elements over)"
        + (f"; also over: {also}" if also else "")
    )


def _with_extra(m: Metrics, extra: dict[str, float]) -> Metrics:
    return replace(m, extra=tuple(sorted({**dict(m.extra), **extra}.items())))


def diagnose(ctx: CaseContext, ts: list[Trial]) -> Signature | None:
    """Name the likely failure mode with its evidence (kcgate.engine.diagnosis)."""
    return naming.diagnose(ctx, ts)


def _class_check(module: str) -> Callable[[CaseContext], Finding]:
    """A class's own check from ``kcgate.engine.checks.<module>``, imported on first use (no import cycle)."""

    def run(ctx: CaseContext) -> Finding:
        finding = importlib.import_module(f"kcgate.engine.checks.{module}").check(ctx)
        # then the stability probes every class runs where they apply (kcgate.engine.checks.stability)
        return importlib.import_module("kcgate.engine.checks.stability").after_class(ctx, finding)  # type: ignore[no-any-return]

    run.__name__ = f"{module}.check"
    return run


# One check per class id in kcgate.vocab.classes.CLASSES: module c_prc_01 for C-PRC-01.
CHECKS: dict[str, Callable[[CaseContext], Finding]] = {
    cid: _class_check(cid.lower().replace("-", "_")) for cid in CLASSES
}
