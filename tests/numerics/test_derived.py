"""The bound derived from a reference: where the answer is known, it separates correct kernels from the
shipped bug classes the issue names (a bf16 router softmax, fp64 angles, a twice-rounding eager kernel)."""

from __future__ import annotations

import pytest
import torch

from kcgate.numerics import derived
from kcgate.numerics.derived import Precision, chi2_lower, derive, trace
from kcgate.vocab.causes import SLOW_REFERENCE

U = {d: float(torch.finfo(d).eps) / 2 for d in (torch.float32, torch.bfloat16, torch.float16)}


def _budget(kernel_out: torch.Tensor, got) -> float:  # type: ignore[no-untyped-def]
    return float(((kernel_out.double() - got.refs[0]).abs() / got.bounds[0]).max())


def _router_ref(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits.float(), -1)


def test_a_router_softmax_in_bf16_fails_the_bound_of_an_fp32_reference() -> None:
    logits = torch.randn(128, 8, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    up = (logits.double(),)
    got = derive(lambda: _router_ref(*up), up, Precision(U[torch.bfloat16], U[torch.float32], U[torch.float32]),
                 (U[torch.float32],), samples=8)  # fmt: skip
    assert _budget(torch.softmax(logits.float(), -1), got) < 0.5
    assert _budget(torch.softmax(logits, -1).float(), got) > 10


def _rope(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    n = x.shape[-1] // 2
    ang = torch.arange(x.shape[0], dtype=dtype)[:, None] / (10000 ** (torch.arange(n, dtype=dtype) / n))
    x1, x2 = x[..., :n].to(dtype), x[..., n:].to(dtype)
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1).to(x.dtype)


def test_a_reference_with_fp64_angles_still_allows_an_fp32_kernel_its_rounding() -> None:
    x = torch.randn(1024, 32, generator=torch.Generator().manual_seed(1)).to(torch.float32)
    up = (x.double(),)
    got = derive(lambda: _rope(up[0], torch.float64), up, Precision(*(U[torch.float32],) * 3), (U[torch.float32],),
                 samples=8)  # fmt: skip
    # the reference's own fp64 would make the bound the output rounding alone; the angles' fp32 error counts
    assert float((got.bounds[0] - U[torch.float32] * got.refs[0].abs()).min()) > 0
    assert _budget(_rope(x, torch.float32), got) < 1
    assert _budget(_rope(x, torch.bfloat16), got) > 10  # angles built in bf16: the rope precision bug


def _rms_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()


def _rms_eager(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """HF's RMSNorm: normalised in fp32, rounded to bf16, then multiplied by the weight in bf16."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def _rms_bf16_var(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The variance accumulated in bf16 (a sequential sum that stagnates)."""
    sq, acc = x.pow(2), torch.zeros(x.shape[0], 1, dtype=x.dtype)
    for i in range(x.shape[-1]):
        acc = acc + sq[:, i : i + 1]  # each partial sum rounded to bf16
    return (x.float() * torch.rsqrt(acc.float() / x.shape[-1] + 1e-6)).to(x.dtype) * w


def test_an_eager_bf16_rmsnorm_passes_and_a_bf16_accumulator_fails() -> None:
    g = torch.Generator().manual_seed(2)
    x, w = (
        torch.randn(16, 2048, generator=g).to(torch.bfloat16),
        torch.randn(2048, generator=g).to(torch.bfloat16),
    )
    up = (x.double(), w.double())
    prec = Precision(U[torch.bfloat16], U[torch.float32], U[torch.bfloat16])
    got = derive(lambda: _rms_ref(*up), up, prec, (U[torch.bfloat16],), samples=8)
    assert _budget(_rms_eager(x, w), got) < 1
    assert _budget(_rms_bf16_var(x, w), got) > 1


def test_the_same_seed_gives_the_same_bound_and_another_seed_another() -> None:
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3)).double()
    prec = Precision(U[torch.float32], U[torch.float32], U[torch.float32])

    def run(seed: int) -> torch.Tensor:
        return derive(lambda: torch.softmax(x, -1), (x,), prec, (0.0,), seed=seed, samples=4).bounds[0]

    assert torch.equal(run(7), run(7))
    assert not torch.equal(run(7), run(8))


