"""compare --png's K panel as a reader sees it (kcgate.render.plot): drawn with matplotlib and read back
pixel by pixel."""

from __future__ import annotations

import pytest

from kcgate.gate.compare import compare_runs
from kcgate.results.model import CaseResult, Fingerprint, Metrics, RunResult

pytest.importorskip("matplotlib")


def _gemm(runner: str, error: float = 2e-3) -> RunResult:
    cases = tuple(
        CaseResult(
            f"gemm/k{k}", "gemm", "C-PRC-01", "matmul", "bfloat16", (17, k, 33), 0, "pass",
            Metrics(budget_used=0.5, max_abs_err=error * k / 509, extra=(("reduction_len", float(k)),)),
        )
        for k in (509, 512)
    )  # fmt: skip
    return RunResult(runner, Fingerprint(backend="cpu", vendor=runner, device=runner), cases)


def test_runners_with_equal_errors_all_show_in_the_k_panel() -> None:
    """Three runners whose gemm errors are equal: every runner's colour is still drawn (the legend
    removed, so only the plotted markers count)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import to_rgb

    from kcgate.render.plot import _curves

    comparison = compare_runs({r: _gemm(r) for r in ("amd", "cpu", "nvidia")})
    fig, ax = plt.subplots(figsize=(6, 4))
    _curves(ax, comparison)
    ax.get_legend().remove()
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(float) / 255
    plt.close(fig)
    for line in ax.get_lines():
        colour = np.array(to_rgb(line.get_color()))
        seen = (np.abs(pixels - colour).max(axis=-1) < 0.02).sum()
        assert seen > 20, f"{line.get_label()}: its colour is hidden under another runner's"
    assert all(float(t.get_text().replace("−", "-")).is_integer() for t in ax.get_xticklabels())  # K is whole


def test_a_point_on_the_error_axis_floor_is_drawn_whole() -> None:
    """An error of exactly 1e-3 is the axis's floor: the axis reaches below it, so its marker is not cut."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kcgate.render.plot import _curves

    fig, ax = plt.subplots(figsize=(6, 4))
    _curves(ax, compare_runs({"amd": _gemm("amd", 1e-3)}))
    fig.canvas.draw()
    [line] = ax.get_lines()
    lowest = min(ax.transData.transform(line.get_xydata())[:, 1]) - ax.transAxes.transform((0, 0))[1]
    plt.close(fig)
    assert lowest > line.get_markersize() / 72 * fig.dpi / 2  # above the frame by at least half a marker
