"""One severity per case, whichever gate failed it: over 1 exactly when the case fails, from the record
and from the column table alike, and never a pass for a failure, an error or an edited number."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kcgate.results.model import CaseResult, Metrics, RunResult, Signature, load_run, write_run
from kcgate.results.severity import GATES, case_severity, severities, severity, severity_words
from tests.testing.history_samples import RUNNERS

MISTAKE = Signature(
    "wrong-semantics", "matches the op with x cast", (("differ_contract", 99.0), ("differ_mistake", 0.0))
)


def _case(
    status: str, budget: float | None, extra: dict[str, float] | None = None, sig: Signature | None = None
) -> CaseResult:
    return CaseResult(
        case_id=f"c/{status}/{budget}/{sorted((extra or {}).items())}",
        contract_id="c",
        klass="C-PRC-01",
        op="rms_norm",
        dtype="bfloat16",
        shape=(8, 64),
        seed=0,
        status=status,
        metrics=Metrics(budget_used=budget, extra=tuple(sorted((extra or {}).items()))),
        signature=sig,
    )


CASES = [
    (_case("fail", 3.0), 3.0),  # the bound
    (_case("fail", 0.5, {"excess_ratio": 7.2}), 7.2),  # the sensitivity gate, within the bound
    (_case("fail", 0.9, {"determinism_budget": 4.0}), 4.0),  # a probe
    (_case("fail", 0.3, {}, MISTAKE), 100.0),  # a known mistake reproduced bit for bit
    (_case("fail", None), math.inf),  # an infinite budget is written as null
    (_case("fail", 0.4), math.inf),  # failed with no number over 1: still no pass
    (_case("pass", 0.5, {"excess_ratio": 1.3}), 1.0),  # below the gate's line: at the edge, not past it
    (_case("pass", 0.25, {"excess_ratio": 0.6}), 0.6),
    (_case("pass", None), None),
    (_case("error", 0.1), math.inf),
    (_case("refused", None), None),
]


@pytest.mark.parametrize(("case", "expected"), CASES)
def test_each_gate_gives_the_severity(case: CaseResult, expected: float | None) -> None:
    assert case_severity(case) == (pytest.approx(expected) if expected is not None else None)


def test_over_1_exactly_when_the_case_fails() -> None:
    for case, _ in CASES:
        value = case_severity(case)
        assert (value is not None and value > 1.0) == (case.status in ("fail", "error")), case.case_id


def test_the_column_path_equals_the_record_path(tmp_path: Path) -> None:
    """``severities`` reads a results file's columns (diff, compare and history never build records)."""
    path = tmp_path / "r.json"
    write_run(path, RunResult("cpu-x86", RUNNERS["cpu-x86"], tuple(c for c, _ in CASES)))
    table = load_run(path).table
    assert table.lazy
    assert severities(table) == tuple(case_severity(c) for c, _ in CASES)


def test_every_gate_has_words() -> None:
    assert len({g.name for g in GATES}) == len(GATES) and all(g.words for g in GATES)


def test_words_say_what_a_severity_is() -> None:
    assert severity_words(math.inf, "error") == "error"
    assert severity_words(math.inf, "fail") == "∞"
    assert severity_words(28.71, "fail") == "28.71×" and severity_words(22586.0, "fail") == "22,586×"
    assert severity_words(0.5, "pass") == "0.50"
    assert severity_words(None, "refused") == "refused"
    assert severity("fail", 0.5) == math.inf
