"""JUnit XML for the report: valid XML, one test case per change, properties, hostile text survives."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from kcgate.render.junit_report import render_junit
from tests.testing.golden_files import check_golden
from tests.testing.report_samples import big_verdict, hostile_verdict, sample_runs, sample_verdict


def test_junit_golden() -> None:
    check_golden("report-junit.xml", render_junit(sample_verdict(), sample_runs()))


def test_one_testcase_per_change_with_outcomes() -> None:
    root = ET.fromstring(render_junit(sample_verdict(), sample_runs()))
    cases = root.findall(".//testcase")
    assert len(cases) == len(sample_verdict().changes)
    assert root.get("failures") == "2" and root.get("errors") == "1" and root.get("skipped") == "2"


def test_properties_carry_fingerprint_and_metrics() -> None:
    root = ET.fromstring(render_junit(sample_verdict(), sample_runs()))
    suite = next(s for s in root.findall("testsuite") if s.get("name") == "kcgate.nvidia-h100")
    props = {p.get("name"): p.get("value") for p in suite.find("properties") or []}
    assert props["fingerprint.device"] == "H100 80GB" and props["fingerprint.flags.tf32"] == "off"
    case = suite.find("testcase[@name='gemm-bf16/bfloat16/128x4096x128/s0']")
    assert case is not None
    cprops = {p.get("name"): p.get("value") for p in case.find("properties") or []}
    assert cprops["category"] == "new-violation" and cprops["metric.max_abs_err"] == "0.5"
    assert cprops["budget_used"] == "1873.2"


def test_hostile_text_stays_well_formed() -> None:
    text = render_junit(hostile_verdict())
    root = ET.fromstring(text)  # control characters removed, markup escaped
    assert root.find(".//failure") is not None


@pytest.mark.slow
def test_large_reports_render() -> None:
    root = ET.fromstring(render_junit(big_verdict(5000)))
    assert root.get("tests") == "5000"
