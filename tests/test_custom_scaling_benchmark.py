"""benchmarks/custom_scaling.py: a custom op and its family twin, timed per case at each size, with the fitted
log-log slope (issue 58)."""

from __future__ import annotations

import math

import pytest

from benchmarks.custom_scaling import main, slope


def test_the_slope_is_the_least_squares_exponent_of_time_in_the_elements() -> None:
    n = [1_000, 4_000, 16_000, 64_000]
    assert slope(n, [3e-4 * v for v in n]) == pytest.approx(1.0)
    assert slope(n, [2.0 * v**0.5 for v in n]) == pytest.approx(0.5)
    # a fit over every size, not the two ends: a slow middle size raises it
    assert slope(n, [1.0, 4.0, 64.0, 64.0]) > math.log(64) / math.log(64)


@pytest.mark.slow
def test_both_contracts_pass_at_every_size_and_each_row_has_both_timings() -> None:
    rows = main(["--sizes", "4x64", "8x128", "--dtypes", "float32", "--seeds", "1"])
    assert [r["elements"] for r in rows] == [256, 1024]
    for r in rows:
        assert r["status"] == ["pass"]
        assert all(r[k] > 0 for k in ("custom", "family", "custom_cpu", "family_cpu"))
