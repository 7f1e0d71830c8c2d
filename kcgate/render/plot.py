"""Optional PNG of a Comparison: a contract x runner severity grid (each cell's severity written in its
band's colour, red only for a failure) and, where a contract has K, its error-against-K curves.

matplotlib is an extra (``pip install 'kcgate[plot]'``); it is imported only when a PNG is asked for.
"""

from __future__ import annotations

import io
from typing import Any

from kcgate.errors import UsageError
from kcgate.gate.compare import Cell, Comparison
from kcgate.render.axes import LogAxis, error_axis
from kcgate.render.bands import BANDS, NO_BUDGET, Band, band_of
from kcgate.results.severity import severity_words

MAX_CONTRACTS = 60
MAX_CURVES = 12
EDGE_ROOM = 10**0.12  # the error axis reaches this factor past its whole decades, so no marker is cut in half
LINEAR_K_SPAN = 10.0  # K from its smallest to its largest by less than this: a linear axis (509..512 reads)


def render_png(comparison: Comparison) -> bytes:
    """The figure as PNG bytes (labels are untrusted: ``_short`` escapes mathtext): the contract x runner
    severity grid, and the error-against-K panel where a contract has K."""
    plt = _pyplot()
    contracts = comparison.contracts[:MAX_CONTRACTS]
    height = max(3.5, 1.2 + 0.42 * len(contracts))
    width = max(5.0, 2.6 + 1.5 * len(comparison.runners))
    if comparison.curves:
        fig, (heat, curves) = plt.subplots(1, 2, figsize=(width + 7.0, height), width_ratios=[width, 7.0])
        _curves(curves, comparison)
    else:
        fig, heat = plt.subplots(1, 1, figsize=(width, height))
    _heatmap(heat, comparison, contracts)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
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


def _heatmap(ax: Any, comparison: Comparison, contracts: tuple[str, ...]) -> None:
    """One row per contract, one column per runner: each cell the band's colour (``kcgate.render.bands``:
    red only for a failure) and its severity written in it."""
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    grid = comparison.grid()
    cells = [[grid.get((k, r)) for r in comparison.runners] for k in contracts]
    ax.imshow([[to_rgb(_band(c).colour) for c in row] for row in cells], aspect="auto")
    for y, row in enumerate(cells):
        for x, c in enumerate(row):
            ax.text(x, y, _cell_words(c), ha="center", va="center", fontsize=10,
                    color=_band(c).ink)  # fmt: skip
    ax.set_xticks(range(len(comparison.runners)), [_short(r, 24) for r in comparison.runners], fontsize=10)
    ax.set_yticks(range(len(contracts)), [_short(k, 36) for k in contracts], fontsize=10)
    ax.tick_params(top=True, labeltop=True, bottom=False, labelbottom=False)
    ax.set_title("severity per contract (1 = at the edge, over 1 fails)", fontsize=11)
    ax.set_xticks([x - 0.5 for x in range(1, len(comparison.runners))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(contracts))], minor=True)
    ax.grid(which="minor", color="white", linewidth=2)
    ax.tick_params(which="minor", length=0)
    used = [b for b in (*BANDS, NO_BUDGET) if any(_band(c) == b for row in cells for c in row)]
    ax.legend(handles=[Patch(color=b.colour, label=b.name) for b in used], fontsize=8,
              loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=2, frameon=False)  # fmt: skip


def _band(cell: Cell | None) -> Band:
    return NO_BUDGET if cell is None else band_of(cell.verdict, cell.severity)


def _cell_words(cell: Cell | None) -> str:
    if cell is None:
        return "–"
    words = severity_words(cell.severity, cell.verdict)
    return f"{words}\n{cell.failing}/{cell.cases} fail" if cell.failing else words


def _curves(ax: Any, comparison: Comparison) -> None:
    from matplotlib.ticker import MaxNLocator

    shown = comparison.curves[:MAX_CURVES]
    axis = error_axis(e for curve in shown for _, e in curve.points)
    for i, curve in enumerate(shown):
        ks, errors = zip(*curve.points)
        line = ax.plot(
            ks,
            [axis.place(e) for e in errors],
            marker="osD^vP"[i % 6],  # a marker per curve as well as a colour
            markersize=marker_size(i, len(shown)),  # each smaller than the last: equal curves stay visible
            label=_short(f"{curve.contract_id} @ {curve.runner}"),
        )
        floor = [k for k, e in curve.points if axis.at_floor(e)]
        if floor:  # zero (exact) or below the axis: a hollow triangle on the floor, not a point at 1e-300
            ax.plot(floor, [axis.lo] * len(floor), "v", mfc="none", color=line[0].get_color(), markersize=9)
    ax.set_title("worst error against reduction length K", fontsize=11)
    if k_scale([k for curve in shown for k, _ in curve.points]) == "log":
        ax.set_xscale("log")
    else:  # K is a whole number: no 509.5 tick
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_yscale("log")
    ax.set_ylim(axis.lo / EDGE_ROOM, axis.hi * EDGE_ROOM)  # a point on the floor or the top drawn whole
    ax.legend(fontsize=8)
    if axis.zeros or axis.clamped:
        ax.text(0.01, 0.01, floor_note(axis), transform=ax.transAxes, fontsize=8, va="bottom")
    ax.set_xlabel("K")
    ax.set_ylabel("error")


def marker_size(i: int, n: int) -> float:
    """The i-th of n curves' marker size: the first drawn largest, each later one smaller, so runners whose
    errors are equal (and whose lines coincide) show as concentric markers rather than one."""
    return 5.0 + 4.0 * (n - 1 - i)


def k_scale(ks: list[float]) -> str:
    """ "linear" where K spans less than a factor of LINEAR_K_SPAN (509..512 on a log axis is one tick)."""
    return "log" if ks and min(ks) > 0 and max(ks) / min(ks) >= LINEAR_K_SPAN else "linear"


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
