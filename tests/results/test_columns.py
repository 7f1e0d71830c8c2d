"""The results column table: the file header, the JSON Schema, the bulk reader's checks and the JUnit
properties all follow ``records.CASE_COLUMNS`` / ``METRIC_COLUMNS``; the package has no import cycle and
one loader."""

from __future__ import annotations

import ast
import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from kcgate.adopt.plugin import properties
from kcgate.errors import ResultsError
from kcgate.gate.model import CaseChange
from kcgate.render.junit import render_junit
from kcgate.render.junit_report import case_properties
from kcgate.render.schema import results_schema
from kcgate.results.columns import Column, JUnit, bulk_types
from kcgate.results.model import (
    CaseResult,
    Fingerprint,
    Metrics,
    RunResult,
    Signature,
    dumps_run,
    parse_run,
)
from kcgate.results.records import CASE_COLUMNS, METRIC_COLUMNS, METRIC_FIELDS, METRICS_AT
from tests.conftest import ROOT

GRAD = (("grad_budget.weight", 0.9), ("out_budget", 0.1))


def _run() -> RunResult:
    sig = Signature("overflow", "inf in the output", (("n", 3.0),))
    cases = (
        CaseResult(
            "a", "k", "C-PRC-01", "matmul", "float32", (2, 3), 7, "fail", Metrics(0.5, extra=GRAD), sig
        ),
        CaseResult("b", "k", "C-PRC-01", "matmul", "float32", (2, 3), 8, "pass", Metrics(0.25), line=4),
    )
    return RunResult("r", Fingerprint("cpu"), cases)


def _doc() -> dict[str, Any]:
    return json.loads(dumps_run(_run()))  # type: ignore[no-any-return]


def test_file_header_and_schema_follow_the_table() -> None:
    doc = _doc()
    assert doc["case_fields"] == [c.name for c in CASE_COLUMNS]
    assert doc["metric_fields"] == [c.name for c in METRIC_COLUMNS]
    schema = results_schema()
    jsonschema.validate(doc, schema)
    row = schema["properties"]["cases"]["items"]
    assert len(row["prefixItems"]) == row["minItems"] == len(CASE_COLUMNS)
    metrics = row["prefixItems"][METRICS_AT]
    assert len(metrics["prefixItems"]) == len(METRIC_COLUMNS)
    described = [*row["prefixItems"], *metrics["prefixItems"]]
    assert [d["description"] for d in described] == [c.description for c in (*CASE_COLUMNS, *METRIC_COLUMNS)]


@pytest.mark.parametrize("column", [c.name for c in CASE_COLUMNS])
def test_every_case_column_refuses_a_foreign_value_by_name(column: str) -> None:
    # true is a type no column allows: the schema refuses it and the loader names the column
    doc = _doc()
    at = [c.name for c in CASE_COLUMNS].index(column)
    doc["cases"][1][at] = True
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, results_schema())
    with pytest.raises(ResultsError, match=column):
        parse_run(json.dumps(doc))


@pytest.mark.parametrize("column", [c.name for c in METRIC_COLUMNS])
def test_every_metric_column_refuses_a_foreign_value_by_name(column: str) -> None:
    doc = _doc()
    doc["cases"][0][METRICS_AT][[c.name for c in METRIC_COLUMNS].index(column)] = True
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, results_schema())
    with pytest.raises(ResultsError, match=column):
        parse_run(json.dumps(doc))


def test_the_documented_columns_are_the_table() -> None:
    # docs/diff.md shows a results file's header: its case_fields and metric_fields are the table's
    text = (ROOT / "docs" / "diff.md").read_text(encoding="utf-8")
    for key, columns in (("case_fields", CASE_COLUMNS), ("metric_fields", METRIC_COLUMNS)):
        start = text.index(f'"{key}": [') + len(f'"{key}": ')
        listed = json.loads(text[start : text.index("]", start) + 1])
        assert listed == [c.name for c in columns], key
    # and which columns are JUnit properties: marked for every JUnit, and the case's identity for pytest's
    for intro, end, mark in (
        ("marked for JUnit: ", ";", JUnit.PROPERTY),
        ("identity: ", ")", JUnit.IDENTITY),
    ):
        listed = text[text.index(intro) :].split(end, 1)[0].split(": ", 1)[1]
        junit = [c.name for c in (*CASE_COLUMNS, *METRIC_COLUMNS) if c.junit is mark]
        assert sorted(listed.replace("\n", " ").split(", ")) == sorted(junit), mark


def test_null_is_read_as_each_columns_default_unless_required() -> None:
    for col in (*CASE_COLUMNS, *METRIC_COLUMNS):
        assert (type(None) in bulk_types(col)) == (not col.required and col.kind.name != "choice"), col.name
    doc = _doc()
    doc["cases"][1] = [c.name if c.required else None for c in CASE_COLUMNS]
    doc["cases"][1][[c.name for c in CASE_COLUMNS].index("status")] = "pass"
    case = parse_run(json.dumps(doc)).cases[1]
    assert case == CaseResult("case_id", "contract_id", "", "", "", (), 0, "pass")


def test_junit_properties_are_the_junit_columns() -> None:
    root = ET.fromstring(render_junit(_run()))
    props = [{p.get("name"): p.get("value") for p in tc.iter("property")} for tc in root.iter("testcase")]
    junit = [c.name for c in _row_order() if c.junit is JUnit.PROPERTY]
    assert list(props[0]) == [n for n in junit if n not in _UNMEASURED] + ["grad"]
    assert props[0]["shape"] == "2x3" and props[0]["signature"] == "overflow" and props[0]["grad"] == "weight"
    # no signature, no gradient, numbers not measured: left out
    assert list(props[1]) == [n for n in junit if n not in {"signature", *_UNMEASURED}]
    assert props[1]["budget_used"] == "0.25" and props[1]["seed"] == "8"


