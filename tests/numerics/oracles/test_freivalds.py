"""Tests for kcgate.numerics.oracles.freivalds: Freivalds' check with an error-analysis threshold (small n, fast)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402

from kcgate.numerics.oracles.freivalds import (  # noqa: E402
    FREIVALDS_AUTO_MIN_FLOPS,
    FreivaldsResult,
    aggregate,
    freivalds_check,
    freivalds_linear,
    reference_freivalds,
    use_freivalds,
    verify,
)


@pytest.fixture(params=["native", "torch"], autouse=True)
def projection(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test runs twice: with kcgate's fused native kernel, and with the torch path (GEMM + norm)."""
    from kcgate.numerics.oracles import native

    if request.param == "native" and native.status().lib is None:  # test_native.py fails
        pytest.skip(f"native kernel unavailable: {native.status().detail}")  # where a compiler exists
    with contextlib.ExitStack() as stack:
        if request.param == "torch":
            stack.enter_context(native.disabled("torch path for this test"))
        yield str(request.param)


def _inputs(m: int, k: int, n: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=gen).to(dtype), torch.randn(k, n, generator=gen).to(dtype)


def _assert_clean_pass(result: FreivaldsResult) -> None:
    assert result.passed
    assert math.isfinite(result.budget_used)
    assert 0.0 <= result.budget_used <= 1.0
    assert 0.0 < result.false_alarm_prob < 1e-6


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_correct_product_passes(dtype: torch.dtype) -> None:
    a, b = _inputs(96, 200, 72, dtype)
    _assert_clean_pass(freivalds_check(a, b, a @ b))


def test_correct_batched_product_passes() -> None:
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 40, 16, generator=gen)
    keys = torch.randn(2, 3, 50, 16, generator=gen)
    scores = q @ keys.mT
    _assert_clean_pass(freivalds_check(q, keys.mT, scores))  # attention Q @ K^T
    p = torch.softmax(scores, dim=-1).bfloat16()
    v = torch.randn(1, 3, 50, 16, generator=gen).bfloat16()  # broadcast batch
    _assert_clean_pass(freivalds_check(p, v, p @ v))  # attention P @ V


def test_linear_layer_with_bias_passes_and_catches_corruption() -> None:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(30, 64, generator=gen)
    weight = torch.randn(48, 64, generator=gen)
    bias = torch.randn(48, generator=gen)
    y = torch.nn.functional.linear(x, weight, bias)
    ok = freivalds_linear(x, weight, y, bias)
    _assert_clean_pass(ok)
    assert not freivalds_linear(x, weight, y - bias, bias).passed  # bias dropped


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_single_corrupted_element_is_detected(dtype: torch.dtype) -> None:
    a, b = _inputs(64, 256, 64, dtype, seed=3)
    c = a @ b
    clean = freivalds_check(a, b, c)
    bad = c.clone()
    bad[17, 41] += 10 * clean.threshold
    result = freivalds_check(a, b, bad)
    assert not result.passed
    assert result.budget_used > 1.0
    assert result.worst_row == 17


def test_bf16_accumulation_rejected_when_fp32_declared() -> None:
    a, b = _inputs(32, 2048, 32, torch.bfloat16, seed=4)
    acc = torch.zeros(32, 32, dtype=torch.bfloat16)
    for start in range(0, 2048, 1):  # a bf16 accumulator: round after every multiply-add
        acc = (acc.float() + a[:, start : start + 1].float() * b[start : start + 1, :].float()).bfloat16()
    declared_fp32 = freivalds_check(a, b, acc.float(), accumulate="float32")
    assert not declared_fp32.passed
    assert declared_fp32.budget_used > 3.0
    fp32_acc = a.float() @ b.float()
    _assert_clean_pass(freivalds_check(a, b, fp32_acc, accumulate="float32"))


def test_nan_output_fails() -> None:
    a, b = _inputs(16, 32, 16, torch.float32)
    c = a @ b
    c[3, 3] = float("nan")
    result = freivalds_check(a, b, c)
    assert not result.passed
    assert result.budget_used == math.inf


