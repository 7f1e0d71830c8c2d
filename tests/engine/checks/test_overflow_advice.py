"""overflow-nan's advice fits where the NaN is: a softmax with a stable forward and a backward that
recomputes exp(x) is told about its backward, not to "subtract the row max before exp" (issue 17)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.contracts.load import load_project
from kcgate.devices.cpu import CpuBackend
from kcgate.engine.case import execute_case
from kcgate.plan import make_plan
from tests.conftest import ROOT

CONTRACT = """
[project]
paths = ["{root}"]

[[contract]]
id = "softmax-grad"
class = "C-PRC-01"
kernel = "{kernel}"
op = "softmax"
direction = "{direction}"
distribution = "large-mean"
shapes = [[16, 256]]
protocol = {{ seeds = 1, trials = 2 }}
"""


def _run(tmp_path: Path, kernel: str, direction: str):  # type: ignore[no-untyped-def]
    f = tmp_path / "c.toml"
    f.write_text(CONTRACT.format(root=ROOT, kernel=kernel, direction=direction))
    project = load_project(f)
    (case,) = make_plan(project, 1, {})
    return execute_case(project, case, CpuBackend())


@pytest.mark.slow
def test_a_nan_in_the_gradient_gets_the_backwards_advice(tmp_path: Path) -> None:
    r = _run(tmp_path, "tests.testing.kernels.overflow_grad:softmax", "backward")
    assert r.status == "fail" and r.signature is not None, r.message
    assert r.signature.cause == "overflow-nan", r.signature
    assert "in the backward" in r.signature.summary and "row max before exp" not in r.signature.summary


def test_torchs_softmax_backward_passes_on_the_same_inputs(tmp_path: Path) -> None:
    r = _run(tmp_path, "kcgate.kernels.builtin:softmax", "backward")
    assert r.status == "pass", r.message
