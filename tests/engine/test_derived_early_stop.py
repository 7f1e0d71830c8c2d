"""A custom case hands the derived bound the kernel's errors, forward and gradients (issue 58): a correct
kernel's derivation stops once its errors fit the full bound's lower bound, a wrong one's draws all 24 samples
and fails as before. In process, as a worker runs a case; the reference counts its own calls."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from kcgate.contracts.load import load_project
from kcgate.devices.cpu import CpuBackend
from kcgate.engine import torch_state
from kcgate.engine.case import execute_case
from kcgate.numerics.derived import SAMPLES
from kcgate.plan import make_plan

FNS = """
import torch

CALLS = [0]

def make_inputs(shape, dtype, generator):
    x = torch.randn(shape, generator=generator).to(dtype)
    return x, (torch.randn(shape[-1:], generator=generator) * 0.5 + 1).to(dtype)

def rms_norm_ref(x, weight):
    CALLS[0] += 1
    return rms_norm(x, weight)

def rms_norm(x, weight):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return h.to(x.dtype) * weight

def off(x, weight):  # the output 0.5% high: far outside an fp32 rounding
    return rms_norm(x, weight) * 1.005
"""
TRIALS = (
    2  # C-PRC-01's; each runs the oracle, a forward bound, the reference's gradients and a gradient bound
)
FULL = TRIALS * (
    2 + 2 * (1 + SAMPLES)
)  # reference calls with every bound at all its samples (a plan run each)


def _run(tmp: Path, kernel: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    name = f"kk_early_{kernel}"
    (tmp / f"{name}.py").write_text(FNS)
    monkeypatch.syspath_prepend(str(tmp))
    (tmp / "c.toml").write_text(
        '[project]\nname = "early"\n\n[[contract]]\nid = "c"\nclass = "C-PRC-01"\nop = "custom"\n'
        f'kernel = "{name}:{kernel}"\ninputs = "{name}:make_inputs"\nreference = "{name}:rms_norm_ref"\n'
        'dtypes = ["float32"]\nshapes = [[8, 512]]\ndirection = "both"\n'
        "protocol = { seeds = 1, boundary = false, probes = false }\n"
    )
    torch_state.capture()  # the state this case starts from, as a worker captures it
    project = load_project(tmp / "c.toml")
    (case,) = make_plan(project, 1, {})
    status = execute_case(project, case, CpuBackend()).status
    calls = importlib.import_module(name).CALLS[0]
    sys.modules.pop(name, None)
    return status, calls


@pytest.mark.slow  # the first custom case imports torch._decomp and torch._dynamo
def test_a_correct_kernel_stops_sampling_early_forward_and_backward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, calls = _run(tmp_path, "rms_norm", monkeypatch)
    assert status == "pass"
    assert calls <= FULL // 2, calls  # 4 of 24 samples a bound for this kernel in fp32


@pytest.mark.slow
def test_a_wrong_kernel_draws_every_sample_and_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    status, calls = _run(tmp_path, "off", monkeypatch)
    assert status == "fail"
    assert calls >= 2 + SAMPLES, calls  # the oracle, then the forward bound's plan run and all its samples
