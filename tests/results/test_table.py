"""The columnar case table: bulk-checked columns agree with the per-row records, and reports stay lazy."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcgate.contracts.policy import DriftRule, Policy
from kcgate.errors import ResultsError
from kcgate.gate.compare import compare_runs
from kcgate.gate.diff import make_diff
from kcgate.render import compare_formats, diff_formats
from kcgate.results.model import (
    MAX_TEXT,
    METRIC_FIELDS,
    CaseResult,
    Fingerprint,
    Metrics,
    RunResult,
    dumps_run,
    parse_run,
)
from kcgate.results.table import CaseTable

ATTRS = ("case_id", "contract_id", "klass", "op", "dtype", "shape", "seed", "status", "signature")
ATTRS += ("message", "duration_s", "kernel_s", "oracle_s", "line", "source")

texts = st.one_of(st.none(), st.text(max_size=5), st.just("x" * (MAX_TEXT + 3)))
numbers = st.one_of(
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.just(10**400),  # larger than any float
    st.just(2**1024 - 1),  # below 2**1024, but float() rounds it up and overflows
    st.just("1e999"),  # JSON text that parses to inf (spliced in below)
)
int_lists = st.one_of(st.none(), st.lists(st.integers(-5, 5), max_size=10))
extras = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(["norm_err", "reduction_len", "k" * 201]), numbers, max_size=3),
)
metric_rows = st.tuples(
    numbers, numbers, numbers, numbers, st.none() | st.integers(0, 9), st.none() | st.integers(0, 9)
).flatmap(
    lambda head: st.tuples(int_lists, numbers, extras, numbers, numbers).map(lambda tail: [*head, *tail])
)
signatures = st.one_of(
    st.none(), st.just({}), st.just({"cause": "overflow", "summary": "s", "evidence": {"n": 1}})
)


@st.composite
def rows(draw: Any) -> list[list[Any]]:
    n = draw(st.integers(0, 6))
    out = []
    for i in range(n):
        out.append(
            [
                f"case-{i}" + draw(st.sampled_from(["", "x" * MAX_TEXT])),
                draw(st.sampled_from(["k1", "k2"])),
                draw(texts),
                draw(texts),
                draw(texts),
                draw(int_lists),
                draw(st.none() | st.integers(0, 2**40)),
                draw(st.sampled_from(["pass", "fail", "error", "refused"])),
                draw(metric_rows),
                draw(signatures),
                draw(texts),
                draw(numbers),
                draw(numbers),
                draw(numbers),
                draw(st.none() | st.integers(1, 99)),
                draw(texts),
                draw(numbers),
                draw(int_lists),  # shrunk_shape
                draw(int_lists),  # shrunk_nonzero
                draw(texts),  # attribution
                draw(texts),  # base_commit
                draw(texts),  # base_rerun
                draw(texts),  # base_summary
            ]
        )
    return out


def _parsed(rows: list[list[Any]]) -> list[list[Any]]:
    """Through JSON text, as a results file would give them ("1e999" becomes the float inf)."""
    return json.loads(json.dumps(rows).replace('"1e999"', "1e999"))


@settings(max_examples=150, deadline=None)
@given(rows())
@pytest.mark.slow
def test_columns_and_records_equal_the_per_row_path(raw: list[list[Any]]) -> None:
    rows_ = _parsed(raw)
    expected = tuple(CaseResult.from_row(r) for r in _parsed(raw))
    table = CaseTable.from_rows(rows_)
    assert table.lazy  # every generated row is valid: the bulk check must accept it
    for attr in ATTRS:
        assert _same(table.column(attr), tuple(getattr(c, attr) for c in expected)), attr
    for name in METRIC_FIELDS:
        assert _same(table.metric(name), tuple(getattr(c.metrics, name) for c in expected)), name
    for key in ("norm_err", "reduction_len", "k" * 200, "k" * 201, "absent"):
        want = tuple(next((v for k, v in c.metrics.extra if k == key), None) for c in expected)
        assert _same(table.extra(key), want), key
    assert _same(table.records(), expected)
    assert not table.lazy


def _same(a: Any, b: Any) -> bool:
    """Equality with NaN equal to NaN (JSON's 10**400 and inf read as NaN in extra)."""
    return repr(a) == repr(b)


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        (7, "maybe", "status"),
        (6, True, "seed"),
        (0, None, "case_id"),
        (5, [1, "2"], "shape"),
        (8, [1.0] * 8, "metric_fields"),
        (9, {"summary": "no cause"}, "cause"),
    ],
)
def test_a_bad_value_gets_the_per_row_message(column: int, value: Any, message: str) -> None:
    run = RunResult("r", Fingerprint("cpu"), (_case("a"), _case("b")))
    doc = json.loads(dumps_run(run))
    doc["cases"][1][column] = value
    with pytest.raises(ResultsError, match=message):
        parse_run(json.dumps(doc))


def test_a_case_without_metrics_still_loads() -> None:
    run = RunResult("r", Fingerprint("cpu"), (_case("a"), _case("b")))
    doc = json.loads(dumps_run(run))
    doc["cases"][0][8] = None
    loaded = parse_run(json.dumps(doc))
    assert loaded.cases[0].metrics == Metrics()
    assert loaded.cases[1] == run.cases[1]


def test_diff_and_compare_read_columns_only() -> None:
    """The speed of a 10^5-case report rests on this: no record is built for diff, compare or render."""
    base = parse_run(dumps_run(_run(drift=0.0)))
    current = parse_run(dumps_run(_run(drift=0.6)))
    others = {f"r{i}": parse_run(dumps_run(_run(drift=0.0, runner=f"r{i}"))) for i in range(3)}
    absolute = Policy(budget_drift=DriftRule(ratio=None, absolute=0.5))  # 0.2 -> 0.8: a rise of 0.6, 4x
    verdict = make_diff({"r": current}, {"r": base}, absolute, dt.date(2026, 1, 1))
    comparison = compare_runs({"r": current, **others})
    diff_formats.render_markdown(verdict), compare_formats.render_markdown(comparison)
    assert verdict.counts()["budget-drift"] == 2 and verdict.counts()["removed"] == 1
    assert len(comparison.cells) == 8 and comparison.curves
    assert all(run.table.lazy for run in (base, current, *others.values()))


def test_a_table_equals_the_tuple_of_its_records() -> None:
    run = _run(drift=0.0)
    loaded = parse_run(dumps_run(run))
    assert loaded.cases == run.cases == tuple(run.cases)
    assert hash(loaded.cases) == hash(tuple(run.cases))
    assert loaded == run
    assert loaded.cases[1:] == tuple(run.cases)[1:]


def _case(case_id: str, budget: float = 0.5, contract: str = "k1", k: float = 64.0) -> CaseResult:
    metrics = Metrics(budget_used=budget, max_abs_err=1e-6 * k, extra=(("reduction_len", k),))
    return CaseResult(case_id, contract, "C-PRC-01", "matmul", "float32", (2, 2), 0, "pass", metrics)


def _run(drift: float, runner: str = "r") -> RunResult:
    cases = [_case(f"c{i}", 0.2 + drift * (i % 2), f"k{i % 2}", 2.0 ** (6 + i)) for i in range(6)]
    if drift:
        cases.pop()
    return RunResult(runner, Fingerprint("cpu"), tuple(cases))


def test_nan_is_never_a_budget() -> None:
    run = RunResult("r", Fingerprint("cpu"), (_case("a", budget=math.nan),))
    table = parse_run(dumps_run(run)).table
    assert table.metric("budget_used") == (None,)
