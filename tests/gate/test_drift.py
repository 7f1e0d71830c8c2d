"""policy.budget_drift: budgets compared as a ratio above a floor (default), or by an absolute rise."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from kcgate.contracts.load import load_project
from kcgate.contracts.policy import DriftRule, Policy
from kcgate.errors import ContractsError
from kcgate.gate.diff import diff_runs, make_diff
from kcgate.render.diff_formats import FORMATS
from kcgate.results.model import CaseResult, Fingerprint, Metrics, RunResult
from tests.conftest import ROOT

TODAY = dt.date(2026, 6, 1)
_FP = Fingerprint(backend="cpu", device="x", torch="2.13.0")


def _run(budgets: dict[str, float]) -> RunResult:
    cases = tuple(
        CaseResult(cid, "c", "C-PRC-01", "matmul", "float32", (4, 4), 0, "pass", Metrics(budget_used=b))
        for cid, b in budgets.items()
    )
    return RunResult("cpu-ci", _FP, cases)


BASE = {"x400": 0.001, "bf16-edge": 0.97, "noise": 1e-6, "abs": 0.2, "same": 0.3, "x5": 0.01}
NOW = {"x400": 0.4, "bf16-edge": 0.999, "noise": 1e-4, "abs": 0.8, "same": 0.31, "x5": 0.05}


def _categories(rule: DriftRule) -> dict[str, tuple[str, float | None]]:
    changes = diff_runs(_run(BASE), _run(NOW), "cpu-ci", Policy(budget_drift=rule), TODAY).changes
    return {c.case_id: (c.category, c.budget_factor) for c in changes}


def test_the_default_rule_sees_orders_of_magnitude() -> None:
    got = _categories(DriftRule())
    assert got["x400"] == ("budget-drift", pytest.approx(400))  # 'unchanged' under the old absolute 0.5
    assert got["x5"] == ("budget-drift", pytest.approx(5))
    assert got["abs"] == ("unchanged", pytest.approx(4))  # 4x is not more than 4x
    assert got["bf16-edge"][0] == "unchanged"  # ½-ulp output rounding: 0.97 -> 0.999 is noise
    assert got["noise"] == ("unchanged", pytest.approx(1.0))  # both under the 1e-3 floor
    assert got["same"][0] == "unchanged"


def test_the_absolute_rule_is_kept_as_an_option() -> None:
    got = _categories(DriftRule(ratio=None, absolute=0.5))
    assert got["x400"][0] == "unchanged" and got["abs"][0] == "budget-drift"
    both = _categories(DriftRule(ratio=4.0, absolute=0.5))
    assert both["x400"][0] == "budget-drift" and both["abs"][0] == "budget-drift"


def test_a_lower_floor_sees_changes_far_below_the_bound() -> None:
    got = _categories(DriftRule(floor=1e-7))
    assert got["noise"] == ("budget-drift", pytest.approx(100))


@pytest.mark.parametrize("fmt", ["console", "markdown", "json"])
def test_diff_output_shows_the_factor(fmt: str) -> None:
    verdict = make_diff({"cpu-ci": _run(NOW)}, {"cpu-ci": _run(BASE)}, Policy(), TODAY)
    text = FORMATS[fmt](verdict)
    if fmt == "json":
        assert '"budget_factor": 400' in text.replace("400.0", "400")
    else:
        assert "0.001 -> 0.4 (×400)" in text or "0.001 → 0.4 (×400)" in text


CONTRACT = """
[project]
paths = ["{root}"]

[policy]
budget_drift = {drift}

[[contract]]
id = "m"
class = "C-PRC-01"
kernel = "kcgate.kernels.builtin:matmul"
op = "matmul"
"""


def _policy(tmp_path: Path, drift: str) -> Policy:
    f = tmp_path / "c.toml"
    f.write_text(CONTRACT.format(root=ROOT, drift=drift))
    return load_project(f).policy


@pytest.mark.parametrize(
    ("drift", "rule"),
    [
        ("{ ratio = 10.0 }", DriftRule(ratio=10.0)),
        ("{ ratio = 4, floor = 1e-6 }", DriftRule(floor=1e-6)),
        ("{ floor = 0.01 }", DriftRule(floor=0.01)),
        ("{ absolute = 0.5 }", DriftRule(ratio=None, absolute=0.5)),
        ("{ ratio = 8, absolute = 0.5 }", DriftRule(ratio=8.0, absolute=0.5)),
        ("0.3", DriftRule(ratio=None, absolute=0.3)),  # kcgate 0.1's bare number: the absolute rule
    ],
)
def test_budget_drift_keys(tmp_path: Path, drift: str, rule: DriftRule) -> None:
    assert _policy(tmp_path, drift).budget_drift == rule


def test_no_budget_drift_key_is_the_ratio_rule(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text(CONTRACT.format(root=ROOT, drift="{}").replace("budget_drift = {}\n", ""))
    assert load_project(f).policy.budget_drift == DriftRule(ratio=4.0, floor=1e-3, absolute=None)


@pytest.mark.parametrize(
    ("drift", "where", "says"),
    [
        ("{ ratio = 0.5 }", "policy.budget_drift.ratio", "<= 1"),
        ("{ ratio = -2 }", "policy.budget_drift.ratio", "positive"),
        ("{ factor = 4 }", "policy.budget_drift.factor", "unknown key"),
        ("{}", "policy.budget_drift", "names no rule"),
        ('"4x"', "policy.budget_drift", "table or a number"),
        ("-1", "policy.budget_drift", "positive"),
    ],
)
def test_bad_budget_drift_is_reported_with_line_and_fix(
    tmp_path: Path, drift: str, where: str, says: str
) -> None:
    with pytest.raises(ContractsError) as info:
        _policy(tmp_path, drift)
    (p,) = info.value.problems
    assert p.line == 6 and p.where == where and says in p.message, p
    assert p.fix
