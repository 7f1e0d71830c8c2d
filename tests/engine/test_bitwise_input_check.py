"""The input-mutation and stale-output checks compare bit patterns: NaN is not 0.5 (#44)."""

from __future__ import annotations

from pathlib import Path

import torch

from kcgate.engine.harness import _changed
from tests.engine.test_backward import run_contract


def test_nan_written_over_a_half_is_a_change() -> None:
    snap = torch.tensor([0.5, 1.0], dtype=torch.bfloat16)
    assert _changed(torch.tensor([float("nan"), 1.0], dtype=torch.bfloat16), snap)


def test_a_negative_zero_over_a_zero_and_another_nan_payload_are_changes() -> None:
    assert _changed(torch.tensor([-0.0]), torch.tensor([0.0]))
    nan = torch.tensor([float("nan")])
    other = nan.view(torch.int32).add(1).view(torch.float32)
    assert _changed(other, nan)
    assert not _changed(nan.clone(), nan)  # the same NaN, untouched


def test_strided_and_odd_dtypes_compare_without_copies_failing() -> None:
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    assert not _changed(base.t(), base.t().clone())
    assert not _changed(torch.tensor([True, False]), torch.tensor([True, False]))
    assert _changed(torch.tensor([1 + 2j]), torch.tensor([1 + 3j]))


def test_a_bf16_softmax_that_writes_nan_where_x_is_half_fails(tmp_path: Path) -> None:
    body = (
        'class = "C-PRC-01"\nkernel = "tests.testing.kernels.attacks:softmax_nan_where_half"\nop = "softmax"\n'
        'dtypes = ["bfloat16"]\nshapes = [[64, 1024]]\nprotocol = { seeds = 3 }'
    )
    cases = run_contract(tmp_path, body)
    assert cases and all(c.status == "fail" for c in cases), [c.message for c in cases]
    assert all(c.signature is not None and c.signature.cause == "input-mutation" for c in cases)


def test_a_negative_zero_written_into_an_input_is_named(tmp_path: Path) -> None:
    body = (
        'class = "C-PRC-01"\nkernel = "tests.testing.kernels.attacks:matmul_negates_zeros"\nop = "matmul"\n'
        'shapes = [[8, 16, 8]]\nprotocol = { seeds = 1 }\ndistribution = "integers"'
    )
    (case,) = run_contract(tmp_path, body)
    assert case.status == "fail" and case.signature is not None, case.message
    assert case.signature.cause == "input-mutation"


def _stale(*outs: torch.Tensor) -> bool:
    from types import SimpleNamespace

    from kcgate.engine.harness import _stale_check
    from kcgate.engine.trial import Trial

    ctx = SimpleNamespace(previous_outputs=[])  # the one field the check reads and extends
    found = False
    for out in outs:
        trial = Trial(shape=tuple(out.shape), inputs=(), out=out)
        _stale_check(ctx, trial)  # type: ignore[arg-type]
        found = "stale-output" in trial.issues
    return found


def test_a_nan_output_is_not_stale_against_an_earlier_quarter() -> None:
    """NaN was mapped to 0.25 before comparing: [0.25, 1] then [NaN, 1] read as a repeated output."""
    assert not _stale(torch.tensor([0.25, 1.0, 2.0]), torch.tensor([float("nan"), 1.0, 2.0]))


def test_a_repeated_output_with_nan_is_still_stale() -> None:
    out = torch.tensor([float("nan"), 1.0, 2.0])
    assert _stale(out, out.clone())


def test_bitwise_determinism_counts_a_sign_of_zero_as_a_difference() -> None:
    """The budget (ULP keys) failed -0.0 against 0.0 while the message counted 0 differing elements."""
    from kcgate.engine.checks.c_ord_02 import _spread_of
    from kcgate.engine.trial import Trial

    outs = [torch.tensor([0.0, 1.0, float("nan")]), torch.tensor([-0.0, 1.0, float("nan")])]
    ts = [Trial(shape=(3,), inputs=(), out=o) for o in outs]
    budget, differing = _spread_of(ts, "out", "bitwise")
    assert differing == 1 and budget > 1
