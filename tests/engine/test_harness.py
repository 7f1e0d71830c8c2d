"""Harness integrity with provided output buffers: NaN prefill, canaries, poisoned input guard bands."""

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
id = "mm-out"
class = "C-PRC-01"
kernel = "tests.testing.kernels.outbuf:{kernel}"
op = "matmul"
call = "out"
shapes = [[8, 64, 8]]
protocol = {{ seeds = 1, trials = 1 }}
"""


def _run(tmp_path: Path, kernel: str):  # type: ignore[no-untyped-def]
    f = tmp_path / f"{kernel}.toml"
    f.write_text(CONTRACT.format(root=ROOT, kernel=kernel))
    project = load_project(f)
    (case,) = make_plan(project, 1, {})
    return execute_case(project, case, CpuBackend())


def test_kernel_writing_its_out_buffer_passes(tmp_path: Path) -> None:
    result = _run(tmp_path, "good")
    assert result.status == "pass", result.message


def test_unwritten_output_stays_nan_and_fails(tmp_path: Path) -> None:
    result = _run(tmp_path, "lazy")
    assert result.status == "fail" and result.metrics.budget_used == float("inf")  # NaN against a number
    assert result.metrics.mismatches == 8  # exactly the unwritten row


@pytest.mark.parametrize("kernel", ["overrun"])
def test_write_past_the_end_hits_the_canary(tmp_path: Path, kernel: str) -> None:
    result = _run(tmp_path, kernel)
    assert result.status == "fail" and result.signature is not None
    assert result.signature.cause == "out-of-bounds", result.message


def test_read_past_the_end_reads_poison(tmp_path: Path) -> None:
    result = _run(tmp_path, "overread")
    assert result.status == "fail", result.message


def test_freivalds_unit_roundoff_knows_formats_without_a_tensor_dtype() -> None:
    import torch

    from kcgate.numerics.oracles.freivalds import unit_roundoff

    assert unit_roundoff("tfloat32") == 2.0**-11
    assert unit_roundoff(torch.bfloat16) == 2.0**-8 and unit_roundoff("float32") == 2.0**-24


def test_an_output_equal_by_chance_within_its_rounding_is_not_stale(tmp_path: Path) -> None:
    """A bf16 mean of large-mean rows is one value per row at a spacing of 64 while the oracle moves by ~0.02:
    every trial's output equals the first's, and a correct kernel could return nothing else. The repo's own
    cross-entropy-bf16 contract (a scalar mean loss) failed stale-output this way on seeds 3 and 6."""
    from tests.engine.test_backward import contract, run_contract

    body = contract("torch:mean", "mean", [4, 4096], "bfloat16").replace('"both"', '"forward"')
    body += '\ndistribution = "large-mean"\ncall = { kwargs = { dim = -1 } }'
    (r,) = run_contract(tmp_path, body)
    assert r.status == "pass", (r.message, r.metrics)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16", "int64"])
@pytest.mark.parametrize("where", [None, 0, 15, -16, -1])
def test_a_write_into_either_guard_band_is_seen_in_every_dtype(dtype: str, where: int | None) -> None:
    """The numpy path (CPU fp16/32/64) and the torch path (bf16, indices) read both bands, every element."""
    import torch

    from kcgate.engine.harness import _guarded, _margins_intact

    t = torch.arange(5).to(getattr(torch, dtype))
    buf, view = _guarded(t, 16, "cpu")
    assert torch.equal(view, t) and buf.numel() == 37
    if where is not None:
        buf[where] = 3
    assert _margins_intact(buf, 16) is (where is None)
