"""Diff each runner's current results against its baseline: exactly one category per case.

Pure functions over frozen records (no files, no torch). The categories are ``diff_model.CATEGORIES``;
the precedence that makes them mutually exclusive is in ``categorize`` and documented in docs/diff.md.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import glob
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from kcgate.diff_model import CaseChange, RunnerDiff, Verdict
from kcgate.errors import ResultsError
from kcgate.policy import Policy, Waiver
from kcgate.results import CaseResult, RunResult, build_frozen, clean_number

UNEVALUATED = frozenset({"error", "refused"})
INCOMPLETE_MESSAGE = (
    "not run: the current results are incomplete (a shard is missing or the run stopped early)"
)


@dataclass(frozen=True)
class _Context:
    """Per-runner facts every case's categorisation needs, computed once."""

    runner: str
    policy: Policy
    today: dt.date
    has_base: bool
    comparable: bool  # the baseline has the same fingerprint key
    waivers: Mapping[str, Waiver | None]  # contract id -> the waiver covering it on this runner
    failing_contracts: frozenset[str]  # contracts with a failing case now: their waivers are still needed


def index_cases(run: RunResult, name: str = "") -> dict[str, CaseResult]:
    """Cases by case_id; a duplicate id would make the diff ambiguous, so it is a ResultsError."""
    out: dict[str, CaseResult] = {}
    for case in run.cases:
        if case.case_id in out:
            where = name or f"results of runner {run.runner!r}"
            raise ResultsError(f"{where}: case id {case.case_id[:120]!r} appears twice; regenerate the file")
        out[case.case_id] = case
    return out


def diff_runs(
    base: RunResult | None, current: RunResult | None, runner: str, policy: Policy, today: dt.date
) -> RunnerDiff:
    """Categorise every case of ``runner``: current cases first (in run order), then the vanished ones."""
    if current is None:
        return _missing_leg(base, runner, policy)
    base_cases = index_cases(base) if base else {}
    current_ids = index_cases(current).keys()
    ctx = _context(base, current, runner, policy, today)
    changes = [_present(case, base_cases.get(case.case_id), ctx) for case in current.cases]
    changes += [
        _absent(case, current.complete, ctx) for cid, case in base_cases.items() if cid not in current_ids
    ]
    base_key = base.fingerprint.key() if base else ""
    return RunnerDiff(runner, current.fingerprint.key(), base_key, tuple(changes))


def make_verdict(
    current: Mapping[str, RunResult],
    baselines: Mapping[str, RunResult],
    policy: Policy,
    today: dt.date,
    expected_runners: Iterable[str] = (),
) -> Verdict:
    """Diff every runner seen on either side or expected; required patterns nobody answered are missing legs."""
    expected = tuple(expected_runners)
    policy = replace(
        policy, required_runners=policy.required_runners + tuple(glob.escape(r) for r in expected)
    )
    names = sorted(set(current) | set(baselines) | set(expected))
    diffs = [diff_runs(baselines.get(n), current.get(n), n, policy, today) for n in names]
    diffs += [_missing_leg(None, p, policy) for p in _unanswered(policy.required_runners, names)]
    return Verdict(tuple(diffs))


def categorize(case: CaseResult, base: CaseResult | None, ctx: _Context) -> str:
    """Precedence: facts about the current run alone, then baseline availability, then the comparison."""
    if case.status in UNEVALUATED:
        return "error"
    waived = _waiver_category(case, ctx)
    if waived:
        return waived
    if not ctx.has_base:
        return "unverified"
    if not ctx.comparable:
        return "incomparable"
    return _compare(case, base, ctx.policy.budget_drift)


def _compare(case: CaseResult, base: CaseResult | None, drift: float) -> str:
    """Both sides are evaluated on the same fingerprint; a baseline error/refusal counts as not failing."""
    failing = case.status == "fail"
    if base is None:
        return "new-violation" if failing else "new"
    if failing:
        return "still-failing" if base.status == "fail" else "new-violation"
    if base.status != "pass":
        return "fixed"
    return "budget-drift" if _drifted(base, case, drift) else "unchanged"


def _drifted(base: CaseResult, case: CaseResult, drift: float) -> bool:
    now, before = clean_number(case.metrics.budget_used), clean_number(base.metrics.budget_used)
    return now is not None and before is not None and now - before > drift


def _waiver_category(case: CaseResult, ctx: _Context) -> str:
    """A waiver covers a contract on matching runners; it is unexpected only when nothing it covers fails."""
    waiver = ctx.waivers.get(case.contract_id)
    if waiver is None:
        return ""
    if case.status == "fail":
        return "expired-waiver" if waiver.expired(ctx.today) else "waived"
    return "" if case.contract_id in ctx.failing_contracts else "unexpected-pass"


def _context(
    base: RunResult | None, current: RunResult, runner: str, policy: Policy, today: dt.date
) -> _Context:
    contracts = {c.contract_id for c in current.cases}
    return _Context(
        runner=runner,
        policy=policy,
        today=today,
        has_base=base is not None,
        comparable=base is not None and base.fingerprint.key() == current.fingerprint.key(),
        waivers={cid: policy.waiver_for(cid, runner) for cid in contracts},
        failing_contracts=frozenset(c.contract_id for c in current.cases if c.status == "fail"),
    )


def _present(case: CaseResult, base: CaseResult | None, ctx: _Context) -> CaseChange:
    category = categorize(case, base, ctx)
    waiver = ctx.waivers.get(case.contract_id)
    message = (
        _waiver_note(waiver) if category in ("waived", "expired-waiver", "unexpected-pass") else case.message
    )
    return build_frozen(  # one per case, 10^5 per report: skip the frozen __init__
        CaseChange,
        {
            "category": category,
            "runner": ctx.runner,
            "case_id": case.case_id,
            "contract_id": case.contract_id,
            "klass": case.klass,
            "status": case.status,
            "base_status": base.status if base else "",
            "budget_used": clean_number(case.metrics.budget_used),
            "base_budget_used": clean_number(base.metrics.budget_used) if base else None,
            "signature": case.signature.summary if case.signature else "",
            "message": message,
            "line": case.line,
            "blocking": category in ctx.policy.block_on,
        },
    )


def _absent(base: CaseResult, complete: bool, ctx: _Context) -> CaseChange:
    """In the baseline, not now: removed, unless the current run is incomplete (then it was not run)."""
    category = "removed" if complete else "error"
    acknowledged = category == "removed" and base.contract_id in ctx.policy.acknowledge_removed
    return CaseChange(
        category=category,
        runner=ctx.runner,
        case_id=base.case_id,
        contract_id=base.contract_id,
        klass=base.klass,
        base_status=base.status,
        base_budget_used=clean_number(base.metrics.budget_used),
        message="removal acknowledged in policy"
        if acknowledged
        else ("" if complete else INCOMPLETE_MESSAGE),
        line=base.line,
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
