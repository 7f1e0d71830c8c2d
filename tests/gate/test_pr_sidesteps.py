"""Every way a PR's own change can move a failing case out of comparison must leave it blocking (#44).

A case that fails its own contract is a violation whether or not the baseline can be compared with it:
the PR's env line, a new fingerprint, a runner with no baseline, renamed or reshaped cases."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from kcgate.contracts.policy import Policy, Waiver
from kcgate.gate.decide import decide
from kcgate.gate.diff import diff_runs
from kcgate.results.model import CaseResult, Fingerprint, Metrics, RunResult

TODAY = dt.date(2026, 6, 1)
FP = Fingerprint(backend="cpu", device="x", torch="2.13")


def _case(cid: str, status: str, contract: str = "softmax", budget: float = 0.5) -> CaseResult:
    return CaseResult(
        cid, contract, "C-PRC-01", "softmax", "bfloat16", (8, 8), 0, status, Metrics(budget_used=budget)
    )


def _run(*cases: CaseResult, fp: Fingerprint = FP, runner: str = "cpu") -> RunResult:
    return RunResult(runner, fp, cases)


def _verdict(base: RunResult | None, now: RunResult, policy: Policy = Policy()) -> tuple[list[str], int]:
    diff, gate = decide({now.runner: now}, {now.runner: base} if base else {}, policy, TODAY)
    return [c.category for c in diff.changes], gate.exit_code


BASE = _run(_case("softmax/a", "pass"), _case("softmax/b", "pass"))
BROKEN = (_case("softmax/a", "fail", budget=12431.0), _case("softmax/b", "pass"))


def test_a_broken_kernel_with_an_env_line_still_blocks() -> None:
    """The attack: the PR breaks the kernel and adds `env = { ANY = "1" }`; before, exit 0."""
    now = _run(*BROKEN, fp=replace(FP, flags=(("contract_env:softmax", "abc123"),)))
    cats, code = _verdict(BASE, now)
    assert cats == ["new-violation", "incomparable"] and code == 1


def test_the_violations_message_says_why_it_is_not_compared() -> None:
    now = _run(*BROKEN, fp=replace(FP, flags=(("contract_env:softmax", "abc123"),)))
    change = diff_runs(BASE, now, "cpu", Policy(), TODAY).changes[0]
    assert change.blocking and "fails its own contract" in change.message
    assert "env changed since the baseline" in change.message


def test_a_new_fingerprint_does_not_hide_a_failure() -> None:
    cats, code = _verdict(BASE, _run(*BROKEN, fp=replace(FP, torch="2.14")))
    assert cats == ["new-violation", "incomparable"] and code == 1


def test_a_runner_without_a_baseline_does_not_hide_a_failure() -> None:
    """The PR's run workflow names the runner: a fresh name has no baseline."""
    cats, code = _verdict(None, _run(*BROKEN, runner="cpu-renamed"))
    assert cats == ["new-violation", "unverified"] and code == 1


def test_a_failure_already_in_an_incomparable_baseline_is_still_failing() -> None:
    """No false alarm: a known failure stays a known failure when the fingerprint moves."""
    base = _run(_case("softmax/a", "fail"), _case("softmax/b", "pass"))
    cats, code = _verdict(base, _run(*BROKEN, fp=replace(FP, torch="2.14")))
    assert cats == ["still-failing", "incomparable"] and code == 0


def test_renamed_reshaped_or_reclassed_cases_are_new_violations_and_the_old_ones_removed() -> None:
    now = _run(_case("softmax/a-renamed", "fail"), _case("softmax/b", "pass"))
    cats, code = _verdict(BASE, now)
    assert cats == ["new-violation", "unchanged", "removed"] and code == 1


def test_a_deleted_contract_blocks_as_removed() -> None:
    cats, code = _verdict(BASE, _run(_case("other/a", "pass", contract="other")))
    assert cats == ["new", "removed", "removed"] and code == 1


def test_a_waiver_is_the_only_way_out_and_it_comes_from_the_policy() -> None:
    waiver = Waiver("softmax", "cpu*", dt.date(2027, 1, 1), "known")
    now = _run(*BROKEN, fp=replace(FP, flags=(("contract_env:softmax", "abc123"),)))
    cats, code = _verdict(BASE, now, Policy(waivers=(waiver,)))
    assert cats[0] == "waived" and code == 0


_STATUS = st.sampled_from(["pass", "fail", "error", "refused"])


@given(
    st.lists(_STATUS, min_size=1, max_size=6),
    st.lists(_STATUS, max_size=6),
    st.sampled_from(["same", "torch", "env", "none"]),
)
def test_no_failing_case_is_ever_non_blocking_unless_it_failed_before(
    now_status: list[str], base_status: list[str], how: str
) -> None:
    """Under the default policy a failing case blocks unless the same case failed in the baseline, or failed
    or errored there on the same seed (pre-existing: main's own, issue 57)."""
    now = _run(*(_case(f"softmax/{i}", s) for i, s in enumerate(now_status)))
    if how == "torch":
        now = replace(now, fingerprint=replace(FP, torch="9"))
    if how == "env":
        now = replace(now, fingerprint=replace(FP, flags=(("contract_env:softmax", "d"),)))
    base = None if how == "none" else _run(*(_case(f"softmax/{i}", s) for i, s in enumerate(base_status)))
    for c in diff_runs(base, now, "cpu", Policy(), TODAY).changes:
        if c.status == "fail":
            known = c.category == "still-failing" and c.base_status == "fail"
            main_had_it = c.category == "pre-existing" and c.replayed and c.base_status in ("fail", "error")
            assert c.blocking or known or main_had_it, c


def test_the_report_workflow_reads_its_policy_from_the_default_branch() -> None:
    """Waivers, block_on and acknowledge_removed come from the report job's checkout: the default branch
    (workflow_run), never the PR's head, so a PR cannot waive its own violation."""
    import yaml

    from tests.conftest import ROOT

    doc = yaml.safe_load((ROOT / "docs" / "templates" / "kcgate-report.yml").read_text())
    assert "workflow_run" in doc[True]  # YAML reads the key `on` as True
    steps = doc["jobs"]["report"]["steps"]
    checkouts = [s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@")]
    # the workspace (contracts.toml, waivers, policy) is the default branch; the only other checkout is the
    # history data branch, in its own folder, read for the comment's charts
    [checkout] = [c for c in checkouts if "path" not in c.get("with", {})]
    assert "ref" not in checkout.get("with", {}) and "repository" not in checkout.get("with", {})
    others = [c["with"] for c in checkouts if c is not checkout]
    assert all(w["ref"] == "kcgate-history" and w["path"] == "kcgate-history" for w in others), others
    [report] = [s for s in steps if s.get("with", {}).get("mode") == "report"]
    assert report["with"]["contracts"] == "contracts.toml"
