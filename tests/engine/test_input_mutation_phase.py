"""An input overwritten during the forward is reported on the forward, never as a gradient's finding.

Liger's cross-entropy writes its gradient into the logits during the forward; kcgate said "gradient of
'logits': the kernel modified its inputs". The inputs are now checked after the forward call and again after
the backward, and the phase that wrote is the one named.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.test_backward import contract, run_contract


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_the_phase_that_overwrote_the_input_is_named(tmp_path: Path, phase: str) -> None:
    kernel = f"tests.testing.kernels.backward:softmax_writes_x_in_{phase}"
    (case,) = run_contract(tmp_path, contract(kernel, "softmax", [8, 64], "float32"))
    assert case.status == "fail" and case.signature is not None, case.message
    assert case.signature.cause == "input-mutation"
    assert case.signature.summary == f"the kernel modified its inputs during the {phase}"
    assert (
        f"the {phase} wrote into input 'x'; if the kernel does so by design, declare mutates = [\"x\"]"
        in (case.message)
    )
    assert ("phase", phase) in case.signature.evidence
    assert "gradient of" not in case.signature.summary  # an overwrite is named by its phase, not a gradient


def test_a_declared_overwrite_is_no_finding_and_the_oracle_reads_the_drawn_inputs(tmp_path: Path) -> None:
    """``mutates = ["x"]``: a softmax that stores its output in x (as Liger's cross-entropy stores its gradient
    in the logits) passes forward and backward; the oracle and the gradients' references read x as drawn,
    not the softmax it was overwritten with (softmax(y) is not y)."""
    kernel = "tests.testing.kernels.backward:softmax_writes_x_in_forward"
    for seedless in run_contract(tmp_path, contract(kernel, "softmax", [8, 64], "float32", mutates='["x"]')):
        assert seedless.status == "pass", seedless.message


def _forward(kernel: str) -> str:
    return (
        f'class = "C-PRC-01"\nkernel = "tests.testing.kernels.backward:{kernel}"\nop = "matmul"\n'
        'shapes = [[16, 32, 8]]\nprotocol = { seeds = 1 }\nmutates = ["a"]'
    )


def test_an_undeclared_overwrite_is_still_named(tmp_path: Path) -> None:
    """Forward only: a product that zeroes ``a`` after computing passes with ``a`` declared (its backward would
    read the zeroed ``a``, which the zero-gradient check names); zeroing ``b`` too is still input-mutation."""
    (ok,) = run_contract(tmp_path, _forward("matmul_overwrites_a"))
    assert ok.status == "pass", ok.message
    (bad,) = run_contract(tmp_path, _forward("matmul_overwrites_a_and_b"))
    assert bad.status == "fail" and bad.signature is not None and bad.signature.cause == "input-mutation"
    assert "wrote into input 'b'; if" in bad.message and 'declare mutates = ["a", "b"]' in bad.message, (
        bad.message
    )


def test_mutates_names_an_input_of_the_op(tmp_path: Path) -> None:
    from kcgate.contracts.load import load_project
    from kcgate.errors import ContractsError

    f = tmp_path / "contracts.toml"
    f.write_text(
        '[project]\n\n[[contract]]\nid = "c"\nclass = "C-PRC-01"\nkernel = "torch:matmul"\nop = "matmul"\n'
        'mutates = ["logits"]\n'
    )
    with pytest.raises(ContractsError) as err:
        load_project(f)
    (p,) = err.value.problems
    assert p.where.endswith("mutates[0]") and p.line == 8, p
    assert p.message == "'logits' is not an input of op 'matmul'" and "a, b" in p.fix


def test_an_overwrite_in_the_backward_is_not_named_after_a_gradient() -> None:
    """A backward case's signature is prefixed with the gradient that decided it; an input-mutation names the
    phase the kernel wrote in instead (Liger's swiglu read "gradient of 'b': the kernel modified its inputs")."""
    from kcgate.engine.case import _with_grad
    from kcgate.results.model import Metrics, Signature

    m = Metrics(budget_used=0.4, extra=(("grad_budget.b", 0.4), ("out_budget", 0.1)))
    assert m.worst_grad == "b"
    wrote = Signature(
        "input-mutation", "the kernel modified its inputs during the backward", (("phase", "backward"),)
    )
    assert _with_grad(wrote, m) == wrote
    other = Signature("garbage", "garbage", ())
    assert _with_grad(other, m).summary == "gradient of 'b': garbage"
