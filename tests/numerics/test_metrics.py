"""Error measurement: ULP keys, the comparison's categories, and the worst element's index."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kcgate.numerics.metrics import _BLAS_DOT_MAX, _unravel, compare, sum_squares, to_metrics, ulp_distance


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


@pytest.mark.parametrize("allow", [1e-6, 1e-8], ids=["within", "over"])
@pytest.mark.parametrize("zero_ref", [False, True])
@pytest.mark.parametrize("special", [None, float("nan"), float("inf"), 0.0])
def test_the_all_finite_shortcut_measures_what_the_masked_path_does(
    special: float | None, zero_ref: bool, allow: float
) -> None:
    """Finite outputs and nonzero allowances skip the masks; one special value (or a zero allowance) takes
    them. Either way the metrics are the masks' own: the same budget, worst element, ULPs, errors, relative
    error (a zero in the reference is left out) and count of elements over (read only when the budget is)."""
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(6, 5, generator=g, dtype=torch.float64)
    if zero_ref:
        ref[4, 0] = 0.0
    out = (ref + 1e-6 * torch.randn(6, 5, generator=g, dtype=torch.float64)).float()
    allowed = torch.full_like(ref, allow)
    if special == 0.0:
        allowed[1, 1] = 0.0
    elif special is not None:
        out[2, 3] = special
    fast = to_metrics(compare(out, ref, allowed, "error-bound"))
    import kcgate.numerics.metrics as m

    o64 = out.to(torch.float64)
    err, signed, ulp = m._special(out, o64, ref, o64 - ref)
    slow = torch.where(
        allowed > 0, err / torch.where(allowed > 0, allowed, 1.0), torch.where(err > 0, torch.inf, 0.0)
    )
    assert fast.max_ulp == float(ulp.max()) and fast.max_abs_err == float(err.max())
    assert fast.budget_used == float(slow.max()) or math.isnan(fast.budget_used) and slow.isnan().any()
    assert fast.mismatches == int((slow > 1).sum())
    nz = ref != 0
    assert fast.max_rel_err == float((err[nz] / ref.abs()[nz]).max())
    assert fast.worst_index == _unravel(
        int(torch.nan_to_num(slow.flatten(), nan=math.inf).argmax()), slow.shape
    )


def _torch_keys(x: torch.Tensor) -> torch.Tensor:
    """The ULP keys computed in torch alone (what ulp_distance computed before it used numpy)."""
    bits = x.contiguous().view({8: torch.int64, 4: torch.int32, 2: torch.int16}[x.element_size()])
    bits = bits.to(torch.int64)
    low = (1 << (x.element_size() * 8 - 1)) - 1
    return bits ^ ((bits >> 63) & low)


SPECIALS = [0.0, -0.0, float("inf"), -float("inf"), 1e-45, -1e-45, 65504.0, 1e300, -1e300, 1.0, -1.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_ulp_distance_equals_the_torch_definition_on_random_and_special_values(dtype: torch.dtype) -> None:
    """numpy rounds the reference to the output's format (fp32, fp16) and torch does it for bf16: both
    round to nearest even, so the distances equal torch's own, including overflow to inf and signed zeros."""
    g = torch.Generator().manual_seed(0)
    wide = torch.randn(4000, generator=g, dtype=torch.float64) * torch.exp(
        torch.randn(4000, generator=g, dtype=torch.float64) * 8
    )
    a = torch.cat([wide, torch.tensor(SPECIALS, dtype=torch.float64)]).to(dtype)
    b = torch.cat(
        [
            wide * (1 + 1e-3 * torch.randn(4000, generator=g, dtype=torch.float64)),
            torch.tensor(SPECIALS[::-1]),
        ]
    )
    expected = (_torch_keys(a) - _torch_keys(b.to(dtype))).abs().to(torch.float64)
    assert torch.equal(ulp_distance(a, b), expected)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.float8_e4m3fn]
)
def test_format_ulp_is_the_exact_power_of_two_below_each_value(dtype: torch.dtype) -> None:
    """2^(⌊log2|v|⌋ − (p − 1)) from the exact exponent (math.frexp, element by element), the smallest normal's
    ulp below the normal range, and inf and NaN kept: a wrong exponent mask or scale fails here."""
    import numpy as np

    from kcgate.numerics.metrics import format_ulp
    from kcgate.vocab import dtypes

    p = dtypes.FORMATS[str(dtype).removeprefix("torch.")].p
    tiny = torch.finfo(dtype).tiny
    g = torch.Generator().manual_seed(1)
    v = (
        torch.randn(500, generator=g, dtype=torch.float64)
        * torch.exp(torch.randn(500, generator=g, dtype=torch.float64) * 30)
    ).numpy()
    v = np.concatenate([v, [0.0, -0.0, 1.0, 2.0, 0.5, -4.0, np.nextafter(2.0, 0.0), 1e-300, 1.7e308]])
    expected = [math.ldexp(1.0, math.frexp(max(abs(x), tiny))[1] - p) for x in v]
    assert format_ulp(v, dtype).tolist() == expected
    special = format_ulp(np.array([np.inf, -np.inf, np.nan]), dtype)
    assert special[0] == special[1] == np.inf and np.isnan(special[2])


def test_host_reads_tensors_that_numpy_cannot_take_directly() -> None:
    from kcgate.numerics.metrics import f64, host

    leaf = torch.ones(3, requires_grad=True)
    assert host(leaf * 2).tolist() == [2.0, 2.0, 2.0]  # requires grad: detached
    assert f64(torch.tensor([1.5], dtype=torch.bfloat16)).tolist() == [1.5]  # numpy has no bfloat16
    expanded = torch.tensor([1.0, 2.0], dtype=torch.float64).expand(3, 2)
    assert host(expanded).shape == (3, 2) and host(expanded).strides[0] == 0  # a view, no copy


@pytest.mark.parametrize("size", [0, 1, 7, _BLAS_DOT_MAX, _BLAS_DOT_MAX + 1, 3 * _BLAS_DOT_MAX + 5])
def test_sum_squares_on_both_sides_of_the_blas_limit(size: int) -> None:
    """The BLAS dot (short) and numpy's einsum (long, off OpenBLAS's thread pool) give Σ a², 2-D too."""
    a = np.random.default_rng(size).standard_normal(size)
    exact = math.fsum(float(x) * float(x) for x in a)
    assert sum_squares(a) == pytest.approx(exact, rel=1e-13, abs=0.0)
    if size % 5 == 0 and size:
        assert sum_squares(a.reshape(5, -1)) == pytest.approx(exact, rel=1e-13, abs=0.0)
    if size:
        b = a.copy()
        b[size // 2] = np.inf
        assert sum_squares(b) == math.inf
        b[0] = np.nan
        assert math.isnan(sum_squares(b))
