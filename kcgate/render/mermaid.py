"""Mermaid charts (GitHub renders ``mermaid`` code fences) for the cross-vendor comparison. Pure.

Labels come from results files, so they are reduced to a safe alphabet: nothing can close the string,
the fence, or inject a ``%%{init}%%`` directive.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from kcgate.gate.compare import Comparison, KCurve, runner_severities
from kcgate.render.axes import LogAxis, error_axis
from kcgate.render.bands import FAIL_RED

MAX_SERIES = 8
BUDGET_CAP = 2.0  # bars above 2x the budget would flatten everything else
BAR_LABEL = 16  # characters under a bar: the last bar's label is centred on it and cut at the chart's edge
# one colour per series, in order, named in the chart's key (xychart has no legend of its own)
PALETTE = (
    ("blue", "#0969da"),
    ("orange", "#e16f24"),
    ("purple", "#8250df"),
    ("green", "#1a7f37"),
    ("pink", "#bf3989"),
    ("teal", "#1b7c83"),
    ("grey", "#6e7781"),
    ("brown", "#953800"),
)
_UNSAFE = re.compile(r"[^A-Za-z0-9 ._:/()+-]")


def label(value: object, limit: int = 40) -> str:
    return '"' + _UNSAFE.sub("_", str(value))[:limit] + '"'


def palette_init(n: int, edge: bool = False) -> str:
    """The directive that gives the first ``n`` series the palette's colours and, with ``edge``, the next
    one the failure red (``edge_line``; fixed text, never from results)."""
    colours = ", ".join([c for _, c in PALETTE[: max(1, min(n, len(PALETTE)))]] + [FAIL_RED] * edge)
    return '%%{init: {"themeVariables": {"xyChart": {"plotColorPalette": "' + colours + '"}}}}%%'


EDGE_WORDS = "red: the edge at 1, over it fails"


def edge_line(n: int) -> str:
    """A severity chart's last series: the edge, 1 at each of its ``n`` columns, in red (``palette_init``
    with ``edge``), so a line above it reads as failing."""
    return f"    line [{', '.join(['1'] * n)}]"


def colour_key(names: list[str], lines: list[tuple[str, ...]]) -> str:
    """The chart's key in words, one palette colour per series in drawing order, and which series coincide
    (Mermaid draws equal lines on top of each other): "blue amd, orange nvidia; amd and nvidia coincide
    (one line drawn over the other)". ``names`` come escaped for the caller's format."""
    key = ", ".join(f"{PALETTE[i % len(PALETTE)][0]} {n}" for i, n in enumerate(names))
    same: dict[tuple[str, ...], list[str]] = {}
    for n, values in zip(names, lines, strict=True):
        same.setdefault(values, []).append(n)
    groups = [g for g in same.values() if len(g) > 1]
    return key + "".join(f"; {' and '.join(g)} coincide (one line drawn over the other)" for g in groups)


def budget_chart(comparison: Comparison, escape: Callable[[str], str] = str) -> tuple[str, str]:
    """Bar per runner: the median over contracts of the severity (1 = at the edge, over 1 fails), capped;
    each bar labelled by its runner alone (a longer label under the last bar is cut off at the chart's
    edge), and a caption with every runner's real value and how many contracts fail (names through
    ``escape``)."""
    rows = runner_severities(comparison)
    if not rows:
        return "", ""
    values = [round(min(v, BUDGET_CAP), 4) for _, v, _ in rows]
    fence = _fence(
        [
            "xychart-beta",
            f"    title {label('Median severity per runner (worst case per contract)', 80)}",
            f"    x-axis [{', '.join(label(r, BAR_LABEL) for r, _, _ in rows)}]",
            f'    y-axis "severity (1 = edge, over 1 fails)" 0 --> {max(1.0, max(values)):g}',
            f"    bar [{', '.join(f'{v:g}' for v in values)}]",
        ]
    )
    return fence, "; ".join(_bar_words(escape(r), v, n, BUDGET_CAP) for r, v, n in rows)


def _bar_words(runner: str, value: float, failing: int, cap: float) -> str:
    """ "nvidia-h100 5.15 (drawn at 2), 2 contracts failing"."""
    shown = "∞" if value == math.inf else f"{value:.3g}"
    drawn = f" (drawn at {cap:g})" if value > cap else ""
    fails = f", {failing} contract{'s' if failing != 1 else ''} failing" if failing else ""
    return f"{runner} {shown}{drawn}{fails}"


def k_curve_chart(comparison: Comparison, escape: Callable[[str], str] = str) -> tuple[str, str]:
    """Line per runner of log10(error) against K for the contract with the widest coverage, each in its
    palette colour.

    Mermaid's xychart has no legend, so the key (``colour_key``: colours, runners, coinciding lines) is
    returned for a caption, runner names through ``escape``.
    """
    contract, curves, ks = _pick_contract(comparison)
    if not curves:
        return "", ""
    axis = error_axis(e for c in curves for k, e in c.points if k in ks)
    floor = " (zero at the floor)" if axis.zeros or axis.clamped else ""
    points = [_log_points(c, ks, axis) for c in curves]
    lines = [
        palette_init(len(curves)),
        "xychart-beta",
        f"    title {label(f'{contract}: log10 error against reduction length K', 80)}",
        f'    x-axis "K" [{", ".join(label(f"{k:g}") for k in ks)}]',
        f'    y-axis "log10 error{floor}" {math.log10(axis.lo):g} --> {math.log10(axis.hi):g}',
    ]
    lines += [f"    line [{', '.join(p)}]" for p in points]
    return _fence(lines), colour_key([escape(c.runner) for c in curves], [tuple(p) for p in points])


def _pick_contract(comparison: Comparison) -> tuple[str, list[KCurve], list[float]]:
    best: tuple[tuple[int, int], str, list[KCurve], list[float]] = ((0, 0), "", [], [])
    for contract in sorted({c.contract_id for c in comparison.curves}):
        curves = [c for c in comparison.curves if c.contract_id == contract][:MAX_SERIES]
        ks = sorted(set.intersection(*(set(k for k, _ in c.points) for c in curves)))
        score = (len(curves), len(ks)) if len(ks) >= 2 else (0, 0)
        if score > best[0]:
            best = (score, contract, curves, ks)
    return best[1], best[2], best[3]


def _log_points(curve: KCurve, ks: list[float], axis: LogAxis) -> list[str]:
    """log10 of each error, a zero or tinier one at the axis floor (not at -300)."""
    points = dict(curve.points)
    return [f"{math.log10(axis.place(points[k])):.3g}" for k in ks]


def _fence(lines: list[str]) -> str:
    return "\n".join(["```mermaid", *lines, "```"])
