"""Error measurement: ULP keys, the comparison's categories, and the worst element's index."""

from __future__ import annotations

import math

import pytest
import torch

from kcgate.metrics import _unravel, compare, to_metrics, ulp_distance


@pytest.mark.parametrize("shape", [(), (7,), (3, 4), (2, 3, 5), (1, 1, 4, 1)])
def test_unravel_matches_torch(shape: tuple[int, ...]) -> None:
    for flat in range(math.prod(shape)):
        expected = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))
        assert _unravel(flat, torch.Size(shape)) == expected


def test_worst_index_points_at_the_largest_budget() -> None:
    ref = torch.zeros(3, 4, 5, dtype=torch.float64)
    out = ref.clone().float()
    out[2, 1, 3] = 0.5  # the worst relative to its allowance
    out[0, 0, 0] = 0.9  # larger error, larger allowance
    allowed = torch.full_like(ref, 0.01)
    allowed[0, 0, 0] = 10.0
    m = to_metrics(compare(out, ref, allowed, "error-bound"))
    assert m.worst_index == (2, 1, 3) and m.budget_used == pytest.approx(50.0) and m.mismatches == 1


def test_ulp_distance_is_adjacent_across_zero_and_nan_is_a_category_change() -> None:
    x = torch.tensor([0.0, -0.0, 1.0], dtype=torch.float32)
    y = torch.tensor([-0.0, 0.0, 1.0 + 2.0**-23], dtype=torch.float64)  # the next fp32 after 1
    assert ulp_distance(x, y).tolist() == [1.0, 1.0, 1.0]
    cmp = compare(
        torch.tensor([float("nan"), 1.0]),
        torch.tensor([1.0, 1.0], dtype=torch.float64),
        torch.tensor(0.5, dtype=torch.float64),
        "error-bound",
    )
    assert math.isinf(cmp.err[0].item()) and cmp.err[1].item() == 0.0


@pytest.mark.parametrize("special", [None, float("nan"), float("inf"), 0.0])
def test_the_all_finite_shortcut_measures_what_the_masked_path_does(special: float | None) -> None:
    """Finite outputs and nonzero allowances skip the masks; one special value (or a zero allowance) takes
    them. Either way the metrics are the masks' own: the same budget, worst element, ULPs and errors."""
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(6, 5, generator=g, dtype=torch.float64)
    out = (ref + 1e-6 * torch.randn(6, 5, generator=g, dtype=torch.float64)).float()
    allowed = torch.full_like(ref, 1e-6)
    if special == 0.0:
        allowed[1, 1] = 0.0
    elif special is not None:
        out[2, 3] = special
    fast = to_metrics(compare(out, ref, allowed, "error-bound"))
    import kcgate.metrics as m

    o64 = out.to(torch.float64)
    err, signed, ulp = m._special(out, o64, ref, o64 - ref)
    slow = torch.where(
        allowed > 0, err / torch.where(allowed > 0, allowed, 1.0), torch.where(err > 0, torch.inf, 0.0)
    )
    assert fast.max_ulp == float(ulp.max()) and fast.max_abs_err == float(err.max())
    assert fast.budget_used == float(slow.max())
    assert fast.worst_index == _unravel(
        int(torch.nan_to_num(slow.flatten(), nan=math.inf).argmax()), slow.shape
    )
