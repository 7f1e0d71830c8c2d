"""The output of several that decided a case is named by every renderer that names a deciding gradient:
the console's budget column, the violation text and JUnit's details and properties."""

from __future__ import annotations

from kcgate.render.console import _row
from kcgate.render.junit import _details, _properties
from kcgate.render.violation import render_violation
from kcgate.results.model import CaseResult, Metrics, Signature

OUTS = (("out_budget", 40.0), ("out_budget.out", 0.2), ("out_budget.residual", 40.0))
SIG = Signature("wrong-semantics", "output 'residual' equals input 'residual'", (("output", "residual"),))


def _case(extra: tuple[tuple[str, float], ...]) -> CaseResult:
    m = Metrics(40.0, mismatches=3, elements=8, extra=extra)
    return CaseResult("c/bf16/4x8/s0", "c", "C-PRC-01", "custom", "bfloat16", (4, 8), 1, "fail", m, SIG)


def test_the_deciding_output_is_named_in_console_violation_and_junit() -> None:
    c = _case(OUTS)
    assert c.metrics.worst_output == "residual"
    assert "(output residual)" in _row(c)[3]
    assert "worst tensor: output 'residual'" in render_violation(c)
    assert "output=residual" in _details(c) and _properties(c)["output"] == "residual"


def test_a_deciding_gradient_takes_precedence_over_the_outputs() -> None:
    c = _case((*OUTS, ("grad_budget.x", 90.0)))
    assert c.metrics.worst_grad == "x" and c.metrics.worst_output == ""
    assert "(output" not in _row(c)[3] and "output" not in _properties(c)
