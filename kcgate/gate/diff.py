"""Diff each runner's current results against its baseline: exactly one category per case.

Pure functions over frozen records (no files, no torch). The categories are ``vocab.categories.CATEGORIES``;
the precedence that makes them mutually exclusive is in ``categorize`` and documented in docs/diff.md.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import glob
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from kcgate.contracts.policy import DriftRule, Policy, Waiver
from kcgate.gate.model import CaseChange, Diff, RunnerDiff
from kcgate.results.model import UNEVALUATED, RunResult, Status, build_frozen, index_cases
from kcgate.results.records import (
    ABSENT,
    NO_KERNEL,
    PRE_EXISTING,
    UNKEYED_PREFIXES,
    VOLATILE_SUFFIXES,
    fails_alike,
    is_pass_note,
)
from kcgate.results.severity import row_severity, severities
from kcgate.results.table import CaseTable
from kcgate.vocab.case_ids import is_fresh
from kcgate.vocab.categories import WAIVER_DECIDED

_FAIL, _PASS, _ERROR = (
    Status.FAIL,
    Status.PASS,
    Status.ERROR,
)  # globals: an enum member's lookup costs 0.2 µs, 10^6 per report
INCOMPLETE_MESSAGE = (
    "not run: the current results are incomplete (a shard is missing or the run stopped early)"
)

NO_BASELINE = "not compared: this runner has no baseline"


class Before(NamedTuple):
    """The baseline's side of a case: what the diff compares with."""

    status: str
    budget: float | None
    rounding: float | None  # the share not correctly rounded (16- and 8-bit outputs)
    seed: int  # the same inputs on both sides only when equal (a replayed case: docs/diff.md)
    no_kernel: bool  # an error because the kernel was not there to import: the case did not exist yet


class Now(NamedTuple):
    """The current side's facts beyond its status and budget that the category reads."""

    seed: int | None = None
    attribution: str = ""  # `kcgate run --base-ref`'s rerun on base: pre-existing | introduced | ""


@dataclass(frozen=True)
class _Context:
    """Per-runner facts every case's categorisation needs, computed once."""

    runner: str
    policy: Policy
    today: dt.date
    has_base: bool
    comparable: bool  # the baseline has the same fingerprint key
    env_changed: Mapping[str, str]  # contract id -> why its cases are incomparable: its env changed
    incomparable: str  # why the whole runner is (the fingerprint fields that differ), "" when comparable
    waivers: Mapping[str, Waiver | None]  # contract id -> the waiver covering its violations on this runner
    error_waivers: Mapping[str, Waiver | None]  # contract id -> the waiver (kind "error") covering its errors
    failing_contracts: frozenset[str]  # contracts with a failing case now: their waivers are still needed


def diff_runs(
    base: RunResult | None, current: RunResult | None, runner: str, policy: Policy, today: dt.date
) -> RunnerDiff:
    """Categorise every case of ``runner``: current cases first (in run order), then the vanished ones.

    Reads columns, not records: a report diffs 10^5 cases and needs five fields of most of them."""
    if current is None:
        return _missing_leg(base, runner, policy)
    base_at = index_cases(base) if base else {}
    current_at = index_cases(current)
    ctx = _context(base, current, runner, policy, today)
    changes = _present(current.table, base.table if base else None, base_at, ctx)
    if base is not None:
        # a fresh case (/f0) of the baseline is a draw, not a contract: absent now it was not drawn, not removed
        gone = [j for cid, j in base_at.items() if cid not in current_at and not is_fresh(cid)]
        changes += [_absent(base.table, j, current.complete, ctx) for j in gone]
    base_key = base.fingerprint.key() if base else ""
    return RunnerDiff(runner, current.fingerprint.key(), base_key, tuple(changes), _versions(base, current))


