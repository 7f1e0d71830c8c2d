"""A Case crosses to the worker as JSON and comes back equal (shape a tuple again)."""

from __future__ import annotations

import json

from kcgate.plan import Case


def test_case_round_trips_through_json() -> None:
    case = Case(
        "c/float32/2x3x4/s1", "c", "C-PRC-01", "matmul", "float32", (2, 3, 4), 1, 99, line=7, held_out=3
    )
    wire = json.loads(json.dumps(case.to_json()))
    assert wire["shape"] == [2, 3, 4]
    assert Case.from_json(wire) == case
