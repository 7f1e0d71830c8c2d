"""The comment reads one severity per case (kcgate.results.severity): a contract that fails the sensitivity
gate within its budget is failing in its row, its matrix cell and its chart, never a flat 0.05; and the
first screen is the title and the Blocking table, the legend folded last."""

from __future__ import annotations

from dataclasses import replace

from kcgate.contracts.policy import Policy
from kcgate.gate.diff import make_diff
from kcgate.render.markdown import render_comment
from kcgate.results.model import CaseResult, RunResult, Signature
from tests.render.test_comment_goldens import CTX, TODAY
from tests.testing.report_samples import FP_AMD, FP_NVIDIA, passing, scenario_case

EXCESS = Signature("excess-error", "forward output: error 7x a correct implementation's (allowed 2x)")


def _norm(status: str, excess: float) -> tuple[CaseResult, ...]:
    cases = []
    for s in range(2):
        c = scenario_case("layernorm-fp16", s, status, 0.05, signature=EXCESS if status == "fail" else None)
        cases.append(replace(c, metrics=replace(c.metrics, extra=(("excess_ratio", excess),))))
    return tuple(cases)


def _comment() -> str:
    runners = (("nvidia-h100", FP_NVIDIA), ("amd-mi300x", FP_AMD))
    base = {r: RunResult(r, fp, (*_norm("pass", 0.8), *passing("gemm-bf16"))) for r, fp in runners}
    now = {r: RunResult(r, fp, (*_norm("fail", 7.0), *passing("gemm-bf16"))) for r, fp in runners}
    return render_comment(make_diff(now, base, Policy(), TODAY), replace(CTX, charts=True))


def test_a_sensitivity_failure_within_the_budget_is_failing_everywhere() -> None:
    text = _comment()
    [row] = [line for line in text.split("### Blocking", 1)[1].splitlines() if "layernorm-fp16" in line][:1]
    assert "| 0.80 → **7.00×** | 0.05 → 0.05 |" in row and "| float16 | 128x4096 |" in row
    assert "| layernorm-fp16 | ❌ fail 7.00× | ❌ fail 7.00× |" in text  # the matrix
    chart = text.split("### Severity over commits", 1)[1]
    # each capped value once: "head (7 / 7 capped)" was cut off at the chart's edge
    assert 'x-axis ["base 1111111", "head (7 capped)"]' in chart
    assert "**layernorm-fp16**, worst severity over its cases, baseline → head" in chart
    assert "amd-mi300x 0.80 → 7.00× fails" in chart
    assert chart.count("line [0.8, 2]") == 2  # both runners rise to the cap: never a flat line
    # the edge drawn in the failure red, last, so the rising lines read as failing, and named in the key
    assert '"plotColorPalette": "#0969da, #e16f24, #cf222e"' in chart and "line [1, 1]\n```" in chart
    assert "red: the edge at 1, over it fails." in chart
    assert "amd-mi300x and nvidia-h100 coincide" in chart  # said, since one line hides the other


def test_the_first_screen_is_the_title_and_the_blocking_table() -> None:
    text = _comment()
    first = text.split("\n\n")[:4]
    assert first[0].startswith("## ❌") and "### Blocking" in "\n\n".join(first)
    assert text.index("### Blocking") < text.index("### Runners")
    legend = text.rsplit("<details>", 1)[1]
    assert legend.startswith("\n<summary>How to read these numbers</summary>") and "**severity**" in legend
    assert (
        text.count("verified (fingerprint") == 2 and "same device, driver" not in text.split("<details>")[0]
    )
