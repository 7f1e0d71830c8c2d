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

from kcgate.contracts.policy import DriftRule, Policy, Waiver
from kcgate.gate.model import CaseChange, Diff, RunnerDiff
from kcgate.results.model import UNEVALUATED, RunResult, Status, build_frozen, index_cases
from kcgate.results.records import CONTRACT_ENV, VOLATILE_SUFFIXES, is_pass_note
from kcgate.results.severity import row_severity, severities
from kcgate.results.table import CaseTable
from kcgate.vocab.categories import WAIVER_DECIDED

_FAIL, _PASS = Status.FAIL, Status.PASS  # globals: an enum member's lookup costs 0.2 µs, 10^6 per report
INCOMPLETE_MESSAGE = (
    "not run: the current results are incomplete (a shard is missing or the run stopped early)"
)

NO_BASELINE = "not compared: this runner has no baseline"


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
        gone = [j for cid, j in base_at.items() if cid not in current_at]
        changes += [_absent(base.table, j, current.complete, ctx) for j in gone]
    base_key = base.fingerprint.key() if base else ""
    return RunnerDiff(runner, current.fingerprint.key(), base_key, tuple(changes))


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
    base: tuple[str, float | None, float | None] | None,
    ctx: _Context,
    rounding: float | None = None,
    elements: int = 0,
) -> str:
    """Precedence: facts about the current run alone, then baseline availability, then the comparison.

    ``base`` is the baseline case's (status, budget used, share not correctly rounded), None when the
    baseline lacks the case; ``rounding`` is the current case's share (16- and 8-bit outputs, else None)."""
    if status in UNEVALUATED:
        return _error_category(contract_id, ctx)
    waived = _waiver_category(status, contract_id, ctx)
    if waived:
        return waived
    if not ctx.has_base or not ctx.comparable or contract_id in ctx.env_changed:
        return _uncompared(status, base, ctx.has_base)
    return _compare(status, budget, base, ctx.policy.budget_drift, rounding, elements)


def _uncompared(status: str, base: tuple[str, float | None, float | None] | None, has_base: bool) -> str:
    """No comparable baseline. A failure is still a violation: whatever moves a case out of comparison (a
    PR's env line, a new fingerprint or runner name) never turns a failure into a pass; only a failure the
    baseline already had stays a known one."""
    if status == _FAIL:
        return "still-failing" if base is not None and base[0] == _FAIL else "new-violation"
    return "incomparable" if has_base else "unverified"


def _compare(
    status: str,
    budget: float | None,
    base: tuple[str, float | None, float | None] | None,
    drift: DriftRule,
    rounding: float | None,
    elements: int,
) -> str:
    """Both sides are evaluated on the same fingerprint; a baseline error/refusal counts as not failing."""
    failing = status == _FAIL
    if base is None:
        return "new-violation" if failing else "new"
    base_status, base_budget, base_rounding = base
    if failing:
        return "still-failing" if base_status == _FAIL else "new-violation"
    if base_status != _PASS:
        return "fixed"
    drifted = drift.drifted(base_budget, budget) or drift.rounding_drifted(base_rounding, rounding, elements)
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
        if not k.endswith(VOLATILE_SUFFIXES) and not k.startswith(CONTRACT_ENV)
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
        list(zip(base.column("status"), base.metric("budget_used"), base.metric("cr_miss"))) if base else []
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
        budget,
        ulp,
        abs_err,
        rounding,
        elements,
        severe,
    ) in columns:
        j = base_at.get(case_id)
        before = base_side[j] if j is not None else None
        category = categorize(status, contract_id, budget, before, ctx, rounding, elements)
        if category == "unchanged" and is_pass_note(status, message):
            category = "budget-drift"  # a limitation the gate passed: tracked, not blocking (issue 46)
        if category == "budget-drift" and before is not None and not message:
            message = rounding_note(before[2], rounding, ctx.policy.budget_drift, elements)
        if category in WAIVER_DECIDED and status in UNEVALUATED:
            note = _waiver_note(ctx.error_waivers.get(contract_id))
            message = f"{note}; {status}: {message}" if message else note
        elif category in WAIVER_DECIDED:
            message = _waiver_note(ctx.waivers.get(contract_id))
        elif category == "incomparable":
            why = ctx.env_changed.get(contract_id) or ctx.incomparable
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
                    "base_status": before[0] if before else "",
                    "budget_used": budget,
                    "base_budget_used": before[1] if before else None,
                    "budget_factor": ctx.policy.budget_drift.factor(before[1], budget) if before else None,
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