def _versions(base: RunResult | None, current: RunResult) -> tuple[tuple[str, str, str], ...]:
    """The ``[project] track`` distributions whose version differs from the baseline's."""
    was = base.fingerprint.tracked() if base else {}
    now = current.fingerprint.tracked()
    return tuple((n, was[n], now[n]) for n in sorted(now) if n in was and was[n] != now[n])


def make_diff(
    current: Mapping[str, RunResult],
    baselines: Mapping[str, RunResult],
    policy: Policy,
    today: dt.date,
    expected_runners: Iterable[str] = (),
) -> Diff:
    """Diff every runner seen on either side or expected; required patterns nobody answered are missing legs."""
    expected = tuple(expected_runners)
    policy = replace(
        policy, required_runners=policy.required_runners + tuple(glob.escape(r) for r in expected)
    )
    names = sorted(set(current) | set(baselines) | set(expected))
    diffs = [diff_runs(baselines.get(n), current.get(n), n, policy, today) for n in names]
    diffs += [_missing_leg(None, p, policy) for p in _unanswered(policy.required_runners, names)]
    return Diff(tuple(diffs))


def categorize(
    status: str,
    contract_id: str,
    budget: float | None,
    base: Before | None,
    ctx: _Context,
    rounding: float | None = None,
    elements: int = 0,
    now: Now = Now(),
) -> str:
    """Precedence: a waiver the team wrote; then evidence that a failure or error is main's, not this run's
    (pre-existing: the base commit's rerun, or the baseline on the same seed); then facts about the current
    run alone (an error); then baseline availability; then the comparison (docs/diff.md#precedence).

    ``base`` is the baseline case (None when the baseline lacks it); ``rounding`` is the current case's
    share not correctly rounded (16- and 8-bit outputs, else None)."""
    if status in UNEVALUATED:
        waived = _error_category(contract_id, ctx)
        if waived == "error" and _pre_existing(status, base, now, _comparable(contract_id, ctx)):
            return "pre-existing"
        return waived
    waived = _waiver_category(status, contract_id, ctx)
    if waived:
        return waived
    comparable = _comparable(contract_id, ctx)
    if comparable:
        category = _compare(status, budget, base, ctx.policy.budget_drift, rounding, elements, now.seed)
    else:
        category = _uncompared(status, base, ctx.has_base)
    if category == "new-violation" and _pre_existing(status, base, now, comparable):
        return "pre-existing"
    return category


def _pre_existing(status: str, base: Before | None, now: Now, comparable: bool) -> bool:
    """Main already fails alike on these inputs: the base commit's rerun says so (measured now, on this
    runner), or else the comparable baseline failed or errored on the same seed."""
    if now.attribution:
        return now.attribution == PRE_EXISTING
    if not comparable or base is None or base.seed != now.seed:
        return False
    return fails_alike(status, base.status)


def _uncompared(status: str, base: Before | None, has_base: bool) -> str:
    """No comparable baseline. A failure is still a violation: whatever moves a case out of comparison (a
    PR's env line, a new fingerprint or runner name) never turns a failure into a pass; only a failure the
    baseline already had stays a known one."""
    if status == _FAIL:
        return "still-failing" if base is not None and base.status == _FAIL else "new-violation"
    return "incomparable" if has_base else "unverified"


def _compare(
    status: str,
    budget: float | None,
    base: Before | None,
    drift: DriftRule,
    rounding: float | None,
    elements: int,
    seed: int | None = None,
) -> str:
    """Both sides are evaluated on the same fingerprint; a baseline error/refusal counts as not failing.
    Budgets are compared only on the same inputs (a replayed seed): between two draws a budget moves with
    the draw, and that is no drift. A case whose kernel was not there at base is new, never fixed."""
    failing = status == _FAIL
    if base is None:
        return "new-violation" if failing else "new"
    if failing:
        return "still-failing" if base.status == _FAIL else "new-violation"
    if base.status != _PASS:
        return "new" if base.no_kernel else "fixed"
    if seed is not None and seed != base.seed:
        return "unchanged"
    drifted = drift.drifted(base.budget, budget) or drift.rounding_drifted(base.rounding, rounding, elements)
    return "budget-drift" if drifted else "unchanged"