def test_the_trace_names_each_operation_and_its_rounding_kind() -> None:
    x, w = torch.randn(4, 8).double(), torch.randn(8, 3).double()
    kinds = [op.kind for op in trace(lambda a, b: (a @ b).relu().sum(-1), (x, w))]
    assert kinds == ["matmul", "exact", "sum"]


def test_the_chi_square_quantile_is_below_its_mean() -> None:
    assert 0 < chi2_lower(24, 1e-6) < 24
    assert chi2_lower(24, 1e-6) < chi2_lower(24, 1e-2)


def _windowed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int = 8) -> torch.Tensor:
    """vLLM's ref_paged_attn for one dense sequence: causal from the end of the keys, a sliding window, the
    hidden scores set to -inf before an fp32 softmax."""
    lq, lk = q.shape[0], k.shape[0]
    s = torch.einsum("qhd,khd->hqk", q * q.shape[-1] ** -0.5, k).float()
    ones = torch.ones(lq, lk)
    hide = torch.triu(ones, diagonal=lk - lq + 1).bool()
    hide |= torch.triu(ones, diagonal=lk - (lq + window) + 1).bool().logical_not()
    return torch.einsum("hqk,khd->qhd", torch.softmax(s.masked_fill(hide, float("-inf")), -1).to(v.dtype), v)


def test_masked_scores_leave_the_rows_their_rounding() -> None:
    """-inf scores perturbed by a rounding were NaN, the NaN rows' samples were dropped, and the bound fell
    to one final rounding: a correct fp32 kernel used 3.4 and 38.6 of it (issue 47's benchmark)."""
    u = U[torch.float32]
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        q, k, v = (torch.randn(n, h, 8, generator=g) for n, h in ((5, 3), (13, 1), (13, 1)))
        k, v = k.expand(13, 3, 8), v.expand(13, 3, 8)
        up = tuple(t.double() for t in (q, k, v))
        got = derive(
            lambda up=up: _windowed_attention(*up), up, Precision(u, u, u), (u,), seed=seed, samples=8
        )
        assert _budget(_windowed_attention(q, k, v), got) < 0.5


def _gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """vLLM's gelu_and_mul: the slice reaches gelu as a computed (fp64) tensor, not a bf16 input."""
    return torch.nn.functional.gelu(x[..., :128], approximate=approximate) * x[..., 128:]


def test_a_composite_rounds_once_so_the_tanh_gelu_fails_where_the_exact_one_is_asked_for() -> None:
    # gelu's parts at the accumulator and one bf16 rounding of its result, as torch's eager bf16 gelu computes
    # it: every part rounded to bf16 made 1 + erf(x/√2) cancel a rounding on the negative tail (bound 1e5x the
    # value there) and the tanh approximation passed (budget 0.04)
    x = (torch.randn(32, 256, generator=torch.Generator().manual_seed(3)) * 2).to(torch.bfloat16)
    prec = Precision(U[torch.bfloat16], U[torch.float32], U[torch.bfloat16])
    got = derive(lambda: _gelu_and_mul(x), (x,), prec, (U[torch.bfloat16],), samples=8)
    assert _budget(_gelu_and_mul(x), got) < 0.5
    assert _budget(_gelu_and_mul(x.float()).to(torch.bfloat16), got) < 0.5  # a fused kernel
    assert _budget(_gelu_and_mul(x, "tanh"), got) > 2
    ops = {op.name: op.kind for op in got.trace}
    assert ops["aten.gelu.default"] == "decomposed" and ops["prims.erf.default"] == "pointwise"


def _new_gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))))


def test_a_composite_on_a_value_the_reference_keeps_in_bf16_still_rounds_there() -> None:
    # pow's decomposition casts its bf16 result down itself (not rounded twice), but tanh, fed from it, is
    # computed in bf16 eagerly: its rounding makes 1 + tanh cancel on the negative tail (eager bf16 gives 0
    # at x = -3.08, where the value is -0.0028), and a correct eager kernel must pass (it failed: 1.08 here, 4.1-4.7 in benchmarks/custom_ops.py)
    x = (torch.randn(16, 256, generator=torch.Generator().manual_seed(0)) * 2).to(torch.bfloat16)
    prec = Precision(U[torch.bfloat16], U[torch.float32], U[torch.bfloat16])
    got = derive(lambda: _new_gelu(x), (x,), prec, (U[torch.bfloat16],), samples=8)
    assert _budget(_new_gelu(x), got) < 0.5


