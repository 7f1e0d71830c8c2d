"""The PR comment's charts: a Mermaid xychart per contract that blocks or drifted, base against head per
runner and the recorded commits before them, a text line where Mermaid is not rendered, labels that
cannot break out of the fence, and the comment still within GitHub's limit.

Golden files tests/golden/comment-charts*.md (regenerate with KCGATE_REGEN_GOLDEN=1)."""

from __future__ import annotations

import re
from dataclasses import replace

from kcgate.contracts.policy import Policy
from kcgate.gate.diff import make_diff
from kcgate.history.view import Commit, HistoryView, Point
from kcgate.render.markdown import COMMENT_BUDGET, render_comment
from kcgate.render.pr_charts import MAX_CHARTS, charted
from kcgate.results.model import RunResult
from tests.render.test_comment_goldens import CTX, TODAY, _run
from tests.testing.golden_files import check_golden
from tests.testing.report_samples import FP_AMD, FP_NVIDIA, SHA_OLD, passing, regressed, scenario_case

RUNNERS = (("nvidia-h100", FP_NVIDIA), ("amd-mi300x", FP_AMD))
OLDER = ("a" * 40, "b" * 40, "c" * 40)


def verdict():  # type: ignore[no-untyped-def]
    base = [_run(r, fp, passing("gemm-bf16"), passing("softmax-fp32", budget=0.01)) for r, fp in RUNNERS]
    drifted = tuple(scenario_case("softmax-fp32", s, "pass", 0.4, abs_err=1e-4) for s in range(2))
    now = [
        _run("nvidia-h100", FP_NVIDIA, passing("gemm-bf16"), drifted),
        _run("amd-mi300x", FP_AMD, regressed("gemm-bf16"), passing("softmax-fp32", budget=0.01)),
    ]
    runs = lambda rs: {r.runner: r for r in rs}  # noqa: E731
    return make_diff(runs(now), runs(base), Policy(), TODAY)


def history() -> HistoryView:
    commits = (
        *(Commit(sha, f"2026-11-0{i + 1}T00:00:00Z", 20 + i) for i, sha in enumerate(OLDER)),
        Commit(SHA_OLD, "2026-11-09T00:00:00Z", 23),
    )
    points = tuple(
        Point(contract, runner, sha, "pass", budget, 2, 0, "")
        for sha in (*OLDER, SHA_OLD)
        for runner, _ in RUNNERS
        for contract, budget in (("gemm-bf16", 0.29), ("softmax-fp32", 0.011))
    )
    return HistoryView(
        commits, ("amd-mi300x", "nvidia-h100"), ("gemm-bf16", "softmax-fp32"), points, (), (), ""
    )


def test_charts_for_the_blocking_and_the_drifted_contracts_with_history() -> None:
    v = verdict()
    assert charted(v) == ["gemm-bf16", "softmax-fp32"]
    text = render_comment(v, replace(CTX, charts=True, history=history()))
    charts = text.split("### Severity over commits", 1)[1]
    assert charts.count("```mermaid") == 2 and charts.count("xychart-beta") == 2
    # the base is recorded in the history too: drawn once, named by its commit; the capped value is written
    assert 'x-axis ["aaaaaaa", "bbbbbbb", "ccccccc", "base 1111111", "head (47 capped)"]' in charts
    assert "line [0.29, 0.29, 0.29, 0.31, 2]" in charts  # amd: recorded, base, head (47 capped at 2)
    assert "amd-mi300x 0.31 → 47.00× fails (before: 0.29, 0.29, 0.29)" in charts  # the text line
    assert "Key: blue amd-mi300x, orange nvidia-h100; red: the edge at 1, over it fails." in charts
    # the key's colours, in line order, then the edge's red
    assert '"plotColorPalette": "#0969da, #e16f24, #cf222e"' in charts
    check_golden("comment-charts.md", text)


def test_charts_without_history_show_base_and_head() -> None:
    text = render_comment(verdict(), replace(CTX, charts=True))
    assert 'x-axis ["base 1111111", "head (47 capped)"]' in text and "(before:" not in text
    check_golden("comment-charts-no-history.md", text)


def test_no_charts_unless_asked() -> None:
    assert "mermaid" not in render_comment(verdict(), CTX)


def test_hostile_ids_cannot_leave_the_chart_or_the_line() -> None:
    evil = 'x"]\n```\n<img src=x onerror=alert(1)> %%{init: {"theme":"dark"}}%% @team'
    base = [
        RunResult("amd-mi300x", FP_AMD, tuple(replace(c, contract_id=evil) for c in passing("gemm-bf16")))
    ]
    now = [
        RunResult("amd-mi300x", FP_AMD, tuple(replace(c, contract_id=evil) for c in regressed("gemm-bf16")))
    ]
    v = make_diff({r.runner: r for r in now}, {r.runner: r for r in base}, Policy(), TODAY)
    text = render_comment(v, replace(CTX, charts=True))
    block = text.split("### Severity over commits", 1)[1]
    assert block.count("```") == 2  # the fence opens and closes once: the id cannot close it
    fence = block.split("```mermaid", 1)[1].split("```", 1)[0]
    directive, rest = fence.splitlines()[1], "\n".join(fence.splitlines()[2:])
    assert directive.startswith("%%{init: ") and "%%" not in rest  # only kcgate's own colours directive
    assert "<" not in fence and "\n```" not in fence
    assert re.fullmatch(r'    title "[A-Za-z0-9 ._:/()+-]+"', fence.splitlines()[3])
    line = block.split("**", 2)[1]
    assert not re.search(r"(?<!\\)[<`]", line) and "@team" not in line


def test_many_charted_contracts_stay_within_the_comment_limit() -> None:
    contracts = [f"contract-{i:03d}-" + "x" * 60 for i in range(40)]
    base, now = [], []
    for r, fp in (*RUNNERS, ("intel-max", FP_AMD)):
        base.append(
            RunResult(
                r,
                fp,
                tuple(
                    replace(c, contract_id=k, case_id=f"{k}/{c.case_id}")
                    for k in contracts
                    for c in passing("gemm-bf16", seeds=40)
                ),
            )
        )
        now.append(
            RunResult(
                r,
                fp,
                tuple(
                    replace(c, contract_id=k, case_id=f"{k}/{c.case_id}")
                    for k in contracts
                    for c in regressed("gemm-bf16", seeds=40)
                ),
            )
        )
    v = make_diff({r.runner: r for r in now}, {r.runner: r for r in base}, Policy(), TODAY)
    text = render_comment(v, replace(CTX, charts=True), COMMENT_BUDGET)
    assert len(text.encode()) <= COMMENT_BUDGET
    assert 0 < text.count("xychart-beta") <= MAX_CHARTS
