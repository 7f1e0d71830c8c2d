"""Custom ops end to end (kcgate run, kernels in a worker process): no tolerance written, the bound derived
from the reference; inputs named from the reference; a boundary shape the reference rejects is refused with
the constraint to declare, never blamed on the kernel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import kcgate

# The kernels under their own import string: a reference is never the kernel's own (#54).
KK_KERNELS = "from kk import *  # noqa: F403\n"
KERNELS = """
import torch

def gen(shape, dtype, g):
    x = torch.randn(shape, generator=g).to(dtype)
    return x, (torch.randn(shape[-1:], generator=g) * 0.5 + 1).to(dtype)

def ref(x, weight):  # Gemma-style RMSNorm: fp32 throughout, one cast at the end
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)

def good(x, weight):  # vLLM's formulation: normalised in fp32, cast, then times the weight in bf16
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * weight

def bf16_variance(x, weight):  # the sum of squares accumulated in the input dtype, left to right
    sq, acc = x.pow(2), torch.zeros(x.shape[0], 1, dtype=x.dtype)
    for i in range(x.shape[-1]):
        acc = acc + sq[:, i : i + 1]
    h = x.float() * torch.rsqrt(acc.float() / x.shape[-1] + 1e-6)
    return (h * weight.float()).to(x.dtype)

def pairs_gen(shape, dtype, g):  # needs an even last dimension (it views pairs)
    x = torch.randn(shape, generator=g).to(dtype)
    x.view(*shape[:-1], shape[-1] // 2, 2)
    if shape[-1] % 2:
        raise ValueError("last dimension must be even")
    return (x,)

def pairs_ref(x):
    return x.view(*x.shape[:-1], x.shape[-1] // 2, 2).sum(-1)

def pairs(x):
    return x.float().view(*x.shape[:-1], x.shape[-1] // 2, 2).sum(-1).to(x.dtype)
"""


def _project(tmp: Path, kernel: str, gen: str = "gen", ref: str = "ref", extra: str = "") -> Path:
    (tmp / "kk.py").write_text(KERNELS)
    (tmp / "kk_kernels.py").write_text(KK_KERNELS)
    p = tmp / "contracts.toml"
    p.write_text(
        f'[project]\npaths = ["."]\n\n[[contract]]\nid = "c"\nclass = "C-PRC-01"\nop = "custom"\n'
        f'kernel = "kk_kernels:{kernel}"\nreference = "kk:{ref}"\ninputs = "kk:{gen}"\ndtypes = ["bfloat16"]\n'
        f"shapes = [[8, 1024]]\n{extra}\n"
    )
    return p


def _results(tmp: Path) -> list[dict]:  # type: ignore[type-arg]
    data = json.loads((tmp / "out.json").read_text())
    return [dict(zip(data["case_fields"], row)) for row in data["cases"]]


@pytest.mark.slow
def test_a_tolerance_less_custom_contract_passes_a_correct_kernel_and_fails_a_bf16_variance(
    tmp_path: Path,
) -> None:
    for kernel, want in (("good", "pass"), ("bf16_variance", "fail")):
        d = tmp_path / kernel
        d.mkdir()
        proc = kcgate(
            "run", "-c", str(_project(d, kernel)), "--results", str(d / "out.json"), cwd=d, timeout=600
        )
        assert proc.returncode in (0, 1), proc.stderr
        assert {c["status"] for c in _results(d)} == {want}, proc.stdout


@pytest.mark.slow
def test_a_boundary_shape_the_generator_rejects_is_refused_with_the_constraint(tmp_path: Path) -> None:
    p = _project(tmp_path, "pairs", gen="pairs_gen", ref="pairs_ref")
    proc = kcgate("run", "-c", str(p), "--results", str(tmp_path / "out.json"), cwd=tmp_path, timeout=600)
    cases = _results(tmp_path)
    refused = [c for c in cases if c["status"] == "refused"]
    assert refused and all("shape_constraints" in c["message"] for c in refused), proc.stdout
    assert {c["status"] for c in cases} == {"pass", "refused"}, proc.stdout
