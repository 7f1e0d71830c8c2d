"""The output of several that decided a case is named by every renderer that names a deciding gradient:
the console's budget column, the violation text and JUnit's details and properties."""

from __future__ import annotations

from kcgate.render.console import _row
from kcgate.render.junit import _details, _properties
from kcgate.render.violation import render_violation
from kcgate.results.model import CaseResult, Metrics, Signature

OUTS = (("out_budget", 40.0), ("out_budget.out", 0.2), ("out_budget.residual", 40.0))
SIG = Signature("wrong-semantics", "output 'residual' equals input 'residual'", (("output", "residual"),))


def _case(extra: tuple[tuple[str, float], ...], sig: Signature | None = SIG) -> CaseResult:
    m = Metrics(40.0, mismatches=3, elements=8, extra=extra)
    return CaseResult("c/bf16/4x8/s0", "c", "C-PRC-01", "custom", "bfloat16", (4, 8), 1, "fail", m, sig)


def test_the_deciding_output_is_named_in_console_violation_and_junit() -> None:
    c = _case(OUTS)
    assert c.metrics.worst_output == "residual"
    assert "(output residual)" in _row(c)[3]
    assert "worst tensor: output 'residual'" in render_violation(c)
    assert "output=residual" in _details(c) and _properties(c)["output"] == "residual"


def test_a_deciding_gradient_takes_precedence_over_the_outputs() -> None:
    c = _case((*OUTS, ("grad_budget.x", 90.0)), Signature("scaled-output", "scaled by 2"))
    assert c.metrics.worst_grad == "x" and c.metrics.worst_output == ""
    assert "(output" not in _row(c)[3] and "output" not in _properties(c) and _properties(c)["grad"] == "x"


def test_the_tensor_the_signature_names_wins_over_the_largest_budget() -> None:
    """A NaN forward loss of a backward case (issue 56): the forward output failed, whatever gradient has the
    largest finite budget; JUnit's properties and the violation text say the forward output."""
    sig = Signature("nan-pattern", "forward output: 1 NaN/Inf result(s)", (("tensor", "forward output"),))
    c = _case((("out_budget", 0.5), ("grad_budget.log_q", 0.9)), sig)
    assert c.metrics.worst_grad == "log_q"
    assert c.tensor == ("tensor", "forward output") and _properties(c)["tensor"] == "forward output"
    assert "grad" not in _properties(c) and "worst tensor: the forward output" in render_violation(c)
    missing = Signature("missing-gradient", "gradient of 'y_true': no gradient", (("grad", "y_true"),))
    c = _case((("out_budget", 0.1), ("grad_budget.y_pred", 0.9), ("grad_budget.y_true", 0.0)), missing)
    assert _properties(c)["grad"] == "y_true" and "gradient of input 'y_true'" in render_violation(c)
