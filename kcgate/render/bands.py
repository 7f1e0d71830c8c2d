"""The colours every picture gives a severity (``kcgate.results.severity``): one row per band, one red and
only for failures. The dashboard's grid and charts and ``compare --png`` read this table. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kcgate.results.model import Status

FAIL_RED = "#cf222e"  # failures only: nothing that passed is ever this colour


DARK_INK = "#1f2328"


@dataclass(frozen=True)
class Band:
    """One colour: a result whose status is ``status`` (or a pass, "") and severity up to ``upto``; a
    number written on it is in ``ink`` (at least WCAG AA's 4.5:1 contrast against ``colour``)."""

    name: str
    colour: str
    status: str
    upto: float
    ink: str = DARK_INK


BANDS = (  # first match wins; the legends and the tests read this table
    Band("fails", FAIL_RED, Status.FAIL, math.inf, "#ffffff"),  # dark ink on this red: 2.9:1
    Band("error", "#a371f7", Status.ERROR, math.inf),
    Band("refused by the kernel", "#d0d7de", Status.REFUSED, math.inf),
    Band("passes, at most half the allowance", "#7ee787", "", 0.5),
    Band("passes, near the edge", "#f2cc60", "", 1.0),
)
NO_BUDGET = Band("no result or nothing measured", "#eaeef2", "", math.nan)


def band_of(status: str, severity: float | None) -> Band:
    """The band of a result: by its status when it did not pass, else by its severity (a pass's is at most
    1, so only a failure is ever red)."""
    for b in BANDS:
        if b.status == status or (
            not b.status and status == Status.PASS and severity is not None and severity <= b.upto
        ):
            return b
    return NO_BUDGET
