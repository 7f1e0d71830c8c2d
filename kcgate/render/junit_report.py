"""JUnit XML for the report: one test suite per runner, one test case per case change.

Built with the junit-xml package; each test case also carries <properties> (category, budget used,
metrics) and each suite the runner's fingerprint, which junit-xml has no API for, so they are added
to its element tree. Pure: a Diff (and optionally the runs, for metrics) in, XML text out.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from operator import attrgetter

from junit_xml import TestCase, TestSuite

from kcgate.gate.model import CaseChange, Diff, RunnerDiff, declared_in
from kcgate.render.labels import label, rank
from kcgate.results.model import CaseResult, RunResult, Status
from kcgate.results.records import METRIC_COLUMNS, junit_properties
from kcgate.vocab.categories import CATEGORY_TABLE, JUNIT_ERROR

_SKIPPED = frozenset(c.name for c in CATEGORY_TABLE if c.junit_skipped)
_FAILING = frozenset(Status) - {Status.PASS}
_ILLEGAL_XML = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufdd0-\ufddf\ufffe\uffff]"
)
_TEXT_LIMIT = 2000


def render_junit(
    verdict: Diff, runs: Mapping[str, RunResult] | None = None, contracts_file: str = "contracts.toml"
) -> str:
    """The whole report as a JUnit XML document (UTF-8 text with an XML declaration)."""
    runs = runs or {}
    root = ET.Element("testsuites")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for rd in sorted(verdict.runners, key=lambda r: r.runner):
        suite = _suite_element(rd, runs.get(rd.runner), contracts_file)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, 0))
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("name", "kcgate")
    ET.indent(root)
    text = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + clean_xml(text) + "\n"


def clean_xml(text: str) -> str:
    """Drop characters XML 1.0 cannot carry (a hostile id must not make the file unreadable)."""
    return _ILLEGAL_XML.sub("", text)


def _suite_element(rd: RunnerDiff, run: RunResult | None, contracts_file: str) -> ET.Element:
    changes = sorted(rd.changes, key=rank)
    cases = {c.case_id: c for c in run.cases} if run else {}
    tcs = [make_test_case(c, cases.get(c.case_id), contracts_file) for c in changes]
    suite = TestSuite(f"kcgate.{rd.runner}", tcs, properties=suite_properties(rd, run))
    elem = suite.build_xml_doc()
    for tc_elem, change in zip(elem.findall("testcase"), changes):
        _add_properties(tc_elem, case_properties(change, cases.get(change.case_id)))
    return elem


def make_test_case(change: CaseChange, result: CaseResult | None, contracts_file: str) -> TestCase:
    """One test case: failure or error when it blocks, skipped when it fails or is not compared."""
    tc = TestCase(
        name=change.case_id or f"{change.runner} (no results)",
        classname=f"kcgate.{change.runner}.{change.contract_id or 'runner'}",
        elapsed_sec=result.duration_s if result else None,
        file=declared_in(contracts_file, change.source),
        line=change.line,
    )
    message = (
        f"{label(change.category)}: {change.signature or change.message or change.status or 'no detail'}"
    )
    message = message[:_TEXT_LIMIT]
    if change.blocking and change.category in JUNIT_ERROR:
        tc.add_error_info(message=message, output=_details(change), error_type=change.category)
    elif change.blocking:
        tc.add_failure_info(message=message, output=_details(change), failure_type=change.category)
    elif change.category in _SKIPPED or change.status in _FAILING:
        tc.add_skipped_info(message=message)
    return tc


def _details(c: CaseChange) -> str:
    lines = [
        f"runner: {c.runner}",
        f"contract: {c.contract_id} ({c.klass})",
        f"status: {c.base_status or '-'} -> {c.status or '-'}",
        f"budget used: {_fmt(c.base_budget_used)} -> {_fmt(c.budget_used)}",
    ]
    if c.signature:
        lines.append(f"signature: {c.signature}")
    if c.message:
        lines.append(f"message: {c.message}")
    return "\n".join(lines)[: _TEXT_LIMIT * 2]


def suite_properties(rd: RunnerDiff, run: RunResult | None) -> dict[str, str]:
    """The runner's fingerprint, flattened to ``fingerprint.<field>``."""
    props = {
        "runner": rd.runner,
        "fingerprint_key": rd.fingerprint_key,
        "base_fingerprint_key": rd.base_fingerprint_key,
    }
    if run is not None:
        for key, value in run.fingerprint.to_json().items():
            if key == "flags":
                props.update({f"fingerprint.flags.{k}": str(v) for k, v in sorted(value.items())})
            else:
                props[f"fingerprint.{key}"] = str(value)
    return props


# The diff's side of a case's properties, in this order: the change's category and verdict inputs.
_CHANGE_PROPERTIES: tuple[tuple[str, Callable[[CaseChange], str | None]], ...] = (
    ("category", attrgetter("category")),
    ("blocking", lambda c: str(c.blocking).lower()),
    ("contract", attrgetter("contract_id")),
    ("class", attrgetter("klass")),
    ("status", attrgetter("status")),
    ("base_status", attrgetter("base_status")),
    ("budget_used", lambda c: _fmt(c.budget_used)),
    ("base_budget_used", lambda c: _fmt(c.base_budget_used)),
    ("signature", lambda c: c.signature or None),  # the summary; left out when there is none
)
_GIVEN = frozenset(name for name, _ in _CHANGE_PROPERTIES)


def case_properties(c: CaseChange, result: CaseResult | None) -> dict[str, str]:
    """The change's category and verdict inputs, then its result's properties (when the run is given)."""
    props = {name: text for name, read in _CHANGE_PROPERTIES if (text := read(c)) is not None}
    if result is not None:
        props.update(result_properties(result))
    return props


def result_properties(r: CaseResult) -> dict[str, str]:
    """The result's JUnit properties from the column table (``records.junit_properties``), a metric named
    ``metric.<name>``; a column the diff's side names too (budget_used, signature) keeps the diff's value,
    the one the verdict read."""
    pairs = junit_properties(r)
    return {
        (f"metric.{c.name}" if c in METRIC_COLUMNS else c.name): t for c, t in pairs if c.name not in _GIVEN
    }


def _add_properties(elem: ET.Element, props: dict[str, str]) -> None:
    node = ET.Element("properties")
    for name, value in props.items():
        ET.SubElement(node, "property", {"name": name, "value": str(value)[:_TEXT_LIMIT]})
    elem.insert(0, node)


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"
