"""kcgate.execution.attribution: which failures are rerun on base, and what base's answer makes them."""

from __future__ import annotations

from kcgate.execution.attribution import stamp, to_rerun
from kcgate.results.model import CaseResult, Fingerprint, RunResult, Signature


def _case(cid: str, status: str, seed: int) -> CaseResult:
    return CaseResult(cid, "c", "C-PRC-01", "matmul", "float32", (4,), seed, status)


def _run(*cases: CaseResult) -> RunResult:
    return RunResult("cpu", Fingerprint("cpu"), cases)


def test_only_new_failures_are_rerun() -> None:
    base = _run(_case("a", "pass", 1), _case("b", "error", 2), _case("c", "fail", 3), _case("d", "error", 4))
    now = _run(
        _case("a", "fail", 1),  # passed on these inputs: rerun
        _case("b", "error", 2),  # errored on these inputs: pre-existing without a rerun
        _case("c", "fail", 9),  # failed in the baseline too (another seed): still failing, not rerun
        _case("d", "error", 5),  # errored on another seed: rerun
        _case("e", "fail", 6),  # not in the baseline: rerun
        _case("f", "pass", 7),
    )
    assert [c.case_id for c in to_rerun(now, base)] == ["a", "d", "e"]
    assert [c.case_id for c in to_rerun(now, None)] == ["a", "b", "c", "d", "e"]


def test_base_failing_alike_is_pre_existing_and_anything_else_introduced() -> None:
    failing = _case("a", "fail", 1)
    crashed = CaseResult(
        "a", "c", "C-PRC-01", "matmul", "float32", (4,), 1, "error", message="worker died\n  signal 11"
    )
    assert stamp(failing, crashed, "abc").attribution == "pre-existing"  # a crash on base, a failure now
    assert stamp(failing, crashed, "abc").base_summary == "worker died signal 11"
    bf16 = Signature("low-precision-accumulator", "behaves like a bf16 accumulator")
    base_fail = CaseResult("a", "c", "C-PRC-01", "matmul", "float32", (4,), 1, "fail", signature=bf16)
    assert stamp(failing, base_fail, "abc").base_summary == "behaves like a bf16 accumulator"
    assert stamp(failing, _case("a", "pass", 1), "abc").attribution == "introduced"
    assert (
        stamp(failing, _case("a", "refused", 1), "abc").attribution == "introduced"
    )  # a refusal is no failure
    assert stamp(_case("a", "refused", 1), _case("a", "refused", 1), "abc").attribution == "pre-existing"
    absent = stamp(failing, None, "abc")
    assert (absent.attribution, absent.base_rerun, absent.base_commit) == ("introduced", "absent", "abc")
