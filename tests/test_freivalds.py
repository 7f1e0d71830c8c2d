"""Tests for kcgate.oracles.freivalds: Freivalds' check with an error-analysis threshold (small n, fast)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402

from kcgate.oracles.freivalds import (  # noqa: E402
    FREIVALDS_AUTO_MIN_FLOPS,
    FreivaldsResult,
    aggregate,
    freivalds_check,
    freivalds_linear,
    reference_freivalds,
    use_freivalds,
    verify,
)


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

    from kcgate.oracles.freivalds import _broadcast

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
