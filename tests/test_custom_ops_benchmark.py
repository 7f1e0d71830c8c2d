"""benchmarks/custom_ops.py in its quick mode: on held-out kernels with no tolerance written, the derived bound
raises no false alarm and catches at least as many planted wrong variants as torch.testing.assert_close."""

from __future__ import annotations

import pytest

from benchmarks.custom_ops import main


@pytest.mark.slow
def test_quick_mode_has_no_false_alarm_and_catches_as_much_as_assert_close() -> None:
    stats = main(["--quick"])
    assert stats["cases"] >= 20
    assert stats["kc_alarms"] == []
    caught = sum(kc for _, kc, *_ in stats["catch"].values())
    assert caught >= sum(ac for _, _, ac, *_ in stats["catch"].values())
    # the variance in the input dtype is below the bound; the placement check names it in both bf16 cells
    # (in fp32 the variant is the library kernel bit for bit)
    cells, bound, _, _, _, placed = stats["catch"]["rms_norm: variance in input dtype"]
    assert (cells, bound, placed) == (4, 0, 2)
    # a stale residual output and swapped gate halves are caught in every cell
    assert all(
        kc == cells
        for name, (cells, kc, *_) in stats["catch"].items()
        if "stale" in name or "swapped" in name
    )


@pytest.mark.slow
def test_boundary_shapes_the_generator_rejects_are_refused_and_planted_mutants_are_counted() -> None:
    stats = main(["--only", "silu_and_mul", "--seeds", "1", "--dtypes", "float32", "--boundary", "--mutants"])
    assert stats["boundary_refused"] == 1  # the odd last dimension kcgate's boundary shape has
    mutants = {k: v for k, v in stats["catch"].items() if ": mutant " in k}
    assert mutants and all(cells > 0 for cells, *_ in mutants.values())
    assert stats["kc_alarms"] == []


@pytest.mark.slow
def test_a_two_output_ops_backward_cell_runs_with_one_cotangent_per_output() -> None:
    import torch

    from benchmarks.custom_ops import Case
    from benchmarks.custom_ops_kernels import ENTRIES

    e = next(e for e in ENTRIES if e.name == "linear_attention")
    c = Case(e, torch.float32, (2, 19, 1, 8), 0, backward=True)
    outs = e.kernel(*c.x)
    assert len(outs) == 2 and c.dy.numel() == sum(t.numel() for t in outs)  # dY spans both outputs
    assert any(b is not None for b in c.grad_bounds)
    budget, _, _ = c.judge(e.kernel)
    assert budget <= 1
    budget, _, where = c.judge(e.wrong["state not shifted"])
    assert budget > 1 and where
