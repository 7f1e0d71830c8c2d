"""diff_runs / make_diff: one table row per category from hand-written files, plus property tests."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcgate.contracts.policy import Policy, Waiver
from kcgate.errors import ResultsError
from kcgate.gate.diff import diff_runs, make_diff
from kcgate.render.diff_formats import FORMATS
from kcgate.results.model import CaseResult, Fingerprint, Metrics, RunResult, load_run
from kcgate.vocab.categories import CATEGORIES

DATA = Path(__file__).parents[1] / "data" / "diff"
TODAY = dt.date(2026, 6, 1)
POLICY = Policy(
    acknowledge_removed=("retired-op",),
    waivers=(
        Waiver("waived-op", "cpu-*", dt.date(2027, 1, 1), "known MPS-style issue", owner="alice"),
        Waiver("expired-op", "cpu-*", dt.date(2026, 1, 1), "was fixed upstream?"),
        Waiver("unexpected-op", "cpu-ci", dt.date(2027, 1, 1), "flaky accumulator"),
    ),
)


def _diff(current: str, base: str | None = "base.json", policy: Policy = POLICY):
    cur = load_run(DATA / current)
    return diff_runs(load_run(DATA / base) if base else None, cur, cur.runner, policy, TODAY)


def _by_case(current: str, base: str | None = "base.json") -> dict[str, tuple[str, bool]]:
    return {c.case_id: (c.category, c.blocking) for c in _diff(current, base).changes}


# (category, current file, baseline file, case id, blocks under the default block_on)
TABLE = [
    ("unchanged", "current.json", "base.json", "unchanged-1", False),
    ("budget-drift", "current.json", "base.json", "drift-1", False),
    ("new-violation", "current.json", "base.json", "new-violation-1", True),
    ("new-violation", "current.json", "base.json", "new-violation-2", True),
    ("fixed", "current.json", "base.json", "fixed-1", False),
    ("still-failing", "current.json", "base.json", "still-failing-1", False),
    ("error", "current.json", "base.json", "error-1", True),
    ("error", "current.json", "base.json", "refused-1", True),
    ("new", "current.json", "base.json", "new-1", False),
    ("waived", "current.json", "base.json", "waived-1", False),
    ("expired-waiver", "current.json", "base.json", "expired-1", True),
    ("unexpected-pass", "current.json", "base.json", "unexpected-pass-1", False),
    ("removed", "current.json", "base.json", "removed-1", True),
    ("removed", "current.json", "base.json", "removed-ack-1", False),
    ("incomparable", "current-newer-torch.json", "base.json", "unchanged-1", False),
    # a failure is a violation whether or not the baseline is comparable (#44)
    ("new-violation", "current-newer-torch.json", "base.json", "new-violation-1", True),
    ("error", "current-newer-torch.json", "base.json", "error-1", True),
    ("waived", "current-newer-torch.json", "base.json", "waived-1", False),
    ("new-violation", "current.json", None, "new-violation-1", True),
    ("unverified", "current.json", None, "unchanged-1", False),
    ("error", "current-incomplete.json", "base.json", "unchanged-1", True),
    # attribution (issues 53, 57): main's failure never blocks, the PR's does; drift on the same seed only
    ("pre-existing", "current-attributed.json", "base-attributed.json", "rerun-pre-1", False),
    ("new-violation", "current-attributed.json", "base-attributed.json", "rerun-intro-1", True),
    ("pre-existing", "current-attributed.json", "base-attributed.json", "crash-pre-1", False),
    ("error", "current-attributed.json", "base-attributed.json", "crash-redrawn-1", True),
    ("pre-existing", "current-attributed.json", "base-attributed.json", "fail-after-crash-1", False),
    ("error", "current-attributed.json", "base-attributed.json", "error-introduced-1", True),
    ("budget-drift", "current-attributed.json", "base-attributed.json", "drift-replayed-1", False),
    ("unchanged", "current-attributed.json", "base-attributed.json", "drift-redrawn-1", False),
    ("new", "current-attributed.json", "base-attributed.json", "appeared-1", False),
    ("fixed", "current-attributed.json", "base-attributed.json", "crash-fixed-1", False),
]


@pytest.mark.parametrize(("category", "current", "base", "case_id", "blocking"), TABLE)
def test_each_category_from_files(
    category: str, current: str, base: str | None, case_id: str, blocking: bool
) -> None:
    assert _by_case(current, base)[case_id] == (category, blocking)


def test_table_covers_every_category() -> None:
    covered = {row[0] for row in TABLE} | {"missing-runner"}  # missing-runner has its own tests
    assert covered == set(CATEGORIES)


def test_attribution_evidence_names_base_and_its_status() -> None:
    """The rerun's evidence (base commit, base's status and summary) is in the row's message, and a
    pre-existing case without a rerun says the baseline's same seed already had it."""
    changes = {c.case_id: c for c in _diff("current-attributed.json", "base-attributed.json").changes}
    pre, intro = changes["rerun-pre-1"], changes["rerun-intro-1"]
    assert pre.message.startswith("pre-existing: on base 0123456789ab, the same seed fails too")
    assert "bf16 accumulator" in pre.message and pre.attribution == "pre-existing"
    assert intro.message == "introduced: on base 0123456789ab, the same seed passes"
    crash = changes["crash-pre-1"]
    assert crash.message.startswith("pre-existing: on the same seed the baseline errors too")
    assert crash.replayed and not changes["drift-redrawn-1"].replayed


