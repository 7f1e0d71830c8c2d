"""Error axes: a zero or a tiny outlier never stretches the axis; it is drawn at the floor and counted."""

from __future__ import annotations

import math

import pytest

from kcgate.gate.compare import Comparison, KCurve
from kcgate.render.axes import MAX_DECADES, error_axis
from kcgate.render.mermaid import k_curve_chart


def test_a_zero_error_sits_at_the_floor_not_at_1e_minus_300() -> None:
    axis = error_axis([2e-6, 3e-5, 0.0, 4e-4])
    assert (axis.lo, axis.hi, axis.zeros, axis.clamped) == (1e-6, 1e-3, 1, 0)
    assert axis.place(0.0) == 1e-6 and axis.at_floor(0.0) and not axis.at_floor(2e-6)


def test_a_tiny_outlier_is_clamped_to_at_most_max_decades_below_the_top() -> None:
    axis = error_axis([1e-314, 5e-7, 2e-3])
    assert axis.hi == pytest.approx(1e-2) and axis.lo == pytest.approx(1e-2 * 10.0**-MAX_DECADES)
    assert axis.clamped == 1 and axis.place(1e-314) == axis.lo


def test_nan_inf_and_negative_values_are_ignored_and_all_zero_has_a_default() -> None:
    assert error_axis([math.nan, math.inf, -1.0, 1e-4]).hi == pytest.approx(1e-4)
    axis = error_axis([0.0, 0.0])
    assert axis.zeros == 2 and 0 < axis.lo < axis.hi
    one = error_axis([1e-5])
    assert one.lo < 1e-5 <= one.hi


def test_the_mermaid_k_chart_keeps_a_readable_range_with_a_zero() -> None:
    curves = tuple(
        KCurve("sum", r, ((64.0, e0), (4096.0, e1)))
        for r, e0, e1 in (("a", 0.0, 1e-6), ("b", 1e-7, 2e-6), ("c", 1e-7, 1e-6))
    )
    chart, key = k_curve_chart(Comparison(("a", "b", "c"), ("sum",), (), (), curves, ()))
    assert key == "blue a, orange b, purple c; a and c coincide (one line drawn over the other)"
    assert 'y-axis "log10 error (zero at the floor)" -7 --> -5' in chart
    assert "line [-7, -6]" in chart and "-300" not in chart


def test_the_png_curve_panel_uses_the_clamped_axis() -> None:
    pytest.importorskip("matplotlib")
    from kcgate.render.plot import EDGE_ROOM, _curves, _pyplot

    curves = (
        KCurve("sum", "a", ((64.0, 0.0), (1024.0, 1e-6), (4096.0, 2e-6))),
        KCurve("sum", "b", ((64.0, 1e-7), (1024.0, 1e-314), (4096.0, 3e-6))),
    )
    fig, ax = _pyplot().subplots()
    _curves(ax, Comparison(("a", "b"), ("sum",), (), (), curves, ()))
    assert ax.get_ylim() == pytest.approx((1e-13 / EDGE_ROOM, 1e-5 * EDGE_ROOM))  # room for a marker
    floor_marks = [line for line in ax.get_lines() if line.get_marker() == "v"]
    assert [list(m.get_ydata()) for m in floor_marks] == [[1e-13], [1e-13]]
    assert "1 exact (zero), 1 below 1e-13" in ax.texts[0].get_text()
