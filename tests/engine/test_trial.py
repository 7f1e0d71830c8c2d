"""The trial record's helpers that every check shares."""

from __future__ import annotations

import math

from kcgate.engine.trial import Trial, severity
from kcgate.results.model import Metrics


def _trial(budget: float | None) -> Trial:
    return Trial(shape=(1,), inputs=(), metrics=Metrics(budget_used=budget))


def test_the_worst_trial_is_the_largest_budget_and_an_exact_one_is_the_least() -> None:
    """An exact trial's budget (0.0) ranks lowest, an unmeasured one (None) highest: ``budget or inf`` had
    ranked the exact trial with the unmeasured, so a failure's diagnosis could read a trial with no error."""
    ts = [_trial(0.0), _trial(3.5), _trial(0.2)]
    assert max(ts, key=severity).metrics.budget_used == 3.5
    assert severity(_trial(None)) == math.inf and severity(_trial(0.0)) == 0.0
    assert max([_trial(0.0), _trial(None)], key=severity).metrics.budget_used is None
