"""The default tolerance of C-PRC-01 rejects what allclose at bf16 defaults accepts."""

from __future__ import annotations

import pytest
import torch

from kcgate.contracts.load import load_project
from kcgate.devices.cpu import CpuBackend
from kcgate.engine.case import execute_case
from kcgate.plan import make_plan

CONTRACT = """
[project]
paths = ["{root}"]

[[contract]]
id = "gemm"
class = "C-PRC-01"
kernel = "tests.testing.kernels.accumulate:{kernel}"
op = "matmul"
dtypes = ["float32"]
accumulate = "float32"
distribution = "positive"
shapes = [[64, 1024, 64]]
"""


def _run(tmp_path, kernel: str):  # type: ignore[no-untyped-def]
    from tests.conftest import ROOT

    f = tmp_path / f"{kernel}.toml"
    f.write_text(CONTRACT.format(root=ROOT, kernel=kernel))
    project = load_project(f)
    (case, *_) = make_plan(project, 1, {})
    return execute_case(project, case, CpuBackend())


def test_assert_close_at_bf16_defaults_accepts_the_bf16_accumulator() -> None:
    from tests.testing.kernels.accumulate import bf16_blocks

    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(64, 1024, generator=g), torch.rand(1024, 64, generator=g)
    ref = (a.double() @ b.double()).float()
    torch.testing.assert_close(bf16_blocks(a, b), ref, rtol=1.6e-2, atol=1e-5)  # bf16 defaults: accepted
    assert (bf16_blocks(a, b) - ref).abs().max() > 1e-3  # yet clearly not an fp32 accumulator


def test_contract_rejects_the_bf16_accumulator_and_accepts_fp32(tmp_path) -> None:  # type: ignore[no-untyped-def]
    good, bad = _run(tmp_path, "fp32"), _run(tmp_path, "bf16_blocks")
    assert good.status == "pass", good.message
    assert bad.status == "fail", bad.message
    assert bad.metrics.budget_used is not None and bad.metrics.budget_used > 10
    assert good.metrics.budget_used is not None and good.metrics.budget_used < 0.5


def test_a_kernel_returning_zeros_never_passes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert _run(tmp_path, "zeros").status == "fail"


@pytest.mark.slow
def test_freivalds_oracle_in_a_contract_accepts_fp32_and_rejects_bf16_accumulation(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import ROOT

    results = {}
    for kernel in ("fp32", "bf16_blocks"):
        f = tmp_path / f"fv-{kernel}.toml"
        f.write_text(
            CONTRACT.format(root=ROOT, kernel=kernel).replace("[[64, 1024, 64]]", "[[256, 1024, 256]]")
            + 'oracle = "freivalds"\n'
        )
        project = load_project(f)
        (case, *_) = make_plan(project, 1, {})
        results[kernel] = execute_case(project, case, CpuBackend())
    assert results["fp32"].status == "pass", results["fp32"].message
    assert results["bf16_blocks"].status == "fail"
    assert dict(results["fp32"].metrics.extra)["freivalds_k"] >= 1
