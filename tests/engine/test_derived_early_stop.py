"""A custom case hands the derived bound the kernel's errors, forward and gradients (issue 58): a correct
kernel's derivation stops once its errors fit the full bound's lower bound, a wrong one's draws all 24 samples
and fails as before. In process, as a worker runs a case; the derivation is the real one, only counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kcgate.contracts.load import load_project
from kcgate.devices.cpu import CpuBackend
from kcgate.engine import torch_state
from kcgate.engine.case import execute_case
from kcgate.numerics import derived
from kcgate.numerics.ops import custom
from kcgate.plan import make_plan

FNS = """
import torch

def make_inputs(shape, dtype, generator):
    x = torch.randn(shape, generator=generator).to(dtype)
    return x, (torch.randn(shape[-1:], generator=generator) * 0.5 + 1).to(dtype)

def rms_norm_ref(x, weight):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return h.to(x.dtype) * weight

def off(x, weight):  # the output 0.5% high: far outside an fp32 rounding
    return rms_norm_ref(x, weight) * 1.005
"""


def _run(tmp: Path, kernel: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[tuple[bool, int]]]:
    (tmp / "kk_early.py").write_text(FNS)
    monkeypatch.syspath_prepend(str(tmp))
    (tmp / "c.toml").write_text(
        '[project]\nname = "early"\n\n[[contract]]\nid = "c"\nclass = "C-PRC-01"\nop = "custom"\n'
        f'kernel = "kk_early:{kernel}"\ninputs = "kk_early:make_inputs"\nreference = "kk_early:rms_norm_ref"\n'
        'dtypes = ["float32"]\nshapes = [[8, 512]]\ndirection = "both"\n'
        "protocol = { seeds = 1, boundary = false, probes = false }\n"
    )
    seen: list[tuple[bool, int]] = []

    def counted(*args: Any, **kwargs: Any) -> derived.Derived:
        got = derived.derive(*args, **kwargs)
        seen.append((kwargs.get("errors") is not None, got.samples))
        return got

    monkeypatch.setattr(custom, "derive", counted)
    torch_state.capture()
    project = load_project(tmp / "c.toml")
    (case,) = make_plan(project, 1, {})
    return execute_case(project, case, CpuBackend()).status, seen


@pytest.mark.slow  # the first custom case imports torch._decomp and torch._dynamo
def test_a_correct_kernel_stops_sampling_early_forward_and_backward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, seen = _run(tmp_path, "rms_norm_ref", monkeypatch)
    assert status == "pass"
    assert len(seen) >= 4 and all(
        given for given, _ in seen
    )  # two trials, a forward and a gradient bound each
    assert all(derived.EARLIEST <= n < derived.SAMPLES for _, n in seen), seen


@pytest.mark.slow
def test_a_wrong_kernel_draws_every_sample_and_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    status, seen = _run(tmp_path, "off", monkeypatch)
    assert status == "fail"
    assert seen and seen[0] == (True, derived.SAMPLES)  # the first trial's forward bound: never fits