def rounding_note(base: float | None, now: float | None, drift: DriftRule, elements: int) -> str:
    """The message of a low-precision case whose share of elements not correctly rounded drifted."""
    if base is None or now is None or not drift.rounding_drifted(base, now, elements):
        return ""
    factor = drift.rounding_factor(base, now, elements) or 0.0
    return (
        f"not correctly rounded: {base:.1%} -> {now:.1%} of elements (x{factor:.3g}); "
        "the budget stays near 1 for any correct 16-bit kernel, this share shows the regression first"
    )


def evidence(attribution: str, commit: str, rerun: str, summary: str) -> str:
    """Why a failure is main's or this PR's, in words: the base commit's rerun on the same seed, or the
    baseline's case on the same seed (a pre-existing category without a rerun)."""
    if not attribution:
        return f"pre-existing: on the same seed the baseline {_RERUN_WORDS.get(rerun, rerun)}"
    head = f"{attribution}: on base {commit[:12]}" if commit else f"{attribution}: on base"
    if rerun == ABSENT:
        return f"{head}, the case does not exist"
    said = f" ({summary})" if summary and rerun != _PASS else ""
    return f"{head}, the same seed {_RERUN_WORDS.get(rerun, rerun)}{said}"


_RERUN_WORDS: dict[str, str] = {
    Status.PASS: "passes",
    Status.FAIL: "fails too",
    Status.ERROR: "errors too",
    Status.REFUSED: "is refused too",
}


def _same_seed(category: str) -> str:
    """The attribution of a pre-existing category without a rerun (the baseline's same seed)."""
    return PRE_EXISTING if category == "pre-existing" else ""


def _comparable(contract_id: str, ctx: _Context) -> bool:
    return ctx.has_base and ctx.comparable and contract_id not in ctx.env_changed


def _error_category(contract_id: str, ctx: _Context) -> str:
    """An error is waived (or its waiver expired) when a kind = "error" waiver covers the contract here."""
    waiver = ctx.error_waivers.get(contract_id)
    if waiver is None:
        return "error"
    return "expired-waiver" if waiver.expired(ctx.today) else "waived"


def _waiver_category(status: str, contract_id: str, ctx: _Context) -> str:
    """A waiver covers a contract on matching runners; it is unexpected only when nothing it covers fails."""
    waiver = ctx.waivers.get(contract_id)
    if waiver is None:
        return ""
    if status == _FAIL:
        return "expired-waiver" if waiver.expired(ctx.today) else "waived"
    return "" if contract_id in ctx.failing_contracts else "unexpected-pass"


def _context(
    base: RunResult | None, current: RunResult, runner: str, policy: Policy, today: dt.date
) -> _Context:
    contracts, statuses = current.table.column("contract_id"), current.table.column("status")
    return _Context(
        runner=runner,
        policy=policy,
        today=today,
        has_base=base is not None,
        comparable=base is not None and base.fingerprint.key() == current.fingerprint.key(),
        env_changed=_env_changes(base, current),
        incomparable=_fingerprint_changes(base, current),
        waivers={cid: policy.waiver_for(cid, runner) for cid in set(contracts)},
        error_waivers={cid: policy.waiver_for(cid, runner, "error") for cid in set(contracts)},
        failing_contracts=frozenset(c for c, s in zip(contracts, statuses) if s == _FAIL),
    )


def _env_changes(base: RunResult | None, current: RunResult) -> dict[str, str]:
    """Contracts whose ``env`` (a digest in the fingerprint) differs from the baseline's: their cases ran
    under other numerics (a thread count, ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA), so they are incomparable."""
    if base is None:
        return {}
    before, now = base.fingerprint.contract_envs(), current.fingerprint.contract_envs()
    changed = {}
    for cid in set(before) | set(now):
        if before.get(cid) != now.get(cid):
            was, new = before.get(cid) or "no env", now.get(cid) or "no env"
            changed[cid] = (
                f"incomparable: the contract's env changed since the baseline (env {was} -> {new}); "
                "results computed under another environment are not compared"
            )
    return changed


