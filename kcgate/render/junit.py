"""JUnit XML for a run (junit-xml package): one testcase per case, metrics and fingerprint as properties."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from junit_xml import TestCase, TestSuite, to_xml_report_string

from kcgate.gate.model import declared_in
from kcgate.results.model import UNEVALUATED, CaseResult, RunResult, Status
from kcgate.results.records import junit_properties


def _case(c: CaseResult) -> TestCase:
    tc = TestCase(
        name=c.case_id,
        classname=f"kcgate.{c.klass}.{c.contract_id}",
        elapsed_sec=c.duration_s,
        file=declared_in("contracts.toml", c.source),
        line=c.line,
    )
    if c.status == Status.FAIL:
        sig = f" [{c.signature.cause}] {c.signature.summary}" if c.signature else ""
        tc.add_failure_info(message=(c.message + sig)[:1000], output=_details(c), failure_type="violation")
    elif c.status in UNEVALUATED:
        tc.add_error_info(message=c.message[:1000], output=c.message, error_type=c.status)
    return tc


def _details(c: CaseResult) -> str:
    m = c.metrics
    lines = [
        f"budget_used={m.budget_used} max_abs_err={m.max_abs_err} max_ulp={m.max_ulp} "
        f"mismatches={m.mismatches}/{m.elements} worst_index={list(m.worst_index)} seed={c.seed}"
        + (f" grad={m.worst_grad}" if m.worst_grad else "")
        + (f" output={m.worst_output}" if m.worst_output else "")
    ]
    if c.signature:
        lines.append(f"signature: {c.signature.cause}: {c.signature.summary}")
        lines += [f"  {k} = {v}" for k, v in c.signature.evidence]
    return "\n".join(lines)


def _properties(c: CaseResult) -> dict[str, str]:
    """The case's properties from the column table, and the gradient or output of several that decided it."""
    props = {col.name: text for col, text in junit_properties(c)}
    key, name = c.tensor  # the signature's where it names one: the tensor that failed, not the largest budget
    if key:
        props[key] = name
    return props


def render_junit(run: RunResult) -> str:
    """junit-xml writes the suites; per-testcase <properties> (which it lacks) are added with ElementTree."""
    fp = run.fingerprint.to_json()
    props = {f"fingerprint.{k}": str(v) for k, v in fp.items() if k != "flags"}
    props |= {f"fingerprint.flags.{k}": v for k, v in fp["flags"].items()}
    props["fingerprint.key"] = run.fingerprint.key()
    suite = TestSuite(name=f"kcgate.{run.runner}", test_cases=[_case(c) for c in run.cases], properties=props)
    return add_case_properties(
        to_xml_report_string([suite], encoding="utf-8"), [_properties(c) for c in run.cases]
    )


def add_case_properties(xml: str, per_case: list[dict[str, str]]) -> str:
    root = ET.fromstring(xml)
    for tc, props in zip(root.iter("testcase"), per_case):
        el = ET.Element("properties")
        for k, v in props.items():
            ET.SubElement(el, "property", name=k, value=v)
        tc.insert(0, el)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
