"""Optional PNG of a Comparison: a runner x contract budget heatmap and error-against-K curves.

matplotlib is an extra (``pip install 'kcgate[plot]'``); it is imported only when a PNG is asked for.
"""

from __future__ import annotations

import io
import math
from typing import Any

from kcgate.errors import UsageError
from kcgate.gate.compare import Comparison
from kcgate.render.axes import LogAxis, error_axis

MAX_CONTRACTS = 60
MAX_CURVES = 12
BUDGET_CAP = 2.0


def render_png(comparison: Comparison) -> bytes:
    """The figure as PNG bytes (labels are untrusted: ``_short`` escapes mathtext)."""
    plt = _pyplot()
    fig, (heat, curves) = plt.subplots(1, 2, figsize=(14, 5 + 0.15 * len(comparison.runners)))
    _heatmap(heat, comparison)
    _curves(curves, comparison)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--png needs matplotlib; install it with: pip install 'kcgate[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _heatmap(ax: Any, comparison: Comparison) -> None:
    grid = comparison.grid()
    contracts = comparison.contracts[:MAX_CONTRACTS]
    values = [[_budget(grid.get((k, r))) for k in contracts] for r in comparison.runners]
    image = ax.imshow(values, cmap="RdYlGn_r", vmin=0.0, vmax=BUDGET_CAP, aspect="auto")
    ax.set_yticks(range(len(comparison.runners)), [_short(r) for r in comparison.runners])
    ax.set_xticks(range(len(contracts)), [_short(k) for k in contracts], rotation=90, fontsize=7)
    ax.set_title(f"budget used (worst case per contract, capped at {BUDGET_CAP:g})")
    ax.figure.colorbar(image, ax=ax)


def _budget(cell: Any) -> float:
    if cell is None or cell.budget_used is None:
        return math.nan
    return float(min(cell.budget_used, BUDGET_CAP))


def _curves(ax: Any, comparison: Comparison) -> None:
    shown = comparison.curves[:MAX_CURVES]
    axis = error_axis(e for curve in shown for _, e in curve.points)
    for curve in shown:
        ks, errors = zip(*curve.points)
        line = ax.plot(
            ks,
            [axis.place(e) for e in errors],
            marker="o",
            label=_short(f"{curve.contract_id} @ {curve.runner}"),
        )
        floor = [k for k, e in curve.points if axis.at_floor(e)]
        if floor:  # zero (exact) or below the axis: a hollow triangle on the floor, not a point at 1e-300
            ax.plot(floor, [axis.lo] * len(floor), "v", mfc="none", color=line[0].get_color(), markersize=9)
    ax.set_title("worst error against reduction length K")
    if shown:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(axis.lo, axis.hi)
        ax.legend(fontsize=7)
        if axis.zeros or axis.clamped:
            ax.text(0.01, 0.01, floor_note(axis), transform=ax.transAxes, fontsize=7, va="bottom")
    else:
        ax.text(0.5, 0.5, "no case reports extra.reduction_len", ha="center", va="center")
    ax.set_xlabel("K")
    ax.set_ylabel("error")


def floor_note(axis: LogAxis) -> str:
    """What the hollow triangles on the floor stand for."""
    parts = [f"{axis.zeros} exact (zero)"] if axis.zeros else []
    parts += [f"{axis.clamped} below {axis.lo:.0e}"] if axis.clamped else []
    return "▽ at the floor: " + ", ".join(parts)


def _short(text: str, limit: int = 30) -> str:
    """A printable label, cut to length, with ``$`` escaped so matplotlib never parses it as mathtext."""
    s = "".join(ch if ch.isprintable() else " " for ch in text)
    s = s if len(s) <= limit else s[: limit - 1] + "…"
    return s.replace("$", r"\$")