def _fingerprint_changes(base: RunResult | None, current: RunResult) -> str:
    """What differs between the baseline's fingerprint and this run's (the keyed fields only), as one line."""
    if base is None or base.fingerprint.key() == current.fingerprint.key():
        return ""
    was, now = base.fingerprint.to_json(), current.fingerprint.to_json()
    flags_was, flags_now = was.pop("flags"), now.pop("flags")
    diffs = [f"{k} {was[k]!r} -> {now[k]!r}" for k in now if was.get(k) != now[k]]
    keyed = [
        k
        for k in sorted(set(flags_was) | set(flags_now))
        if not k.endswith(VOLATILE_SUFFIXES) and not k.startswith(UNKEYED_PREFIXES)
    ]
    diffs += [
        f"{k} {flags_was.get(k, '(not recorded)')!r} -> {flags_now.get(k, '(not recorded)')!r}"
        for k in keyed
        if flags_was.get(k) != flags_now.get(k)
    ]
    shown = "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")
    return (
        f"incomparable: the baseline's fingerprint differs ({shown or 'its key'}): a new baseline is needed"
    )


def _present(
    cases: CaseTable, base: CaseTable | None, base_at: Mapping[str, int], ctx: _Context
) -> list[CaseChange]:
    """One change per current case, from the columns both sides need."""
    base_side = (
        [
            Before(status, budget, rounding, seed, status == _ERROR and message.startswith(NO_KERNEL))
            for status, budget, rounding, seed, message in zip(
                base.column("status"),
                base.metric("budget_used"),
                base.metric("cr_miss"),
                base.column("seed"),
                base.column("message"),
            )
        ]
        if base
        else []
    )
    base_severity = severities(base) if base else ()
    columns = zip(
        *(
            cases.column(k)
            for k in (
                "case_id",
                "contract_id",
                "klass",
                "status",
                "signature",
                "message",
                "line",
                "source",
                "dtype",
                "seed",
                "shrunk_shape",
                "shrunk_nonzero",
                "attribution",
                "base_commit",
                "base_rerun",
                "base_summary",
            )
        ),
        cases.metric("budget_used"),
        cases.metric("max_ulp"),
        cases.metric("max_abs_err"),
        cases.metric("cr_miss"),
        cases.metric("elements"),
        severities(cases),
    )
    changes = []
    for (
        case_id,
        contract_id,
        klass,
        status,
        signature,
        message,
        line,
        source,
        dtype,
        seed,
        shrunk,
        nonzero,
        attribution,
        base_commit,
        base_rerun,
        base_summary,
        budget,
        ulp,
        abs_err,
        rounding,
        elements,
        severe,
    ) in columns:
        j = base_at.get(case_id)
        before = base_side[j] if j is not None else None
        now = Now(seed, attribution)
        category = categorize(status, contract_id, budget, before, ctx, rounding, elements, now)
        if category == "unchanged" and is_pass_note(status, message):
            category = "budget-drift"  # a limitation the gate passed: tracked, not blocking (issue 46)
        if category == "budget-drift" and before is not None and not message:
            message = rounding_note(before.rounding, rounding, ctx.policy.budget_drift, elements)
        if category in WAIVER_DECIDED and status in UNEVALUATED:
            note = _waiver_note(ctx.error_waivers.get(contract_id))
            message = f"{note}; {status}: {message}" if message else note
        elif category in WAIVER_DECIDED:
            message = _waiver_note(ctx.waivers.get(contract_id))
        elif category == "incomparable":
            why = ctx.env_changed.get(contract_id) or ctx.incomparable
            message = f"{why}; {message}" if message else why
        elif category == "pre-existing" or attribution:
            rerun = base_rerun or (before.status if before else "")
            why = evidence(attribution, base_commit, rerun, base_summary)
            message = f"{why}; {message}" if message else why
        elif status == _FAIL and not _comparable(contract_id, ctx):
            why = ctx.env_changed.get(contract_id) or ctx.incomparable or NO_BASELINE
            message = f"fails its own contract; {why}" + (f"; {message}" if message else "")
        changes.append(
            build_frozen(  # one per case, 10^5 per report: skip the frozen __init__
                CaseChange,
                {
                    "category": category,
                    "runner": ctx.runner,
                    "case_id": case_id,
                    "contract_id": contract_id,
                    "klass": klass,
                    "status": status,
                    "base_status": before.status if before else "",
                    "budget_used": budget,
                    "base_budget_used": before.budget if before else None,
                    "budget_factor": ctx.policy.budget_drift.factor(before.budget, budget)
                    if before
                    else None,
                    "signature": signature.summary if signature else "",
                    "message": message,
                    "line": line,
                    "source": source,
                    "blocking": category in ctx.policy.block_on,
                    "dtype": dtype,
                    "seed": seed,
                    "cause": signature.cause if signature else "",
                    "max_ulp": ulp,
                    "max_abs_err": abs_err,
                    "shrunk_shape": tuple(shrunk or ()),
                    "shrunk_nonzero": tuple(nonzero or ()),
                    "attribution": attribution or _same_seed(category),
                    "base_commit": base_commit,
                    "base_rerun": base_rerun,
                    "replayed": before is not None and before.seed == seed,
                    "severity": severe,
                    "base_severity": base_severity[j] if j is not None else None,
                },
            )
        )
    return changes