@pytest.mark.parametrize("value", [math.inf, -math.inf])
def test_infinite_output_fails(value: float) -> None:
    """An inf in C gives an infinite residual and an infinite threshold for its row (C's row norm): their ratio
    must count as a failure. (Residuals went through nan_to_num, which also turns inf into the largest finite
    fp64 value: an inf output passed with budget 0.)"""
    a, b = _inputs(300, 200, 257, torch.float32, seed=5)
    c = a @ b
    c[3, 3] = value
    result = freivalds_check(a, b, c)
    assert not result.passed and not result.bound_passed
    assert result.budget_used == math.inf and result.worst_row == 3
    assert 3 in result.flagged


def test_zero_output_for_nonzero_product_fails() -> None:
    a, b = _inputs(16, 32, 16, torch.float32)
    assert not freivalds_check(a, b, torch.zeros(16, 16)).passed


def test_seed_is_fresh_by_default_and_reproducible_with_a_generator() -> None:
    a, b = _inputs(16, 32, 16, torch.float32)
    c = a @ b
    torch.manual_seed(0)
    first = freivalds_check(a, b, c)
    torch.manual_seed(0)  # the global RNG does not decide the vectors
    second = freivalds_check(a, b, c)
    assert first.seed != second.seed
    again = [freivalds_check(a, b, c, generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert again[0] == again[1]


def test_verify_draws_vectors_after_the_kernel_returns() -> None:
    a, b = _inputs(24, 40, 24, torch.float32)
    seen: list[int] = []

    def kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        seen.append(1)
        return x @ y

    result = verify(kernel, a, b)
    assert seen == [1]
    _assert_clean_pass(result)


def test_reference_misses_a_corruption_that_ours_catches() -> None:
    a, b = _inputs(128, 128, 128, torch.bfloat16, seed=5)
    c = a.float() @ b.float()  # bf16 inputs, fp32 accumulation and output
    ours_clean = freivalds_check(a, b, c)
    delta = 5 * ours_clean.threshold
    ref_clean = reference_freivalds(a, b, c)
    assert delta < 0.2 * ref_clean.threshold  # the corruption hides under the reference's threshold
    bad = c.clone()
    bad[9, 99] -= delta
    assert not freivalds_check(a, b, bad).passed
    assert reference_freivalds(a, b, bad).passed


def test_reference_catches_gross_errors() -> None:
    a, b = _inputs(32, 64, 32, torch.float32)
    assert reference_freivalds(a, b, a @ b).passed
    assert not reference_freivalds(a, b, a @ b + 1.0).passed


def test_aggregate_takes_the_worst() -> None:
    a, b = _inputs(16, 32, 16, torch.float32)
    c = a @ b
    bad = c.clone()
    bad[0, 0] += 100.0
    results = [freivalds_check(a, b, c), freivalds_check(a, b, bad)]
    combined = aggregate(results)
    assert not combined.passed
    assert combined.budget_used == results[1].budget_used
    assert combined.false_alarm_prob == pytest.approx(sum(r.false_alarm_prob for r in results))
    with pytest.raises(ValueError):
        aggregate([])


def test_shape_mismatch_raises() -> None:
    a, b = _inputs(8, 16, 8, torch.float32)
    with pytest.raises(ValueError):
        freivalds_check(a, b, torch.zeros(8, 9))
    with pytest.raises(ValueError):
        freivalds_check(a, b.mT, torch.zeros(8, 8))


def test_use_freivalds_settings() -> None:
    assert use_freivalds(1024, 1024, 1024, "auto")
    assert FREIVALDS_AUTO_MIN_FLOPS == 2**30
    assert not use_freivalds(128, 128, 128, "auto")
    assert use_freivalds(8, 8, 8, "freivalds")
    assert not use_freivalds(4096, 4096, 4096, "fp64")
    with pytest.raises(ValueError):
        use_freivalds(8, 8, 8, "sometimes")


def test_batch_broadcast_matches_torch() -> None:
    """The check broadcasts batch shapes itself (torch.broadcast_shapes costs 0.4 s on first use)."""
    import itertools

    from kcgate.numerics.oracles.freivalds import _broadcast

    shapes = [(), (1,), (3,), (0,), (2, 1), (1, 3), (2, 3), (4, 1, 3), (1, 0)]
    for a, b in itertools.product(shapes, repeat=2):
        try:
            expected: tuple[int, ...] | None = tuple(torch.broadcast_shapes(a, b))
        except RuntimeError:
            expected = None
        try:
            got: tuple[int, ...] | None = _broadcast(a, b)
        except ValueError:
            got = None
        assert got == expected, (a, b)


# --- the fp16/bf16 path (exact upcast in reused row blocks) and the GEMM orientation choice ---


def _exact_in_fp32(rows: int, width: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Values m·2^-e with few significant bits: every ±1 sum over a row is exact in fp32, in any order."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bfloat16:  # 8 significant bits; |sum| ≤ 4096·255 units of 2^-10 < 2^24 units
        return (torch.randint(-255, 256, (rows, width), generator=gen) * 2.0**-10).to(dtype)
    # fp16: 11 significant bits, down to the subnormal range (2^-24); |sum| < 2^23 units of 2^-14
    return (torch.randint(-2047, 2048, (rows, width), generator=gen) * 2.0**-14).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_projection_is_exact_where_fp32_is(dtype: torch.dtype) -> None:
    """±1 projections of fp16/bf16 rows: exact products, fp32 accumulation, nothing rounded to 16 bits.

    300 rows of 4096 span three blocks of the 2 MiB buffer (the last one partial). Every partial sum is
    exactly representable in fp32, so the result must equal the fp64 one bit for bit; a bf16/fp16 output or
    accumulator would not (most sums need more significant bits than x's dtype has).
    """
    from kcgate.numerics.oracles.freivalds import _project_rows, _rademacher

    x = _exact_in_fp32(300, 4096, dtype, seed=11)
    rad = _rademacher(3, 4096, 5, torch.float32, x.device)
    z, norms = _project_rows(rad, x)
    assert z.dtype == torch.float32 and z.shape == (3, 300) and z.is_contiguous()
    exact = rad.double() @ x.double().mT
    assert torch.equal(z.double(), exact)
    assert (exact.to(dtype).double() != exact).float().mean() > 0.5  # needs more bits than x's dtype has
    reference_norms = torch.linalg.vector_norm(x.double(), dim=-1)
    assert norms.dtype == torch.float32
    torch.testing.assert_close(norms.double(), reference_norms, rtol=4096 * 2.0**-24, atol=0.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_projection_of_fp32_vectors_within_fp32_bound(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``A @ y`` with fp32 y (the second projection): within the worst-case fp32 GEMM bound of fp64.

    Batched, with a small buffer so that the blocks cut through the rows of every batch entry. Rounding y to
    the input dtype (a bf16 or fp16 GEMM) breaks the bound, which the last assertion checks.
    """
    import kcgate.numerics.oracles.freivalds as fv

    monkeypatch.setattr(fv, "_CHUNK_ELEMENTS", 3 * 300 * 7)  # 7 rows of each batch entry per block
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(3, 50, 300, generator=gen).to(dtype)
    y = torch.randn(2, 3, 2, 300, generator=gen)  # broadcast batch (2, 3) against x's (3,)
    z, norms = fv._project_rows(y, x)
    assert z.shape == (2, 3, 2, 50) and norms.shape == (3, 50)
    exact = y.double() @ x.double().mT
    bound = (300 + 1) * 2.0**-24 * (y.double().abs() @ x.double().abs().mT)
    assert ((z.double() - exact).abs() <= bound).all()
    torch.testing.assert_close(
        norms.double(), torch.linalg.vector_norm(x.double(), dim=-1), rtol=300 * 2.0**-24, atol=0.0
    )
    rounded_y = y.to(dtype).double() @ x.double().mT
    assert ((rounded_y - exact).abs() > bound).any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("batched", [False, True])
def test_corruption_in_a_later_block_is_caught(dtype: torch.dtype, batched: bool) -> None:
    """A corrupted element in the last (partial) row block of a multi-block low-precision check."""
    lead = (2,) if batched else ()
    gen = torch.Generator().manual_seed(13)
    a = torch.randn(*lead, 300, 4096, generator=gen).to(dtype)  # 3 blocks when 2-D, 5 when batched
    b = torch.randn(*lead, 4096, 48, generator=gen).to(dtype)
    c = (a.float() @ b.float()).to(dtype)
    clean = freivalds_check(a, b, c)
    _assert_clean_pass(clean)
    bad = c.clone()
    bad[(*([1] if batched else []), 290, 7)] += 10 * clean.threshold
    result = freivalds_check(a, b, bad)
    assert not result.passed
    assert result.worst_row == (300 if batched else 0) + 290


def test_fp16_extreme_magnitudes_pass_and_corruption_is_caught() -> None:
    """fp16 A near fp16's max, B tiny (subnormal in fp16): row norms of A exceed fp16's range.

    The norms are taken in fp32; in fp16 they would be inf and τ infinite, and the corruption would pass.
    """
    gen = torch.Generator().manual_seed(14)
    signs = torch.randint(0, 2, (64, 1024), generator=gen) * 2 - 1
    a = (signs * torch.empty(64, 1024).uniform_(2.0**14, 65504.0, generator=gen)).half()
    b = (torch.randn(1024, 40, generator=gen) * 2.0**-20).half()  # mostly subnormal fp16 values
    assert torch.isinf(torch.linalg.vector_norm(a, dim=-1)).all()  # what an fp16 norm would give
    assert (b != 0).float().mean() > 0.95
    for out_dtype in (torch.float32, torch.float16):
        c = (a.double() @ b.double()).to(out_dtype)
        clean = freivalds_check(a, b, c)
        _assert_clean_pass(clean)
        assert math.isfinite(clean.threshold)
        bad = c.clone()
        bad[5, 9] += 10 * clean.threshold
        result = freivalds_check(a, b, bad)
        assert not result.passed
        assert result.worst_row == 5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.slow
def test_no_false_alarms_in_50_correct_low_precision_products(dtype: torch.dtype) -> None:
    """50 correct products (fp32 accumulation; fp32 or low-precision output), multi-block: none fails."""
    failures = []
    budgets = []
    for seed in range(50):
        gen = torch.Generator().manual_seed(100 + seed)
        a = (torch.randn(160, 2048, generator=gen) * 4.0 ** (seed % 5 - 2)).to(dtype)
        b = torch.randn(2048, 96, generator=gen).to(dtype)
        exact = a.float() @ b.float()
        c = exact if seed % 2 else exact.to(dtype)
        result = freivalds_check(a, b, c)
        budgets.append(result.budget_used)
        if not result.passed:
            failures.append(seed)
    assert failures == []
    assert 0.0 < max(budgets) < 1.0


def test_gemm_orientations_agree_within_fp32_bound(projection: str) -> None:
    """Both GEMM orientations give ``v @ x.mT`` (contiguous, broadcast batch) within the fp32 bound."""
    if projection == "native":
        pytest.skip("the torch path's GEMMs only")
    from kcgate.numerics.oracles.freivalds import _gemm

    gen = torch.Generator().manual_seed(15)
    x = torch.randn(3, 70, 200, generator=gen)
    v = torch.randn(2, 1, 4, 200, generator=gen)
    exact = v.double() @ x.double().mT
    bound = 201 * 2.0**-24 * (v.double().abs() @ x.double().abs().mT)
    for big_left in (True, False):
        out = _gemm(x, v, big_left=big_left)
        assert out.shape == (2, 3, 4, 70) and out.is_contiguous()
        assert ((out.double() - exact).abs() <= bound).all()
        out_t = _gemm(x.mT.contiguous().mT, v, big_left=big_left)  # column-major x
        assert ((out_t.double() - exact).abs() <= bound).all()


def test_orientation_is_timed_once_per_key_and_checks_still_work(
    monkeypatch: pytest.MonkeyPatch, projection: str
) -> None:
    """With the size threshold lowered, the first fp32 and bf16 checks time both orientations and cache
    the choice per (dtype, k, layout, rough shape); results are unchanged in kind (pass / catch)."""
    if projection == "native":
        pytest.skip("the torch path's GEMMs only")
    import kcgate.numerics.oracles.freivalds as fv

    cache: dict[tuple[object, ...], bool] = {}
    monkeypatch.setattr(fv, "_ORIENTATION", cache)
    monkeypatch.setattr(fv, "_AUTOTUNE_MIN_ELEMENTS", 1)
    for dtype in (torch.float32, torch.bfloat16):
        a, b = _inputs(96, 200, 72, dtype, seed=16)
        c = (a.float() @ b.float()).to(dtype)
        clean = freivalds_check(a, b, c)
        _assert_clean_pass(clean)
        bad = c.clone()
        bad[3, 4] += 10 * clean.threshold
        assert not freivalds_check(a, b, bad).passed
    assert cache  # filled
    assert all(isinstance(choice, bool) for choice in cache.values())
    keys = dict(cache)
    a, b = _inputs(96, 200, 72, torch.float32, seed=17)
    _assert_clean_pass(freivalds_check(a, b, a @ b))
    assert cache == keys  # same shapes: nothing timed again
    x = torch.randn(64, 100)
    v = torch.randn(2, 100)
    assert fv._orientation_key(x, v, work=x.numel()) != fv._orientation_key(
        x.mT.contiguous().mT, v, work=x.numel()
    )
    monkeypatch.setattr(fv, "_AUTOTUNE_MIN_ELEMENTS", 1 << 20)
    assert fv._orientation_key(x, v, work=x.numel()) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_whose_squared_norm_overflows_still_bound_the_check(dtype: torch.dtype) -> None:
    """A ~ 1e20, B ~ 1e-20: C is ordinary, but ||A_i||^2 overflows fp32 (an inf threshold would pass anything)."""
    gen = torch.Generator().manual_seed(7)
    a = (torch.randn(64, 64, generator=gen, dtype=torch.float64) * 1e20).to(dtype)
    b = (torch.randn(64, 64, generator=gen, dtype=torch.float64) * 1e-20).to(dtype)
    c = (a.double() @ b.double()).to(dtype)
    good = freivalds_check(a, b, c)
    assert good.passed and math.isfinite(good.threshold)
    bad = c.clone()
    bad[5, 9] += 100.0
    assert not freivalds_check(a, b, bad).passed


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_whose_squares_underflow_still_pass_a_correct_product(dtype: torch.dtype) -> None:
    """A ~ 1e-25: every square underflows fp32 (a norm of 0 would give τ = 0 and fail a correct product).
    Rows of zeros, and a zero row beside tiny ones, keep a norm of 0 and pass."""
    gen = torch.Generator().manual_seed(8)
    a = (torch.randn(64, 256, generator=gen, dtype=torch.float64) * 1e-25).to(dtype)
    a[3] = 0.0
    b = torch.randn(256, 64, generator=gen).to(dtype)
    c = (a.double() @ b.double()).float()
    good = freivalds_check(a, b, c)
    _assert_clean_pass(good)
    bad = c.clone()
    bad[5, 9] += 1e-20  # far above the rounding of a 1e-24 product
    assert not freivalds_check(a, b, bad).passed
    bad = c.clone()
    bad[3, 9] = 1e-30  # the zero row: any nonzero output is wrong
    assert not freivalds_check(a, b, bad).passed


def test_an_empty_inner_dimension_needs_a_zero_output() -> None:
    a, b = torch.ones(3, 0), torch.ones(0, 4)
    assert freivalds_check(a, b, torch.zeros(3, 4)).passed
    one = torch.zeros(3, 4)
    one[1, 2] = 1.0  # a single element: every vector sees it (a full row of ones can cancel)
    assert not freivalds_check(a, b, one).passed
