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
    assert f"the {phase} wrote into input 'x'" in case.message
    assert ("phase", phase) in case.signature.evidence
    if phase == "forward":
        assert "gradient of" not in case.signature.summary + case.message
