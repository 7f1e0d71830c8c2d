"""kcgate.gate.decide: each [policy] rule decides the exit code, the blocking changes and the reasons; the
decision round-trips through JSON. Real runs built in memory, no files."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from kcgate.contracts.policy import DriftRule, Policy, Waiver
from kcgate.errors import ExitCode, UsageError
from kcgate.gate.decide import GateVerdict, apply_fail_on, decide
from kcgate.results.model import CaseResult, Fingerprint, Metrics, RunResult

TODAY = dt.date(2026, 6, 1)
_FP = Fingerprint(backend="cpu", device="x", torch="2.13.0")


def _case(case_id: str, status: str = "pass", budget: float | None = 0.1, contract: str = "") -> CaseResult:
    return CaseResult(
        case_id, contract or case_id, "C-PRC-01", "matmul", "float32", (4, 4), 0, status, Metrics(budget)
    )


def _run(*cases: CaseResult, runner: str = "cpu-a", complete: bool = True) -> RunResult:
    return RunResult(runner, _FP, cases, complete=complete)


def _gate(
    current: list[RunResult], base: list[RunResult], policy: Policy = Policy(), expected: tuple[str, ...] = ()
) -> GateVerdict:
    cur = {r.runner: r for r in current}
    bases = {r.runner: r for r in base}
    return decide(cur, bases, policy, TODAY, expected)[1]


def _blocking(gate: GateVerdict) -> list[tuple[str, str]]:
    return [(c.category, c.case_id) for c in gate.blocking]


# ---- block_on --------------------------------------------------------------------------------------


def test_a_new_violation_blocks_by_default_and_exits_1() -> None:
    gate = _gate([_run(_case("a", "fail"), _case("b"))], [_run(_case("a"), _case("b"))])
    assert gate.exit_code == ExitCode.VIOLATION and not gate.passed
    assert _blocking(gate) == [("new-violation", "a")]
    assert [(r.category, r.changes, r.runners) for r in gate.reasons] == [("new-violation", 1, ("cpu-a",))]


def test_nothing_blocking_exits_0_with_no_reasons() -> None:
    gate = _gate([_run(_case("a"), _case("b", "fail"))], [_run(_case("a"), _case("b", "fail"))])
    assert gate.exit_code == ExitCode.OK and gate.passed
    assert gate.blocking == () and gate.reasons == ()


def test_block_on_decides_which_categories_block() -> None:
    current, base = [_run(_case("a", "fail"), _case("b", "fail"))], [_run(_case("a"), _case("b", "fail"))]
    assert _blocking(_gate(current, base, Policy(block_on=("still-failing",)))) == [("still-failing", "b")]
    assert _gate(current, base, Policy(block_on=())).exit_code == ExitCode.OK


def test_reasons_are_most_severe_first_and_count_every_runner() -> None:
    current = [_run(_case("a", "fail"), _case("b", "error")), _run(_case("a", "fail"), runner="cpu-b")]
    base = [_run(_case("a"), _case("b")), _run(_case("a"), runner="cpu-b")]
    reasons = _gate(current, base).reasons
    assert [(r.category, r.changes, r.runners) for r in reasons] == [
        ("new-violation", 2, ("cpu-a", "cpu-b")),
        ("error", 1, ("cpu-a",)),
    ]
    assert reasons[0].text() == "new violation 2 on cpu-a, cpu-b (policy.block_on)"


def test_fail_on_replaces_block_on_and_rejects_categories_that_cannot_block() -> None:
    assert apply_fail_on(Policy(), "still-failing, budget-drift").block_on == (
        "still-failing",
        "budget-drift",
    )
    assert apply_fail_on(Policy(block_on=("error",)), " ").block_on == ("error",)
    with pytest.raises(UsageError, match="fixed cannot block"):
        apply_fail_on(Policy(), "new-violation,fixed")


# ---- budget_drift ----------------------------------------------------------------------------------

_DRIFT = Policy(block_on=("budget-drift",), budget_drift=DriftRule(ratio=4.0))


def test_drift_by_ratio_blocks_above_the_factor_only() -> None:
    base = [_run(_case("x5", budget=0.01), _case("x3", budget=0.1))]
    current = [_run(_case("x5", budget=0.05), _case("x3", budget=0.3))]
    assert _blocking(_gate(current, base, _DRIFT)) == [("budget-drift", "x5")]


def test_drift_ratio_floors_tiny_budgets() -> None:
    gate = _gate([_run(_case("n", budget=1e-4))], [_run(_case("n", budget=1e-6))], _DRIFT)
    assert gate.passed


def test_drift_by_absolute_rise() -> None:
    rule = Policy(block_on=("budget-drift",), budget_drift=DriftRule(ratio=None, absolute=0.5))
    base = [_run(_case("up", budget=0.2), _case("flat", budget=0.2))]
    current = [_run(_case("up", budget=0.8), _case("flat", budget=0.6))]
    gate = _gate(current, base, rule)
    assert _blocking(gate) == [("budget-drift", "up")]
    assert gate.reasons[0].rule == "policy.block_on, beyond policy.budget_drift"


# ---- required_runners ------------------------------------------------------------------------------


def test_a_required_runner_without_results_blocks() -> None:
    gate = _gate([_run(_case("a"))], [_run(_case("a"))], Policy(required_runners=("nvidia-*",)))
    assert _blocking(gate) == [("missing-runner", "")]
    assert gate.blocking[0].runner == "nvidia-*"
    assert "required_runners" in gate.reasons[0].rule


def test_an_expected_runner_without_results_blocks_and_an_answered_pattern_does_not() -> None:
    runs = [_run(_case("a"))]
    assert _gate(runs, runs, Policy(required_runners=("cpu-*",))).passed
    gate = _gate(runs, runs, Policy(), expected=("amd-mi300",))
    assert [(c.category, c.runner) for c in gate.blocking] == [("missing-runner", "amd-mi300")]


def test_a_missing_runner_that_was_not_required_does_not_block() -> None:
    gate = _gate([_run(_case("a"))], [_run(_case("a")), _run(_case("a"), runner="cpu-b")])
    assert gate.passed


# ---- acknowledge_removed ---------------------------------------------------------------------------


def test_a_removed_contract_blocks_unless_acknowledged() -> None:
    base = [_run(_case("a"), _case("gone"))]
    current = [_run(_case("a"))]
    assert _blocking(_gate(current, base)) == [("removed", "gone")]
    assert _gate(current, base, Policy(acknowledge_removed=("gone",))).passed


def test_a_case_missing_from_an_incomplete_run_is_an_error_even_when_acknowledged() -> None:
    gate = _gate(
        [_run(_case("a"), complete=False)],
        [_run(_case("a"), _case("gone"))],
        Policy(acknowledge_removed=("gone",)),
    )
    assert _blocking(gate) == [("error", "gone")]


# ---- waivers ---------------------------------------------------------------------------------------


def _waived(until: dt.date, kind: str = "violation", runner: str = "cpu-*") -> Policy:
    return Policy(waivers=(Waiver("w", runner, until, "known", kind=kind),))


def test_a_live_waiver_hides_a_violation_and_is_listed_as_applied() -> None:
    current = [_run(_case("w1", "fail", contract="w"), _case("w2", "fail", contract="w"))]
    gate = _gate(current, [_run(_case("w1", contract="w"), _case("w2", contract="w"))], _waived(TODAY))
    assert gate.passed
    assert [w.to_json() for w in gate.waivers] == [
        {
            "contract_id": "w",
            "runner": "cpu-a",
            "kind": "violation",
            "until": "2026-06-01",
            "expired": False,
            "cases": 2,
        }
    ]


def test_an_expired_waiver_blocks_and_says_so() -> None:
    current = [_run(_case("w1", "fail", contract="w"))]
    gate = _gate(current, [_run(_case("w1", contract="w"))], _waived(TODAY - dt.timedelta(days=1)))
    assert _blocking(gate) == [("expired-waiver", "w1")]
    assert [(w.expired, w.cases) for w in gate.waivers] == [(True, 1)]
    assert "until date has passed" in gate.reasons[0].rule


def test_a_waiver_covers_only_its_runners_and_kind() -> None:
    current = [_run(_case("w1", "fail", contract="w"), runner="amd-x")]
    base = [_run(_case("w1", contract="w"), runner="amd-x")]
    assert _blocking(_gate(current, base, _waived(TODAY))) == [("new-violation", "w1")]
    assert _blocking(_gate(current, base, _waived(TODAY, runner="amd-*", kind="error"))) == [
        ("new-violation", "w1")
    ]


def test_an_error_waiver_hides_an_error() -> None:
    current = [_run(_case("e1", "error", contract="w"))]
    gate = _gate(current, [_run(_case("e1", contract="w"))], _waived(TODAY, kind="error"))
    assert gate.passed
    assert [(w.kind, w.cases) for w in gate.waivers] == [("error", 1)]


def test_a_waiver_nothing_fails_under_is_not_applied() -> None:
    gate = _gate([_run(_case("w1", contract="w"))], [_run(_case("w1", contract="w"))], _waived(TODAY))
    assert gate.waivers == () and gate.passed  # unexpected-pass does not block by default


# ---- the record ------------------------------------------------------------------------------------


def test_the_verdict_round_trips_through_json() -> None:
    current = [
        _run(_case("a", "fail"), _case("w1", "fail", contract="w"), _case("e", "error")),
        _run(_case("a", "fail", budget=2.5), runner="cpu-b"),
    ]
    base = [_run(_case("a"), _case("w1", contract="w"), _case("gone")), _run(_case("a"), runner="cpu-b")]
    gate = _gate(current, base, _waived(TODAY), expected=("nvidia-h100",))
    assert gate.reasons and gate.waivers and len(gate.blocking) == 5
    text = json.dumps(gate.to_json())
    again = GateVerdict.from_json(json.loads(text))
    assert again == gate
    assert json.dumps(again.to_json()) == text


def test_the_decision_agrees_with_the_diff_it_judged() -> None:
    current, base = [_run(_case("a", "fail"), _case("b"))], [_run(_case("a"), _case("c"))]
    diff, gate = decide({"cpu-a": current[0]}, {"cpu-a": base[0]}, Policy(), TODAY)
    assert gate.blocking == diff.blocking and gate.passed == diff.passed