def _absent(base: CaseTable, row: int, complete: bool, ctx: _Context) -> CaseChange:
    """In the baseline, not now: removed, unless the current run is incomplete (then it was not run)."""
    category = "removed" if complete else "error"
    contract_id = base.column("contract_id")[row]
    acknowledged = category == "removed" and contract_id in ctx.policy.acknowledge_removed
    return CaseChange(
        category=category,
        runner=ctx.runner,
        case_id=base.column("case_id")[row],
        contract_id=contract_id,
        klass=base.column("klass")[row],
        base_status=base.column("status")[row],
        base_budget_used=base.metric("budget_used")[row],
        base_severity=row_severity(base, row),
        message="removal acknowledged in policy"
        if acknowledged
        else ("" if complete else INCOMPLETE_MESSAGE),
        line=base.column("line")[row],
        source=base.column("source")[row],
        blocking=ctx.policy.blocks(category) and not acknowledged,
    )


def _missing_leg(base: RunResult | None, runner: str, policy: Policy) -> RunnerDiff:
    """No current results: one missing-runner change when it was required or had a baseline, else nothing."""
    required = policy.is_required(runner)
    if not required and base is None:
        return RunnerDiff(runner, "", "", ())
    note = (
        "required runner produced no results" if required else "runner has a baseline but produced no results"
    )
    change = CaseChange(
        category="missing-runner",
        runner=runner,
        case_id="",
        contract_id="",
        message=note,
        blocking=required and policy.blocks("missing-runner"),
    )
    return RunnerDiff(runner, "", base.fingerprint.key() if base else "", (change,))


def _unanswered(patterns: Iterable[str], names: Iterable[str]) -> list[str]:
    seen = list(names)
    return [p for p in dict.fromkeys(patterns) if not any(fnmatch.fnmatchcase(n, p) for n in seen)]


def _waiver_note(waiver: Waiver | None) -> str:
    if waiver is None:
        return ""
    owner = f", owner {waiver.owner}" if waiver.owner else ""
    return f"waiver until {waiver.until.isoformat()}{owner}: {waiver.reason}"