def test_an_error_waiver_still_comes_before_pre_existing() -> None:
    """A waiver is what the team chose: an error waiver covers an error main already had."""
    policy = Policy(waivers=(Waiver("crash-pre", "cpu-*", dt.date(2027, 1, 1), "heap bug", kind="error"),))
    changes = {c.case_id: c for c in _diff("current-attributed.json", "base-attributed.json", policy).changes}
    assert changes["crash-pre-1"].category == "waived"


def test_every_case_once_and_removed_last() -> None:
    changes = _diff("current.json").changes
    ids = [c.case_id for c in changes]
    assert len(ids) == len(set(ids)) == 14
    assert [c.category for c in changes][-2:] == ["removed", "removed"]


def test_waiver_message_names_owner_and_expiry() -> None:
    change = next(c for c in _diff("current.json").changes if c.case_id == "waived-1")
    assert "2027-01-01" in change.message and "alice" in change.message


def test_incomparable_never_compares_numbers() -> None:
    """Only failures (the case's own verdict, no baseline number needed) get a comparison's category."""
    changes = _diff("current-newer-torch.json").changes
    cats = {c.category for c in changes if c.status != "fail"}
    assert not cats & {"unchanged", "budget-drift", "new-violation", "fixed", "still-failing", "new"}


def test_waiver_still_needed_by_a_failing_case_is_not_unexpected() -> None:
    run = load_run(DATA / "current.json")
    extra = replace(run.cases[-1], case_id="unexpected-pass-2", status="fail")
    run = run.with_cases((*run.cases, extra))
    changes = {
        c.case_id: c.category
        for c in diff_runs(load_run(DATA / "base.json"), run, "cpu-ci", POLICY, TODAY).changes
    }
    assert changes["unexpected-pass-1"] == "fixed"  # judged against its baseline, like any case
    assert changes["unexpected-pass-2"] == "waived"


# ---- runners -------------------------------------------------------------------------------------


def test_required_runner_without_results_blocks() -> None:
    base = load_run(DATA / "base.json")
    verdict = make_diff({}, {"cpu-ci": base}, Policy(required_runners=("cpu-*",)), TODAY)
    (change,) = verdict.changes
    assert (change.category, change.runner, change.blocking) == ("missing-runner", "cpu-ci", True)


def test_required_pattern_nobody_answered_blocks() -> None:
    cur = load_run(DATA / "current.json")
    verdict = make_diff({"cpu-ci": cur}, {}, Policy(required_runners=("nvidia-*",)), TODAY)
    missing = [c for c in verdict.changes if c.category == "missing-runner"]
    assert [(c.runner, c.blocking) for c in missing] == [("nvidia-*", True)]
    assert not verdict.passed


def test_expected_runner_missing_blocks_and_optional_one_does_not() -> None:
    base = load_run(DATA / "base.json")
    verdict = make_diff({}, {"cpu-ci": base}, Policy(), TODAY, expected_runners=["amd[1]"])
    cats = {(c.runner, c.category, c.blocking) for c in verdict.changes}
    assert cats == {("amd[1]", "missing-runner", True), ("cpu-ci", "missing-runner", False)}


