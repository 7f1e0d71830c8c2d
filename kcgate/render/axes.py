"""Logarithmic error axes that zeros and outliers cannot stretch: the axis spans whole decades from the
largest error down at most MAX_DECADES; an exact (zero) error or a tinier one is drawn at the floor and
marked, never at 1e-300. Pure; shared by ``compare --png`` and the Mermaid K chart."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

MAX_DECADES = 8  # an fp32 error of 1e-7 and an fp16 one of 1e-1 still share a readable axis
EMPTY = (1e-8, 1.0)  # the axis when no error is positive (every case exact)


@dataclass(frozen=True)
class LogAxis:
    lo: float  # the floor: zeros and errors below it are drawn here, marked
    hi: float
    zeros: int  # how many values were exactly zero
    clamped: int  # how many positive values fell below the floor

    def place(self, value: float) -> float:
        """Where a value is drawn: itself, or the floor for a zero or a tinier value."""
        return min(max(value, self.lo), self.hi)

    def at_floor(self, value: float) -> bool:
        return value < self.lo


def error_axis(values: Iterable[float]) -> LogAxis:
    """Whole decades around the positive finite values, at most MAX_DECADES below the largest."""
    finite = [v for v in values if math.isfinite(v) and v >= 0]
    positive = [v for v in finite if v > 0]
    if not positive:
        return LogAxis(EMPTY[0], EMPTY[1], len(finite), 0)
    top = math.ceil(math.log10(max(positive)))
    bottom = max(math.floor(math.log10(min(positive))), top - MAX_DECADES)
    if bottom >= top:
        bottom = top - 1
    lo = 10.0**bottom
    return LogAxis(lo, 10.0**top, len(finite) - len(positive), sum(v < lo for v in positive))
