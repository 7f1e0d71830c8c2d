"""Cross-vendor comparison: the matrix, consensus outliers, K curves, Mermaid, PNG and the command."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kcgate.cli import app
from kcgate.errors import UsageError
from kcgate.gate.compare import compare_runs, find_outliers, k_curves
from kcgate.render import compare_formats, mermaid
from kcgate.results.model import CaseResult, Fingerprint, Metrics, RunResult, write_run


def case(cid: str, contract: str = "gemm", status: str = "pass", budget: float | None = 0.1, err: float | None = 1e-6,
         k: float | None = None, norm: float | None = None) -> CaseResult:  # fmt: skip
    extra = tuple((n, v) for n, v in (("norm_err", norm), ("reduction_len", k)) if v is not None)
    metrics = Metrics(budget_used=budget, max_abs_err=err, extra=extra)
    return CaseResult(cid, contract, "C-PRC-01", "matmul", "float32", (4, 4), 0, status, metrics)


def run(runner: str, *cases: CaseResult) -> RunResult:
    return RunResult(runner, Fingerprint(backend="cuda", device=f"{runner}-gpu"), tuple(cases))


def three(errors: dict[str, float], **kw: object) -> dict[str, RunResult]:
    return {r: run(r, case("gemm/k4096", err=e, **kw)) for r, e in errors.items()}  # type: ignore[arg-type]


# ---- matrix --------------------------------------------------------------------------------------


def test_cell_is_worst_case_and_largest_budget() -> None:
    runs = {
        "a": run(
            "a", case("x1", budget=0.2), case("x2", status="fail", budget=3.0), case("x3", status="error")
        )
    }
    (cell,) = compare_runs(runs).cells
    assert (cell.verdict, cell.budget_used, cell.cases, cell.failing) == ("fail", 3.0, 3, 1)


def test_error_outranks_refused_and_pass() -> None:
    runs = {
        "a": run(
            "a",
            case("x1"),
            case("x2", status="refused", budget=None),
            case("x3", status="error", budget=None),
        )
    }
    assert compare_runs(runs).cells[0].verdict == "error"


def test_matrix_has_a_gap_where_a_runner_lacks_a_contract() -> None:
    comparison = compare_runs({"a": run("a", case("g1")), "b": run("b", case("s1", contract="softmax"))})
    text = compare_formats.render_console(comparison)
    assert comparison.contracts == ("gemm", "softmax") and "—" in text


# ---- consensus -----------------------------------------------------------------------------------


def test_one_runner_far_above_the_others_is_an_outlier_even_when_passing() -> None:
    (outlier,) = find_outliers(three({"amd": 1e-7, "intel": 2e-7, "npu": 5e-5}))
    assert (outlier.runner, outlier.status, outlier.metric) == ("npu", "pass", "max_abs_err")
    assert outlier.ratio == pytest.approx(5e-5 / (2e-7 * 1e-7) ** 0.5)


def test_the_majority_is_never_the_outlier() -> None:
    assert find_outliers(three({"a": 1e-7, "b": 1e-3, "c": 1e-3})) == ()


def test_a_lower_error_is_never_an_outlier() -> None:
    assert find_outliers(three({"a": 1e-9, "b": 1e-6, "c": 1.1e-6})) == ()


def test_two_runners_are_no_consensus() -> None:
    assert find_outliers(three({"a": 1e-9, "b": 1e-2})) == ()


def test_norm_err_is_preferred_and_non_finite_is_skipped() -> None:
    runs = three({"a": 1.0, "b": 1.0, "c": 1.0}, norm=1e-6)
    runs["c"] = run("c", case("gemm/k4096", err=1.0, norm=1e-3))
    runs["d"] = run("d", case("gemm/k4096", err=1.0, norm=float("nan")))
    (outlier,) = find_outliers(runs)
    assert (outlier.runner, outlier.metric) == ("c", "norm_err")


def test_exact_zero_errors_still_compare() -> None:
    (outlier,) = find_outliers(three({"a": 0.0, "b": 0.0, "c": 1e-8}))
    assert outlier.runner == "c" and outlier.ratio > 1e6


# ---- K curves and charts -------------------------------------------------------------------------


def _k_runs() -> dict[str, RunResult]:
    def cases(scale: float) -> list[CaseResult]:
        return [
            case(f"gemm/k{k}/s{s}", err=scale * k**0.5 * (1 + s), k=float(k))
            for k in (64, 1024, 4096)
            for s in (0, 1)
        ]

    return {r: run(r, *cases(s)) for r, s in (("nvidia", 1e-7), ("amd", 1.2e-7), ("ascend", 3e-4))}


def test_k_curve_keeps_the_worst_error_per_k() -> None:
    (curve,) = k_curves(_k_runs()["nvidia"])
    assert [k for k, _ in curve.points] == [64.0, 1024.0, 4096.0]
    assert curve.points[0][1] == pytest.approx(1e-7 * 8 * 2)


def test_markdown_has_matrix_outliers_and_mermaid() -> None:
    text = compare_formats.render_markdown(compare_runs(_k_runs()))
    assert "| Contract | amd | ascend | nvidia |" in text
    assert "**Consensus outliers**" in text and "ascend" in text
    assert text.count("```mermaid") == 2 and "xychart-beta" in text and "line [" in text
    # each line in its palette colour, named in the key (Mermaid's default palette left them unnamed)
    assert '"plotColorPalette": "#0969da, #e16f24, #8250df"' in text
    assert "Key: blue amd, orange ascend, purple nvidia." in text


def test_the_k_chart_says_which_runners_lines_coincide() -> None:
    runs = _k_runs()
    runs["amd"] = replace(runs["nvidia"], runner="amd")
    text = compare_formats.render_markdown(compare_runs(runs))
    assert "Key: blue amd, orange ascend, purple nvidia; amd and nvidia coincide" in text


def test_mermaid_labels_cannot_break_out() -> None:
    hostile = 'x"]\n```\n%%{init: {"theme": "dark"}}%%<script>'
    runs = {hostile: run(hostile, case("c1")), "b": run("b", case("c1"))}
    chart, _ = mermaid.budget_chart(compare_runs(runs))
    body = chart.removeprefix("```mermaid\n").removesuffix("\n```")
    assert "```" not in body and "%%" not in body and "<" not in body and "{" not in body
    assert body.count("\n") == 4
    assert "<script>" not in compare_formats.render_markdown(compare_runs(runs))  # the caption escapes it


def test_json_output_is_strict() -> None:
    runs = _k_runs()
    runs["nan"] = run("nan", case("gemm/k64/s0", budget=float("nan"), err=float("inf"), k=float("nan")))
    doc = json.loads(compare_formats.render_json(compare_runs(runs)))
    assert doc["kind"] == "kcgate-compare" and len(doc["runners"]) == 4


def test_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from kcgate.render.plot import render_png

    runs = _k_runs()
    runs["$\\frac{1"] = run("$\\frac{1", case("x$^", k=2.0), case("x$^2", k=4.0))  # mathtext off
    assert render_png(compare_runs(runs))[:8] == b"\x89PNG\r\n\x1a\n"


def _norm_failing_the_sensitivity_gate() -> dict[str, RunResult]:
    """rms_norm within its bound (budget 0.5) failing the sensitivity gate (7.2x), with no K; a gemm whose
    K spans 509..512."""

    def norm(status: str, ratio: float) -> CaseResult:
        metrics = Metrics(
            budget_used=0.5, max_abs_err=1e-3, extra=(("excess_ratio", ratio), ("reduction_len", 512.0))
        )
        return CaseResult(
            "rms/1", "rms-norm", "C-PRC-01", "rmsnorm", "bfloat16", (4, 512), 0, status, metrics
        )

    gemm = [case(f"g/k{k}", contract="gemm-k", err=1e-6 * k, k=float(k)) for k in (509, 510, 512)]
    return {r: run(r, norm("fail" if r != "c" else "pass", 7.2 if r != "c" else 0.6), *gemm) for r in "abc"}


def test_a_sensitivity_failure_is_a_severity_over_1_in_every_compare_format() -> None:
    comparison = compare_runs(_norm_failing_the_sensitivity_gate())
    cells = {c.runner: c for c in comparison.cells if c.contract_id == "rms-norm"}
    assert [(cells[r].verdict, cells[r].budget_used, cells[r].severity) for r in "abc"] == [
        ("fail", 0.5, 7.2), ("fail", 0.5, 7.2), ("pass", 0.5, 0.6)
    ]  # fmt: skip
    assert "| `rms-norm` | ❌ 7.20× (1/1) | ❌ 7.20× (1/1) | ✅ 0.60 |" in compare_formats.render_markdown(
        comparison
    )
    chart, words = mermaid.budget_chart(comparison)
    assert 'x-axis ["a", "b", "c"]' in chart  # the runner alone: a longer label was cut at the chart's edge
    assert words == "a 3.65 (drawn at 2), 1 contract failing; b 3.65 (drawn at 2), 1 contract failing; c 0.35"


def test_the_k_panel_has_only_contracts_with_k_on_a_linear_axis_where_k_spans_little() -> None:
    from kcgate.render.plot import k_scale

    runs = _norm_failing_the_sensitivity_gate()
    for r, result in runs.items():  # the norm and a softmax at two row lengths, as held-out shapes give them
        rows = [
            replace(
                c,
                case_id=f"{name}/{n}",
                contract_id=name,
                op=op,
                metrics=replace(c.metrics, extra=(("reduction_len", float(n)),)),
            )
            for c in result.cases[:1]
            for name, op in (("rms-norm", "rmsnorm"), ("softmax", "softmax"))
            for n in (1021, 1024)
        ]
        runs[r] = replace(result, cases=(*result.cases, *rows))
    comparison = compare_runs(runs)
    assert {c.contract_id for c in comparison.curves} == {"gemm-k"}  # a norm's row length is no K
    assert k_scale([509.0, 512.0]) == "linear" and k_scale([64.0, 4096.0]) == "log"


def test_png_cells_are_red_only_where_the_contract_fails_and_say_their_severity() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb

    from kcgate.render.bands import FAIL_RED
    from kcgate.render.plot import _heatmap

    comparison = compare_runs(_norm_failing_the_sensitivity_gate())
    fig, ax = plt.subplots()
    _heatmap(ax, comparison, comparison.contracts)
    colours = ax.images[0].get_array()
    red = [[tuple(colours[y][x]) == to_rgb(FAIL_RED) for x in range(3)] for y in range(2)]
    assert comparison.contracts == ("gemm-k", "rms-norm") and red == [[False] * 3, [True, True, False]]
    words = [t.get_text() for t in ax.texts]
    assert words.count("7.20×\n1/1 fail") == 2 and "0.60" in words
    assert [t.get_fontsize() for t in ax.get_yticklabels()] == [10.0, 10.0]  # readable, not rotated 6 px
    plt.close(fig)


def test_png_without_matplotlib_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from kcgate.render.plot import render_png

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UsageError, match=r"install it with: pip install 'kcgate\[plot\]'"):
        render_png(compare_runs(_k_runs()))


# ---- command -------------------------------------------------------------------------------------


@pytest.fixture()
def results_dir(tmp_path: Path) -> Path:
    for name, r in _k_runs().items():
        write_run(tmp_path / "results" / f"{name}.json", r)
    return tmp_path / "results"


@pytest.mark.parametrize("fmt", ["console", "markdown", "json", "github"])
def test_compare_command(results_dir: Path, fmt: str) -> None:
    files = sorted(str(p) for p in results_dir.glob("*.json"))
    result = CliRunner().invoke(app, ["compare", *files, "--format", fmt])
    assert result.exit_code == 0, result.output
    assert "ascend" in result.output


def test_compare_command_png(results_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    result = CliRunner().invoke(app, ["compare", str(results_dir), "--png", str(tmp_path / "out" / "m.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "m.png").stat().st_size > 1000


def test_compare_command_bad_format(results_dir: Path) -> None:
    result = CliRunner().invoke(app, ["compare", str(results_dir), "--format", "html"])
    assert result.exit_code == 3 and "console, markdown, json" in result.output


def test_compare_command_empty_dir(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["compare", str(tmp_path)])
    assert result.exit_code == 3 and "no results files found" in result.output


def test_github_format_annotates_disagreements_and_outliers() -> None:
    """One warning per contract whose runners disagree on the verdict, one notice per consensus outlier, then
    the headline; hostile runner and contract names cannot start a workflow command of their own."""
    hostile = "evil\n::error::pwned,x:y"
    runs = {
        "a": run("a", case("gemm/k1", err=1e-6), case("sm/1", contract="softmax")),
        "b": run("b", case("gemm/k1", err=1.1e-6), case("sm/1", contract="softmax")),
        hostile: run(
            hostile, case("gemm/k1", status="fail", budget=3.0, err=1e-3), case("sm/1", contract="softmax")
        ),
    }
    text = compare_formats.render_github(compare_runs(runs))
    lines = text.splitlines()
    assert lines[-1].startswith(
        "kcgate compare: 2 contracts x 3 runners; 1 disagree on the verdict, 1 consensus"
    )
    (warning,) = [ln for ln in lines if ln.startswith("::warning ")]
    assert "gemm: pass on a (pass 0.10), b (pass 0.10); fail on evil" in warning and "%0A" in warning
    (notice,) = [ln for ln in lines if ln.startswith("::notice ")]
    assert "gemm (1 case, worst gemm/k1)" in notice and "x the others' median" in notice
    assert not any(ln.startswith("::error") for ln in lines)  # the hostile name stayed inside its message
    assert compare_formats.render_github(compare_runs({"a": runs["a"], "b": runs["b"]})).splitlines() == [
        "kcgate compare: 2 contracts x 2 runners; 0 disagree on the verdict, 0 consensus outlier(s)"
    ]
