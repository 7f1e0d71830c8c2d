"""The same accumulator bug gets the same name on every seed (issue 17): tests/testing/kernels/accumulate.bf16_blocks
(16x2048x16 fp32 matmul keeping its running sum in bf16 across K-blocks of 128) was low-precision-accumulator
on 13 of 20 seeds and noise on 7, the K sweep's power-law slope (0.28-0.37) sitting on the old fit's limit
(0.3). The fit now models the rounding interval (kcgate.engine.accumulator.fit_blocked), and the outputs' grid says
the running sum is bf16."""

from __future__ import annotations

import pytest

import kcgate
from tests.testing.kernels import accumulate


@pytest.mark.slow
def test_bf16_blocks_is_one_name_on_20_seeds() -> None:
    names = []
    for seed in range(20):
        result = kcgate.check(
            accumulate.bf16_blocks,
            op="matmul",
            cls="C-PRC-01",
            id="gemm",
            shapes=[[16, 2048, 16]],
            seed=seed,
            protocol={"seeds": 1, "trials": 2},
        )
        (case,) = result.cases
        s = case.signature
        assert case.status == "fail" and s is not None, case.message
        ev = dict(s.evidence)
        names.append((s.cause, ev.get("nearest")))
        assert ev.get("block") in (64.0, 128.0, 256.0), (seed, s)
    assert set(names) == {("low-precision-accumulator", "bf16")}, names


def test_a_running_fp16_sum_is_one_name_at_its_boundary_shape() -> None:
    """Issue 48's one bug, one name: an fp16 running row sum is low-precision-accumulator at 32 x 4096 and was
    exceeds-bound at the boundary's 3 x 4093, the K sweep measured on 3 outputs per length (errors 2e-4, 7e-4,
    4e-4: no curve). The sweep repeats each length until it holds 32 output elements, pooled per length."""
    from dataclasses import replace

    from kcgate.engine.checks.c_prc_01 import _repeats
    from tests.testing.faults import naming_sets as NS
    from tests.testing.faults.semantic import diagnose

    bug = next(n.bug for n in NS.HELD_OUT if n.bug.id == "sum-fp16-running")
    for shape in ((3, 4093), (32, 4096)):
        f = diagnose(replace(bug, shape=shape), 0)
        assert f.signature is not None and f.signature.cause == "low-precision-accumulator", f.message
        assert "fp16" in f.signature.summary, f.signature.summary
    assert _repeats([]) == 1
