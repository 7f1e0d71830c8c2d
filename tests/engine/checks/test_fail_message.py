"""A failing case's message names the output or input gradient that decided it, and every other one over its
bound beside it (kcgate.engine.checks._fail_message; Metrics.parts_over): whichever of them a seed makes
worst, the user reads all that broke."""

from __future__ import annotations

from kcgate.engine.checks import _fail_message
from kcgate.results.model import Metrics


def _metrics(budget: float, **parts: float) -> Metrics:
    extra = {
        "out_budget": parts.pop("forward", budget),
        **{k.replace("__", "."): v for k, v in parts.items()},
    }
    return Metrics(budget_used=budget, mismatches=512, elements=512, extra=tuple(sorted(extra.items())))


def test_the_output_that_decided_is_named_and_the_gradients_over_theirs_follow() -> None:
    m = _metrics(
        9.97e4,
        out_budget__residual=9.97e4,
        out_budget__out=0.08,
        grad_budget__x=8.6e4,
        grad_budget__weight=0.07,
    )
    msg = _fail_message(m)
    assert msg.startswith("error exceeds the allowed bound in output 'residual': budget used 9.97e+04"), msg
    assert msg.endswith("; also over: the gradient of 'x' (8.6e+04)"), msg
    assert "'out'" not in msg and "'weight'" not in msg, msg


def test_a_gradient_that_decided_is_named_and_the_output_over_its_bound_follows() -> None:
    m = _metrics(
        1.02e5,
        forward=9.97e4,
        out_budget__residual=9.97e4,
        out_budget__out=0.08,
        grad_budget__x=1.02e5,
        grad_budget__residual=1.02e5,
    )
    msg = _fail_message(m)
    assert msg.startswith("error exceeds the allowed bound in the gradient of 'x': budget used 1.02e+05"), msg
    assert "also over: the gradient of 'residual' (1.02e+05), output 'residual' (9.97e+04)" in msg, msg


def test_one_output_and_no_gradient_names_nothing_more() -> None:
    msg = _fail_message(Metrics(budget_used=3.0, mismatches=2, elements=8))
    assert msg == "error exceeds the allowed bound: budget used 3 (2 of 8 elements over)"


def test_a_nan_part_counts_as_over() -> None:
    nan = float("nan")
    m = _metrics(nan, forward=nan, out_budget__a=nan, out_budget__b=0.5)
    assert [name for name, _ in m.parts_over] == ["output 'a'"]
