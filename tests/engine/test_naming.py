"""The diagnosis table (kcgate/engine/naming.py, issue 48): every row names a test that exists; precision names are
refused past the error their effect gives at the case's dtype and shape (the case then says where it exceeds
the bound and why); the shipped bug classes are named by their known mistake; and on the held-out naming set
(tests/testing/faults/naming_sets.py) no failing case gets a misleading name, on two seeds."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch

from kcgate.engine import naming as N
from tests.testing.faults import naming_sets as NS
from tests.testing.faults import naming_sets_d as D
from tests.testing.faults import semantic as S
from tests.testing.kernels import families as bad

ROOT = Path(__file__).resolve().parents[2]
PRECISION = {"noise", "biased-rounding", "row-scale", "low-precision-accumulator", "low-precision-reduction"}


def _named(bug: S.Bug, seed: int) -> tuple[str, str, str]:
    finding = S.diagnose(bug, seed)
    sig = finding.signature
    return finding.status, sig.cause if sig else "", sig.summary if sig else finding.message


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_row_is_described_and_names_a_test_that_exists() -> None:
    assert len({r.name for r in N.RULES}) == len(N.RULES)
    for rule in N.RULES:
        assert rule.evidence and rule.limit, rule.name
        path, _, func = rule.test.partition("::")
        assert func in _tests_in(ROOT / path), f"{rule.name}: {rule.test} does not exist"


def _custom(kernel, reference, shape=(32, 256), dtype="float32"):  # type: ignore[no-untyped-def]
    def inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
        return (torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype),)

    return S.Bug("custom", "custom", dtype, shape, kernel, "", "", custom=(inputs, reference))


def _ramp(x: torch.Tensor) -> torch.Tensor:
    """2x with an error that grows along the rows: diffuse and unbiased, but a structure, not noise."""
    rows = torch.linspace(0, 1, x.shape[0], dtype=torch.float64)[:, None]
    return (2 * x.double() + 0.05 * rows**3 * x.double().roll(1, -1)).to(x.dtype)


def _iid(x: torch.Tensor) -> torch.Tensor:
    g = torch.Generator().manual_seed(int(x.abs().sum().item() * 1e3) % 2**31)
    return (2 * x.double() + 0.05 * torch.randn(x.shape, generator=g, dtype=torch.float64)).to(x.dtype)


def _iid_big(x: torch.Tensor) -> torch.Tensor:
    g = torch.Generator().manual_seed(int(x.abs().sum().item() * 1e3) % 2**31)
    return (2 * x.double() + 0.6 * torch.randn(x.shape, generator=g, dtype=torch.float64)).to(x.dtype)


def test_precision_names_are_refused_past_their_limit() -> None:
    """A structured error thousands of budgets past the bound is no rounding noise: "exceeds the bound", where
    and why noise does not fit; independent draws of the same size stay noise."""
    for seed in (0, 1):
        status, cause, summary = _named(_custom(_ramp, lambda x: 2 * x), seed)
        assert (status, cause) == ("fail", "exceeds-bound"), summary
        assert "not noise" in summary and "structured" in summary, summary
        assert "in the output:" in summary and "rows" in summary, summary
        status, cause, summary = _named(_custom(_iid, lambda x: 2 * x), seed)
        assert (status, cause) == ("fail", "noise"), summary
        # independent draws at a third of the output's rms (set D's GPTQ scale read per channel, seed 1, was
        # 'noise' at 84% of elements): past what any rounding gives, even fp8's
        status, cause, summary = _named(_custom(_iid_big, lambda x: 2 * x), seed)
        assert (status, cause) == ("fail", "exceeds-bound"), summary
        assert "even fp8" in summary, summary


def _tail(frac: float):  # type: ignore[no-untyped-def]
    def kernel(x: torch.Tensor) -> torch.Tensor:
        y = x.double().exp()
        y[..., int(x.shape[-1] * (1 - frac)) :] = 0
        return y.to(x.dtype)

    return kernel


def test_a_tail_that_is_most_of_the_row_is_no_tail_tile() -> None:
    status, cause, summary = _named(_custom(_tail(0.125), lambda x: x.exp()), 0)
    assert (status, cause) == ("fail", "tail-pattern"), summary
    status, cause, summary = _named(_custom(_tail(0.75), lambda x: x.exp()), 0)
    assert status == "fail" and cause != "tail-pattern", summary


def test_a_constant_output_is_no_stale_output() -> None:
    """A loop that never runs returns zeros on every call: equal outputs, the same verdict, but no stale buffer."""
    status, cause, summary = _named(_custom(lambda x: torch.zeros_like(x), lambda x: x.exp()), 0)
    assert (status, cause) == ("fail", "constant-output"), summary


# the families' known mistakes (custom ops have none)
KNOWN = [n for n in NS.TUNING + NS.HELD_OUT if "wrong-semantics" in n.right and n.bug.op != "custom"]


@pytest.mark.parametrize("named", KNOWN, ids=[n.bug.id for n in KNOWN])
def test_known_mistakes_name_the_shipped_bugs(named: NS.Named) -> None:
    for seed in (0, 1):
        status, cause, summary = _named(named.bug, seed)
        assert NS.verdict(named, status, cause, summary) == "right", summary


def test_no_misleading_name_on_the_held_out_set() -> None:
    rows = NS.measure(NS.HELD_OUT)
    misleading = [(n.bug.id, g[2], g[3][:120]) for n, got in rows for g in got if g[0] == "misleading"]
    assert misleading == []
    precision_on_semantic = [
        (n.bug.id, g[2]) for n, got in rows for g in got if g[2] in PRECISION and not n.right & PRECISION
    ]
    assert precision_on_semantic == []


def _follows_input(x: torch.Tensor) -> torch.Tensor:
    """exp(x) plus c_row·x (c_row alike): on three rows the error's statistics look like independent draws,
    and it is no factor of the result, but each row of it follows x."""
    c = torch.linspace(0.95, 1.05, x.shape[0], dtype=torch.float64)[:, None]
    return (x.double().exp() + 0.05 * c * x.double()).to(x.dtype)


def test_an_error_that_follows_an_input_is_no_noise_on_few_rows() -> None:
    """A boundary shape's three rows leave the rows' spread untestable; the error following x refuses noise."""
    status, cause, summary = _named(_custom(_follows_input, lambda x: x.exp(), shape=(3, 509)), 0)
    assert status == "fail" and cause not in PRECISION, summary
    assert "follows input" in summary, summary
    status, cause, summary = _named(_custom(_iid, lambda x: 2 * x, shape=(3, 509)), 0)
    assert (status, cause) == ("fail", "noise"), summary


def test_a_constant_per_block_with_a_partial_last_block_is_an_offset() -> None:
    """A chunked scan without its carry at a boundary shape's odd n (61 = 3·16 + 13): one name on every shape."""
    from kcgate.engine.diagnosis import offset_signature

    e = torch.zeros(3, 61, dtype=torch.float64)
    for start, value in zip(range(0, 61, 16), (1.0, -2.0, 0.5, 3.0)):
        e[:, start : start + 16] = value
    ref = torch.randn(3, 61, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s = offset_signature(e, ref)
    assert s is not None and s.cause == "offset", s
    assert "block of 16 columns (the last one 13 columns)" in s.summary, s.summary


def test_an_error_on_a_reference_of_one_value_is_no_offset() -> None:
    """A top-1 router's weights are all 1: a wrong normaliser (megablocks#87) is as much a factor as an added
    constant there, so the offset rule claims neither."""
    from kcgate.engine.diagnosis import offset_signature

    ref = torch.ones(16, 8, dtype=torch.float64)
    out = 1 / (16 + torch.arange(16, dtype=torch.float64))[:, None].expand(16, 8)
    assert offset_signature(out - ref, ref) is None
    assert offset_signature(out - ref, ref + torch.linspace(0, 1, 8, dtype=torch.float64)) is not None


def test_a_mistake_that_brings_the_error_within_the_gate_names_an_excess() -> None:
    """The bf16 smoothing-over-ignored bug fails the sensitivity gate on seed 0 (3.9x a correct kernel's error):
    against its known mistake the kernel is within the gate's allowance, so it is that mistake."""
    from tests.testing.faults.naming_sets_shipped import SHIPPED

    named = next(s.named for s in SHIPPED if s.named.bug.id == "torch-ce-smoothing-over-ignored")
    status, cause, summary = _named(named.bug, 0)
    assert (status, cause) == ("fail", "wrong-semantics") and "ignored rows" in summary, summary


@pytest.mark.slow
@pytest.mark.parametrize("bug_id", ["te-ce-mean-over-all-rows", "torch-ce-smoothing-over-ignored"])
def test_the_loss_normalisation_and_smoothing_bugs_are_named_by_their_model(bug_id: str) -> None:
    """Issue 56: a loss-normalisation bug (the mean over every row) and the label smoothing counted on ignored
    rows are each their known mistake, on seeds 0 and 1 and at the boundary shape a run adds; never a
    precision word (biased-rounding) nor a non-finite one (overflow-nan)."""
    from dataclasses import replace

    from tests.testing.faults.naming_consistency import boundary
    from tests.testing.faults.naming_sets_shipped import SHIPPED

    named = next(s.named for s in SHIPPED if s.named.bug.id == bug_id)
    shape = boundary(named)
    assert shape is not None
    for bug, seed in ((named.bug, 0), (named.bug, 1), (replace(named.bug, shape=shape), 0)):
        status, cause, summary = _named(bug, seed)
        assert (status, cause) == ("fail", "wrong-semantics"), (bug.shape, seed, cause, summary)
        assert "ignored" in summary or "every row" in summary, summary


def test_a_norm_dx_with_row_sums_over_a_block_of_rows_is_that_mistake() -> None:
    """FlagGems#59: layer-norm dx's Σ w·dy and Σ w·dy·x̂ taken over a block of 4 rows is named with its block."""
    from tests.testing.faults.naming_sets_shipped import SHIPPED

    named = next(s.named for s in SHIPPED if s.named.bug.id == "flaggems-layernorm-dx-row-block-sums")
    for seed in (0, 1):
        status, cause, summary = _named(named.bug, seed)
        assert (status, cause) == ("fail", "wrong-semantics"), summary
        assert "row sums" in summary and "each block of 4 rows" in summary, summary


def test_a_norm_dx_with_only_the_last_column_block_is_that_mistake() -> None:
    """tt-metal#53215 bug 2: Σ w·dy·x̂ kept from the last block of 128 of 512 columns only, named with its block."""
    from tests.testing.faults.naming_sets_shipped import SHIPPED

    named = next(s.named for s in SHIPPED if s.named.bug.id == "ttmetal-layernorm-dx-last-block")
    for seed in (0, 1):
        status, cause, summary = _named(named.bug, seed)
        assert (status, cause) == ("fail", "wrong-semantics"), summary
        assert "last block of 128 columns" in summary, summary


def test_a_norm_dx_block_mistake_of_one_row_or_every_column_is_the_right_backward() -> None:
    """The mistakes' oracles keep the forward and, with blocks of one row or of every column, the right gradient."""
    from kcgate.numerics.ops.reduce import Norm, _layernorm, _rmsnorm

    g = torch.Generator().manual_seed(0)
    x, w, b, dy = (torch.randn(s, generator=g, dtype=torch.float64) for s in ((6, 16), (16,), (16,), (6, 16)))
    x.requires_grad_(True)
    for oracle, args in ((_layernorm, (x, w, b)), (_rmsnorm, (x, w))):
        right = oracle(Norm())(*args)
        one, four = oracle(Norm(dx_block=1))(*args), oracle(Norm(dx_block=4))(*args)
        every, last = oracle(Norm(dx_last_cols=16))(*args), oracle(Norm(dx_last_cols=8))(*args)
        for y in (four, every, last):
            assert torch.allclose(y, right)
        grads = [torch.autograd.grad(y, x, dy)[0] for y in (right, one, four, every, last)]
        assert torch.allclose(grads[1], grads[0]) and torch.allclose(grads[3], grads[0])
        assert not torch.allclose(grads[2][:4], grads[0][:4]) and not torch.allclose(grads[4], grads[0])


def test_an_inv_freq_rounded_to_bf16_is_the_angle_table_mistake() -> None:
    from tests.testing.faults.naming_sets_shipped import SHIPPED

    named = next(s.named for s in SHIPPED if s.named.bug.id == "sglang-rope-inv-freq-bf16")
    status, cause, summary = _named(named.bug, 0)
    assert (status, cause) == ("fail", "wrong-semantics") and "inv_freq rounded to bfloat16" in summary, (
        summary
    )


GEMMA = (("weight_offset", 1.0), ("casting_mode", "gemma"))


def _gemma_rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The fix of pytorch#147203 and transformers#29402: x̂ and x̂·(1 + w) in fp32, rounded once."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * (1 + w.float())).to(x.dtype)


def _cast_before_weight(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    xhat = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)
    return (xhat.float() * (1 + w.float())).to(x.dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_rounding_mistake_reproduced_bit_for_bit_fails_a_passing_case(dtype: str) -> None:
    """x̂ cast to the input dtype before the weight, where the contract declares gemma's all-fp32 casting: within
    the bound and the gate's factor, but the output is that mistake's, rounded, in (nearly) every element; the
    fixed kernel (one rounding at the end) passes on the same contract."""
    for seed in (0, 1):
        bug = S.Bug("cast", "rmsnorm", dtype, (16, 1024), _cast_before_weight, "", "", params=GEMMA)
        status, cause, summary = _named(bug, seed)
        assert (status, cause) == ("fail", "wrong-semantics"), summary
        assert f"x̂ cast to {dtype}" in summary and "reproduced bit for bit" in summary, summary
        fixed = S.Bug("fixed", "rmsnorm", dtype, (16, 1024), _gemma_rmsnorm, "", "", params=GEMMA)
        assert S.diagnose(fixed, seed).status == "pass"


def test_a_rounding_mistake_needs_the_contracts_oracle_to_differ() -> None:
    """The rule's statistic: the mistake reproduces at most a quarter of the elements where the contract's
    oracle differs, and those must be at least 5% of the output (and 32): a correct kernel, one rounding
    off at a boundary, is never named."""
    from kcgate.engine.mistakes import _reproduces

    assert _reproduces(0, 4000, 16384) and _reproduces(1000, 4000, 16384)
    assert not _reproduces(1001, 4000, 16384)
    assert not _reproduces(0, 2, 16384) and not _reproduces(0, 800, 16384) and not _reproduces(0, 31, 64)


def test_a_known_mistake_reproduced_bit_for_bit_names_an_excess_failure() -> None:
    """The exact gelu's tanh approximation in fp16 geglu (held-out set C, after its first run): within the
    bound, failed by the sensitivity gate's max statistic (29x), and called excess-error while the known mistake
    'the other approximation' was tried only by its rms share; its rounded oracle equals the output in all but
    16-27 of 131072 elements, the contract's differs in 31%."""
    from tests.testing.faults.naming_sets_variants import VARIANTS

    (named,) = [n for n in VARIANTS if n.bug.id == "hf-geglu-tanh-for-erf-fp16"]
    status, cause, summary = _named(named.bug, 0)
    assert (status, cause) == ("fail", "wrong-semantics"), summary
    assert "approximate = 'tanh'" in summary and "reproduced bit for bit" in summary, summary


@pytest.mark.parametrize(
    ("kernel", "dtype", "shape", "params", "says"),
    [
        (D.gptq_scale_per_channel, "bfloat16", (32, 512, 64), (("group_size", 128),), "one per channel"),
        (D.awq_zero_added, "float16", (32, 256, 64), (("group_size", 64),), "zero-point added"),
        (bad.quant_gemm_wrong_group, "bfloat16", (16, 512, 32), (), "next group"),
    ],
)
def test_quant_gemm_dequantization_mistakes_are_named(kernel, dtype, shape, params, says) -> None:  # type: ignore[no-untyped-def]
    """Set D's quantised-matmul variants (found after its first run: 'noise' and 'one constant per row added'):
    the scale and zero of group 0 read for every column, and the zero-point added, are quant_gemm's known
    mistakes; the group index off by one keeps its name."""
    for seed in (0, 1):
        status, cause, summary = _named(
            S.Bug("q", "quant_gemm", dtype, shape, kernel, "", "", params=params), seed
        )
        assert (status, cause) == ("fail", "wrong-semantics"), summary
        assert says in summary, summary


def _varlen_starts_early(
    q, k, v, cu_q, cu_k, max_seqlen_q=0, max_seqlen_k=0, causal=False, softmax_scale=None
):  # type: ignore[no-untyped-def]
    """A varlen kernel whose key blocks start one key before cu_seqlens_k[i] (the previous sequence's last)."""
    outs = []
    for i in range(len(cu_q) - 1):
        a, b = int(cu_q[i]), int(cu_q[i + 1])
        ka = max(int(cu_k[i]) - 1, 0)
        s = q[a:b].float().transpose(0, 1) @ k[ka:b].float().permute(1, 2, 0) / math.sqrt(q.shape[-1])
        outs.append((s.softmax(-1) @ v[ka:b].float().transpose(0, 1)).transpose(0, 1))
    return torch.cat(outs).to(q.dtype)


@pytest.mark.parametrize(
    ("kernel", "says"),
    [(D.varlen_boundary_plus_one, "one past its end"), (_varlen_starts_early, "one before it")],
)
def test_a_block_diagonal_boundary_off_by_one_is_named(kernel, says) -> None:  # type: ignore[no-untyped-def]
    """Set D's varlen kernel whose key blocks run one past cu_seqlens (found after its first run: 'exceeds
    the bound'), and one whose blocks start a key early, are the attention family's varlen known mistakes."""
    bug = S.Bug("bd", "attention", "float32", (4, 2, 2, 32, 32), kernel, "", "", params=(("varlen", True),))
    for seed in (0, 1):
        status, cause, summary = _named(bug, seed)
        assert (status, cause) == ("fail", "wrong-semantics") and says in summary, summary


def test_a_constant_factor_per_row_is_no_noise_though_one_element_is_dropped() -> None:
    """llama.cpp's top-p one token short: the kept probabilities renormalised by one factor per row (signs differ
    across rows, so the whole-tensor bias test misses it) and the dropped one's relative error −1: not noise."""
    from kcgate.engine.naming import row_bias

    g = torch.Generator().manual_seed(0)
    ref = torch.rand(3, 256, generator=g, dtype=torch.float64) + 0.1
    factor = torch.tensor([1.01, 0.99, 1.02], dtype=torch.float64)[:, None]
    out = ref * factor * (1 + 1e-7 * torch.randn(ref.shape, generator=g, dtype=torch.float64))
    out[:, 7] = 0.0
    assert row_bias(out - ref, ref) is not None
    rounding = ref * (2**-9) * (torch.rand(ref.shape, generator=g, dtype=torch.float64) * 2 - 1)
    assert row_bias(rounding, ref) is None