_UNMEASURED = ("max_abs_err", "max_rel_err", "max_ulp", "allowed_at_worst")  # None in _run()'s metrics


def _row_order() -> list[Column]:
    """Every column in row order, a metric in the metrics column's place."""
    return [m for c in CASE_COLUMNS for m in (c.kind.columns or (c,))]


# A value every column's kind gives JUnit text for, distinct per column (the i-th column of the row)
_SAMPLES: dict[str, Callable[[int], Any]] = {
    "text": lambda i: f"text{i}",
    "ints": lambda i: [2, i],
    "count": lambda i: i,
    "number": lambda i: i / 8,
    "seconds": lambda i: i / 4,
    "line": lambda i: i,
    "extra": lambda i: {"out_budget": i / 2},
    "choice": lambda i: "fail",
    "signature": lambda i: {"cause": f"cause{i}", "summary": f"summary{i}"},
}


def _every_column_measured() -> CaseResult:
    """A case with a value in every column, built from the table (a new kind needs a sample above)."""
    metrics = [_SAMPLES[m.kind.name](i) for i, m in enumerate(METRIC_COLUMNS, 100)]
    return CaseResult.from_row(
        [metrics if c.kind.columns else _SAMPLES[c.kind.name](i) for i, c in enumerate(CASE_COLUMNS, 1)]
    )


def test_every_junit_writer_lists_the_marked_columns_with_one_text() -> None:
    # run --junit, report --junit and the pytest plugin read records.junit_properties: a column marked for
    # JUnit is in all three, with the same text, and none lists columns of its own (a hand-made list misses
    # a new column, or keeps one the table no longer marks)
    case = _every_column_measured()
    marked = [c for c in _row_order() if c.junit is JUnit.PROPERTY]
    texts = {
        c.name: c.kind.junit(getattr(case.metrics if c in METRIC_COLUMNS else case, c.field)) for c in marked
    }
    assert None not in texts.values() and len(set(texts.values())) == len(texts)  # every one set, distinct

    (tc,) = ET.fromstring(render_junit(RunResult("r", Fingerprint("cpu"), (case,)))).iter("testcase")
    assert {p.get("name"): p.get("value") for p in tc.iter("property")} == texts  # in table order too
    assert [p.get("name") for p in tc.iter("property")] == list(texts)

    change = CaseChange("unchanged", "r", case.case_id, case.contract_id, signature="the summary")
    given = case_properties(change, None)  # the diff's side: its budget_used and signature win
    report = {(f"metric.{n}" if n in METRIC_FIELDS else n): t for n, t in texts.items() if n not in given}
    assert case_properties(change, case) == {**given, **report}
    assert list(case_properties(change, case)) == [*given, *report]

    identity = [c for c in _row_order() if c.junit in (JUnit.PROPERTY, JUnit.IDENTITY)]
    pytest_props = dict(properties(case))
    assert [n.removeprefix("kcgate.") for n in pytest_props] == [c.name for c in identity]
    assert {n: pytest_props[f"kcgate.{n}"] for n in texts} == texts
    assert pytest_props["kcgate.status"] == "fail" and pytest_props["kcgate.class"] == case.klass


# ---- package structure -----------------------------------------------------------------------------


def _results_imports() -> dict[str, set[str]]:
    """Each kcgate.results module and the kcgate.results modules it imports (anywhere in it)."""
    graph = {}
    for path in sorted((ROOT / "kcgate" / "results").glob("*.py")):
        mod = f"kcgate.results.{path.stem}"
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "kcgate.results":
                found |= {f"kcgate.results.{a.name}" for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kcgate.results."):
                found.add(node.module or "")
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("kcgate.results.")}
        graph[mod] = found
    return graph


def test_results_package_has_no_import_cycle() -> None:
    graph = _results_imports()
    done: list[str] = []
    while len(done) < len(graph):  # peel off modules whose results imports are all done
        ready = [m for m, deps in graph.items() if m not in done and deps <= set(done)]
        assert ready, f"import cycle among {sorted(set(graph) - set(done))}"
        done += ready
    assert graph["kcgate.results.columns"] == set()  # the bottom: kinds and limits


@pytest.mark.slow
def test_one_loader_reads_results_documents() -> None:
    # RunResult.from_json is called by model.parse_run only: load_run, load_member (directory trees: report's
    # artifacts, baselines) and git blobs all go through it; no other module skips "foreign" files itself
    calls, skips = [], []
    for path in sorted((ROOT / "kcgate").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "from_json":
                if isinstance(node.value, ast.Name) and node.value.id in ("RunResult", "cls"):
                    calls.append(path.name)
            if isinstance(node, ast.FunctionDef) and "foreign" in node.name:
                skips.append(path.name)
    assert sorted(set(calls)) == ["model.py"] and skips == ["model.py"]


def test_a_status_member_writes_and_reads_as_its_string() -> None:
    # checks and executors build records with Status members; files and the worker's JSON hold the strings
    from kcgate.results.model import Status

    member = CaseResult("a", "k", "C-PRC-01", "matmul", "float32", (2,), 1, Status.FAIL)
    plain = CaseResult("a", "k", "C-PRC-01", "matmul", "float32", (2,), 1, "fail")
    assert json.dumps(member.to_row()) == json.dumps(plain.to_row()) and member == plain
    assert json.dumps(member.to_json()) == json.dumps(plain.to_json())
    assert CaseResult.from_json(member.to_json()) == member and f"{member.status}" == "fail"