def test_a_composites_backward_keeps_autograds_input_dtype_intermediates() -> None:
    # torch's CPU glu backward in bf16 is a correct kernel: with glu_backward's parts at the accumulator its
    # input gradient failed at budget 35 (fp16 137); its parts round at the input dtype, as autograd's do
    from kcgate.numerics.ops.base import BoundArgs
    from kcgate.numerics.ops.custom import derived_grad_bound

    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(16, 256, generator=gen, dtype=torch.float64) * 3).to(torch.bfloat16)
    dy = torch.randn(16, 128, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    leaf = x.clone().requires_grad_()
    (got,) = torch.autograd.grad(torch.nn.functional.glu(leaf, -1), leaf, dy)
    up = x.double().requires_grad_()
    (ref,) = torch.autograd.grad(torch.nn.functional.glu(up, -1), up, dy.double())
    ba = BoundArgs(U[torch.float32], U[torch.bfloat16], 8.0, U[torch.bfloat16], 0)
    (bound,) = derived_grad_bound(lambda t: torch.nn.functional.glu(t, -1))(
        (x.double(),), dy.double(), (ref,), ba
    )
    assert float(((got.double() - ref).abs() / bound).max()) < 1


def _rms_case() -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor], Precision]:
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(64, 512, generator=g), torch.randn(512, generator=g)
    return (x, w), (x.double(), w.double()), Precision(*(U[torch.float32],) * 3)


def test_sampling_stops_once_the_kernels_errors_fit_and_draws_all_where_they_do_not() -> None:
    """A kernel within the full bound's lower bound after n samples passes the full bound whatever the rest
    draw: it stops early; one that does not fit draws all N and gets the bound it would get without errors."""
    (x, w), up, prec = _rms_case()
    full = derive(lambda: _rms_ref(*up), up, prec, (U[torch.float32],), seed=5)
    assert full.samples == 24
    good = (_rms_ref(x, w).double() - full.refs[0]).abs()
    early = derive(lambda: _rms_ref(*up), up, prec, (U[torch.float32],), seed=5, errors=(good,))
    assert 4 <= early.samples < 24
    assert bool((good <= full.bounds[0]).all()) and bool((good <= early.bounds[0]).all())
    bad = good.clone()
    bad[3, 7] = 1.01 * full.bounds[0][3, 7]  # one element over the full bound: a failing kernel
    late = derive(lambda: _rms_ref(*up), up, prec, (U[torch.float32],), seed=5, errors=(bad,))
    assert late.samples == 24 and torch.equal(late.bounds[0], full.bounds[0])
    nan = derive(lambda: _rms_ref(*up), up, prec, (U[torch.float32],), seed=5, errors=(good * float("nan"),))
    assert nan.samples == 24


def test_a_slow_reference_is_named_on_stderr_with_what_its_bound_will_cost(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A timed-out case's message leads with this line (kcgate.execution.executors.timeout_message)."""
    _, up, prec = _rms_case()
    derive(lambda: _rms_ref(*up), up, prec, (U[torch.float32],), samples=4)
    assert SLOW_REFERENCE not in capsys.readouterr().err
    monkeypatch.setattr(derived, "SLOW_S", 0.0)
    derive(lambda: _rms_ref(*up), up, prec, (U[torch.float32],), samples=4)
    err = capsys.readouterr().err
    assert err.startswith(SLOW_REFERENCE) and "[64, 512], [512]" in err and "up to 4 more times" in err


def test_a_samples_signs_are_its_drawn_bits_in_order_whatever_the_shape() -> None:
    """The bound is the same on every runner with the same numpy: element i's sign is the i-th bit of the bytes
    the sample's generator draws (most significant first), 1 for +1, on the host as on a device."""
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(5))
    mode = derived.Perturb(
        Precision(U[torch.float32], U[torch.float32], U[torch.float32]), [], terms=[], rng=rng
    )
    got = [mode._signs(torch.zeros(shape, dtype=torch.float64)) for shape in ((3, 7), (5,))]
    again = np.random.Generator(np.random.PCG64(5))
    for g, n in zip(got, (21, 5)):
        bits = np.unpackbits(np.frombuffer(again.bytes((n + 7) // 8), dtype=np.uint8), count=n)
        assert g.dtype == torch.float64
        assert torch.equal(g.reshape(-1), torch.from_numpy(bits.astype(np.float64) * 2 - 1))
