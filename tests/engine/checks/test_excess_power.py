"""The sensitivity gate's power (issue 17): torch's own result plus unbiased noise at 2x its error fails, for
the main families in fp32, bf16 and fp16, on every seed; correct kernels in other orders (tree, blocked,
tiled, online, Liger-style) pass on every seed; a sequential order fails by default, naming itself, and
passes when the contract declares it (docs/sensitivity.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.contracts.load import load_project
from kcgate.devices.cpu import CpuBackend
from kcgate.engine import sensitivity
from kcgate.engine.case import execute_case
from kcgate.engine.trial import Trial
from kcgate.errors import ContractsError
from kcgate.numerics.ops import OPS
from kcgate.plan import make_plan
from tests.conftest import ROOT
from tests.engine.test_sensitivity import CONTRACT as SUM_CONTRACT
from tests.engine.test_sensitivity import _excess as excess_of
from tests.testing.kernels import excess as k

SEEDS = range(12)
NOISY = ["matmul", "linear", "sum", "softmax", "logsumexp", "layernorm", "rmsnorm"]


def _measure(  # type: ignore[no-untyped-def]
    op: str, kernel, dtype: str, shape: tuple[int, ...], seed: int, reference: str = "composite"
) -> tuple[Trial, sensitivity.Excess]:
    trial, e = excess_of(op, kernel, dtype, shape, seed, reference=reference)
    assert e is not None
    return trial, e


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("family", NOISY)
@pytest.mark.slow  # a multi-seed sweep (the full suite runs it)
def test_torch_plus_noise_at_2x_its_error_fails_on_every_seed(family: str, dtype: str) -> None:
    """In fp32 the bound passes it (budget <= 1) and the gate alone fails it: its rms is √5 ≈ 2.24x torch's,
    measured 1.8-3.0 at 64 outputs (sum, logsumexp), 2.1-2.4 at 4096+. fp32 softmax has a correct
    formulation less accurate than that (``exp(x − logsumexp x)``, 2.5x torch's), so its rms statistic
    cannot tell the noise from it; the max statistic does (Gaussian tails, where rounding errors are
    bounded: 1.95-2.5x). In bf16/fp16 the bound already fails it (u_out·|y| is tight), or the gate does."""
    kernel = getattr(k, f"noise_2x_{family}")
    for seed in SEEDS:
        trial, e = _measure(family, kernel, dtype, OPS[family].default_shapes[0], seed)
        budget = trial.metrics.budget_used
        if dtype == "float32":
            assert budget is not None and budget <= 1.0, f"seed {seed}: the bound alone fails it ({budget})"
            assert e.ratio > 1.0, f"seed {seed}: {e}"
            assert e.rms_ratio > 1.5 or (family == "softmax" and e.max_ratio > 1.5), f"seed {seed}: {e}"
        else:
            assert (budget is None or budget > 1.0) or e.ratio > 1.0, f"seed {seed}: {e}"


def test_against_the_sequential_model_the_same_noise_passes() -> None:
    """The gate before issue 17's last gap: a sequential accumulator's error as the floor, 6-11x torch's for
    a sum of n = 4096, so 2x torch's noise passed. The test above would fail against it."""
    for seed in range(3):
        _, e = _measure("sum", k.noise_2x_sum, "float32", (64, 4096), seed, "sequential")
        assert e.ratio < 1.0, f"seed {seed}: {e}"


@pytest.mark.parametrize(
    ("op", "kernel", "shape"),
    [
        ("sum", k.tree_sum, (64, 4096)),
        ("sum", k.blocked_sum_1024, (64, 4096)),
        ("sum", k.blocked_sum_128, (64, 4096)),
        ("sum", k.blocked_sum_1024, (16, 100_000)),
        ("matmul", k.tiled_matmul_32, (64, 1024, 64)),
        ("matmul", k.tiled_matmul_32, (33, 257, 65)),
        ("matmul", k.split_k_matmul, (64, 1024, 64)),
        ("softmax", k.liger_softmax, (64, 1024)),
        ("softmax", k.online_softmax, (64, 1024)),
        ("softmax", k.online_softmax, (16, 8192)),
        ("layernorm", k.tree_layernorm, (64, 1024)),
        ("rmsnorm", k.blocked_rmsnorm, (64, 1024)),
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.slow
def test_correct_kernels_in_other_orders_pass_on_every_seed(op: str, kernel, shape, dtype: str) -> None:  # type: ignore[no-untyped-def]
    """Measured worst rms ratios (12 seeds, fp32): 1.22 (blocks of 128, n = 4096), 1.12 (two-pass tree
    layernorm), ≤ 1.06 for the others; bf16 ≤ 1.0 (the output rounding dominates)."""
    for seed in SEEDS:
        trial, e = _measure(op, kernel, dtype, shape, seed)
        assert trial.metrics.budget_used is not None and trial.metrics.budget_used <= 1.0
        assert e.ratio <= 1.0, f"seed {seed}: {e}"


@pytest.mark.parametrize(
    ("op", "kernel", "shape"),
    [
        ("sum", k.sequential_sum, (64, 4096)),
        ("matmul", k.sequential_matmul, (64, 1024, 64)),
    ],
)
def test_a_sequential_order_fails_by_default_and_says_how_to_declare_it(op: str, kernel, shape) -> None:  # type: ignore[no-untyped-def]
    """Left to right over K in fp32: 2.0x torch's error (matmul, K = 1024), 6-11x (sum, n = 4096)."""
    for seed in range(3):
        _, e = _measure(op, kernel, "float32", shape, seed)
        assert e.ratio > 1.0 and e.sequential_rms <= sensitivity.SEQ_HINT, f"seed {seed}: {e}"
        assert 'excess_reference = "sequential"' in e.summary()
        _, declared = _measure(op, kernel, "float32", shape, seed, "sequential")
        assert declared.ratio <= 0.9 and declared.order_hint() == ""


def test_noise_far_beyond_a_sequential_order_gives_no_order_hint() -> None:
    _, e = _measure("sum", k.sum_offsets, "float32", (8, 100_000), 0)
    assert e.ratio > 100 and e.order_hint() == ""


def _project(tmp_path: Path, extra: str):  # type: ignore[no-untyped-def]
    f = tmp_path / "c.toml"
    f.write_text(SUM_CONTRACT.format(root=ROOT, kernel="blocked_sum", extra=extra))
    return load_project(f)


def test_the_contract_declares_a_sequential_reference(tmp_path: Path) -> None:
    """Blocks of 100 summed left to right (1000 sequential adds at n = 1e5): 1.3-3.3x torch's error."""
    default = _project(tmp_path, "")
    (case,) = make_plan(default, 1, {})
    r = execute_case(default, case, CpuBackend())
    assert r.status == "fail" and r.signature is not None and r.signature.cause == "excess-error"
    assert 'excess_reference = "sequential"' in r.message
    declared = _project(tmp_path, 'tolerance = { excess_reference = "sequential" }')
    assert declared.contracts[0].tolerance.excess_reference == "sequential"
    r = execute_case(declared, case, CpuBackend())
    assert r.status == "pass", r.message


def test_an_unknown_reference_is_reported_with_line_and_fix(tmp_path: Path) -> None:
    with pytest.raises(ContractsError) as info:
        _project(tmp_path, 'tolerance = { excess_reference = "sequentail" }')
    (p,) = info.value.problems
    assert p.line == 12 and p.where.endswith("tolerance.excess_reference") and "sequential" in p.fix