def test_no_silent_fallback_to_another_runner() -> None:
    cur = load_run(DATA / "current-no-baseline.json")
    verdict = make_diff({cur.runner: cur}, {"cpu-ci": load_run(DATA / "base.json")}, POLICY, TODAY)
    fresh = next(r for r in verdict.runners if r.runner == "cpu-fresh")
    assert fresh.base_fingerprint_key == ""
    assert {c.category for c in fresh.changes} <= {
        "unverified",
        "error",
        "waived",
        "expired-waiver",
        "unexpected-pass",
        "new-violation",  # a failure, on its own verdict (#44)
    }
    assert all(c.base_status == "" for c in fresh.changes)  # nothing was compared with cpu-ci's baseline


def test_duplicate_case_ids_are_an_error() -> None:
    run = load_run(DATA / "current.json")
    with pytest.raises(ResultsError, match="appears twice"):
        diff_runs(None, run.with_cases((*run.cases, run.cases[0])), run.runner, POLICY, TODAY)


def test_verdict_json_round_trips_and_counts() -> None:
    cur, base = load_run(DATA / "current.json"), load_run(DATA / "base.json")
    verdict = make_diff({"cpu-ci": cur}, {"cpu-ci": base}, POLICY, TODAY)
    doc = json.loads(FORMATS["json"](verdict))
    assert doc["passed"] is False and sum(doc["counts"].values()) == 14
    assert doc["counts"]["removed"] == 2


# ---- properties ----------------------------------------------------------------------------------

_FP = Fingerprint(backend="cpu", device="x")
_STATUS = st.sampled_from(["pass", "fail", "error", "refused"])
_BUDGET = st.one_of(st.none(), st.floats(0, 10), st.just(float("nan")), st.just(float("inf")))


@st.composite
def runs(draw: st.DrawFn, runner: str = "cpu-a") -> RunResult:
    ids = draw(st.lists(st.sampled_from([f"k{i}" for i in range(12)]), unique=True, max_size=12))
    cases = tuple(
        CaseResult(
            case_id=i,
            contract_id=draw(st.sampled_from(["c1", "c2", "c3"])),
            klass="C-PRC-01",
            op="matmul",
            dtype="float32",
            shape=(4, 4),
            seed=0,
            status=draw(_STATUS),
            metrics=Metrics(budget_used=draw(_BUDGET)),
        )
        for i in ids
    )
    fp = draw(st.sampled_from([_FP, replace(_FP, torch="2.6")]))
    return RunResult(runner, fp, cases, complete=draw(st.booleans()))


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    waivers = tuple(
        Waiver(
            cid,
            "cpu-*",
            draw(st.sampled_from([dt.date(2026, 1, 1), dt.date(2027, 1, 1)])),
            "r",
            kind=draw(st.sampled_from(["violation", "error"])),
        )
        for cid in draw(st.lists(st.sampled_from(["c1", "c2", "c3"]), unique=True))
    )
    acks = tuple(draw(st.lists(st.sampled_from(["c1", "c2"]), unique=True)))
    blocks = tuple(draw(st.lists(st.sampled_from(CATEGORIES), unique=True)))
    return Policy(block_on=blocks, waivers=waivers, acknowledge_removed=acks, required_runners=("cpu-*",))


def _self_expected(case: CaseResult, run: RunResult, policy: Policy) -> str:
    """What diff(x, x) must say about one case: the definition the property test checks."""
    if case.status in ("error", "refused"):
        known = policy.waiver_for(case.contract_id, run.runner, "error")
        if known is None:
            return "pre-existing"  # the baseline (itself) had it on the same seed
        return "expired-waiver" if known.expired(TODAY) else "waived"
    waiver = policy.waiver_for(case.contract_id, run.runner)
    if waiver and case.status == "fail":
        return "expired-waiver" if waiver.expired(TODAY) else "waived"
    if waiver and not any(c.status == "fail" and c.contract_id == case.contract_id for c in run.cases):
        return "unexpected-pass"
    return "still-failing" if case.status == "fail" else "unchanged"


def test_an_error_waiver_covers_errors_only_and_says_so() -> None:
    def case(cid: str, status: str) -> CaseResult:
        return CaseResult(
            cid, "fused", "C-PRC-01", "matmul", "float32", (4, 4), 0, status, message="no XPU kernel"
        )

    run = RunResult("intel-max", _FP, (case("a", "error"), case("b", "refused"), case("c", "fail")))
    waiver = Waiver("fused", "intel-*", dt.date(2027, 1, 1), "no XPU build yet", owner="bob", kind="error")
    changes = diff_runs(run, run, "intel-max", Policy(waivers=(waiver,)), TODAY).changes
    assert [(c.category, c.blocking) for c in changes] == [
        ("waived", False),
        ("waived", False),
        ("still-failing", False),
    ]
    assert changes[0].message == "waiver until 2027-01-01, owner bob: no XPU build yet; error: no XPU kernel"
    expired = diff_runs(run, run, "intel-max", Policy(waivers=(waiver,)), dt.date(2027, 2, 1)).changes
    assert [c.category for c in expired[:2]] == ["expired-waiver", "expired-waiver"]
    other_runner = diff_runs(None, run, "amd-x", Policy(waivers=(waiver,)), TODAY).changes
    assert other_runner[0].category == "error" and other_runner[0].blocking
    main_had_it = diff_runs(run, run, "amd-x", Policy(waivers=(waiver,)), TODAY).changes
    assert main_had_it[0].category == "pre-existing" and not main_had_it[0].blocking


@given(runs())
@pytest.mark.slow
def test_self_diff_without_waivers_is_unchanged_still_failing_or_pre_existing(run: RunResult) -> None:
    expected = {
        "pass": "unchanged",
        "fail": "still-failing",
        "error": "pre-existing",
        "refused": "pre-existing",
    }
    changes = diff_runs(run, run, run.runner, Policy(), TODAY).changes
    assert [(c.case_id, c.category) for c in changes] == [(c.case_id, expected[c.status]) for c in run.cases]


@given(runs(), policies())
@pytest.mark.slow
def test_self_diff_with_waivers(run: RunResult, policy: Policy) -> None:
    changes = diff_runs(run, run, run.runner, policy, TODAY).changes
    assert [c.category for c in changes] == [_self_expected(c, run, policy) for c in run.cases]


@settings(max_examples=300)
@given(st.one_of(st.none(), runs()), st.one_of(st.none(), runs()), policies())
@pytest.mark.slow
def test_categories_exhaustive_and_exclusive(
    base: RunResult | None, current: RunResult | None, policy: Policy
) -> None:
    diff = diff_runs(base, current, "cpu-a", policy, TODAY)
    assert all(c.category in CATEGORIES for c in diff.changes)
    if current is None:
        assert [c.category for c in diff.changes] == ["missing-runner"]
        return
    ids = [c.case_id for c in diff.changes]
    expected_ids = {c.case_id for c in current.cases} | {c.case_id for c in (base.cases if base else ())}
    assert sorted(ids) == sorted(expected_ids)  # every case exactly once
    assert sum(diff.counts().values()) == len(ids)


@given(st.one_of(st.none(), runs()), runs(), policies())
@pytest.mark.slow
def test_blocking_follows_policy(base: RunResult | None, current: RunResult, policy: Policy) -> None:
    for c in diff_runs(base, current, "cpu-a", policy, TODAY).changes:
        acknowledged = c.category == "removed" and c.contract_id in policy.acknowledge_removed
        assert c.blocking == (policy.blocks(c.category) and not acknowledged)


@given(runs(), runs(), policies())
@pytest.mark.slow
def test_renderers_accept_any_verdict(base: RunResult, current: RunResult, policy: Policy) -> None:
    verdict = make_diff({"cpu-a": current}, {"cpu-a": base}, policy, TODAY)
    for render in FORMATS.values():
        assert render(verdict).endswith("\n")
    json.loads(FORMATS["json"](verdict))


def test_tracked_versions_that_differ_are_named_and_never_make_a_runner_incomparable() -> None:
    """``[project] track``: the fingerprint's track: flags are recorded but not keyed (issue 57.4)."""
    base = load_run(DATA / "base.json")
    fp = base.fingerprint
    was = replace(base, fingerprint=fp.with_tracked({"liger-kernel": "0.5.8", "triton": "3.9.0"}))
    now = replace(base, fingerprint=fp.with_tracked({"liger-kernel": "0.5.9", "triton": "3.9.0"}))
    assert was.fingerprint.key() == now.fingerprint.key() == fp.key()
    verdict = make_diff({"cpu-ci": now}, {"cpu-ci": was}, POLICY, TODAY)
    assert verdict.version_changes() == ["liger-kernel 0.5.8 → 0.5.9"]
    assert "incomparable" not in verdict.counts() or not verdict.counts()["incomparable"]
    assert "Versions: liger-kernel 0.5.8 → 0.5.9" in FORMATS["markdown"](verdict)
    assert "versions: liger-kernel 0.5.8 → 0.5.9" in FORMATS["console"](verdict)
