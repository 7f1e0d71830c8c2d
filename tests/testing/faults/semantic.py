"""Semantic bugs, written as kernels (issue 33): each must be named by the transformation it is, with the
fitted value, on every seed. ``SEMANTIC`` lists them with the contract they run under, the cause and a
fragment the summary must contain; ``diagnose(bug, seed)`` runs the class check in process and returns the
signature (tests/engine/test_semantic_signatures.py).

These kernels were written from the issue's description of each bug, together with the fits (not held out).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tests.testing.kernels import realistic

F = torch.nn.functional
Kernel = Callable[..., Any]


# ---- pointwise -----------------------------------------------------------------------------------------


def gelu_no_half(x: torch.Tensor) -> torch.Tensor:
    """gelu without its 0.5: x·(1 + erf(x/√2)), computed in fp32 as a fused kernel does."""
    xf = x.float()
    return (xf * (1 + torch.erf(xf * (1 / math.sqrt(2))))).to(x.dtype)


def silu_sigmoid_2x(x: torch.Tensor) -> torch.Tensor:
    """silu with σ(2x) for σ(x)."""
    return x * torch.sigmoid(2 * x)


def leaky_relu_alpha_01(x: torch.Tensor) -> torch.Tensor:
    """leaky_relu with α = 0.1 where 0.01 is meant."""
    return torch.where(x > 0, x, 0.1 * x)


def leaky_relu_ref(x: torch.Tensor) -> torch.Tensor:
    return F.leaky_relu(x, 0.01)


def layernorm_scaled_after_bias(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5, **_: Any
) -> torch.Tensor:
    """layer_norm's whole output, bias included, scaled by 1.05 (a stray factor after the affine)."""
    return F.layer_norm(x, x.shape[-1:], w, b, eps) * 1.05


def normal_inputs(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


# ---- reductions ----------------------------------------------------------------------------------------


def matmul_acc_overwrite(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A K loop over tiles of 32 with ``acc =`` where ``acc +=`` was meant."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for k in range(0, a.shape[1], 32):
        acc = a[:, k : k + 32].float() @ b[k : k + 32].float()
    return acc.to(a.dtype)


def sum_drops_tail(x: torch.Tensor) -> torch.Tensor:
    """A row sum over blocks of 128 that never loads the partial last block (1000 = 7·128 + 104)."""
    k = x.shape[-1] // 128 * 128
    return x[..., :k].sum(-1)


def _padded(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    n = x.shape[-1]
    block = 1 << (n - 1).bit_length()  # the next power of two, as a Triton BLOCK_SIZE
    return F.pad(x.float(), (0, block - n), value=0.0), n


def softmax_other_zero(x: torch.Tensor) -> torch.Tensor:
    """A masked load with other = 0.0 instead of −inf: the padded lanes join the max and the sum."""
    xp, n = _padded(x)
    e = (xp - xp.amax(-1, keepdim=True)).exp()
    return (e / e.sum(-1, keepdim=True))[..., :n].to(x.dtype)


def softmax_padded_sum(x: torch.Tensor) -> torch.Tensor:
    """The max over the real lanes only, but the sum over the whole block: padded lanes leak exp(0 − max)."""
    xp, n = _padded(x)
    m = x.float().amax(-1, keepdim=True)
    e = (xp - m).exp()
    return (e / e.sum(-1, keepdim=True))[..., :n].to(x.dtype)


def softmax_bf16_sum(x: torch.Tensor) -> torch.Tensor:
    """bf16 softmax whose row sum is accumulated in bf16 (blocks of 16 lanes added into a bf16 total)."""
    e = (x.float() - x.float().amax(-1, keepdim=True)).exp()
    total = torch.zeros(x.shape[:-1], dtype=torch.bfloat16)
    for j in range(0, x.shape[-1], 16):
        total = (total.float() + e[..., j : j + 16].sum(-1)).to(torch.bfloat16)
    return (e / total.float()[..., None]).to(x.dtype)


# ---- attention ----------------------------------------------------------------------------------------


def _expand(q: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return t.repeat_interleave(q.shape[-3] // t.shape[-3], -3)


def attention_no_scale(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    """Attention without 1/√D."""
    k, v = _expand(q, k), _expand(q, v)
    s = q.float() @ k.float().mT
    if is_causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return (s.softmax(-1) @ v.float()).to(q.dtype)


def flash_no_rescale(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    """Flash attention over K-blocks of 32 that forgets ``acc *= exp(m_old − m_new)`` (the row sum is rescaled)."""
    k, v = _expand(q, k).float(), _expand(q, v).float()
    qf = q.float() * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    m = torch.full(q.shape[:-1], float("-inf"))
    row = torch.zeros(q.shape[:-1])
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],))
    for j in range(0, k.shape[-2], 32):
        s = qf @ k[..., j : j + 32, :].mT
        m_new = torch.maximum(m, s.amax(-1))
        p = (s - m_new[..., None]).exp()
        alpha = (m - m_new).exp()
        row = alpha * row + p.sum(-1)
        acc = acc + p @ v[..., j : j + 32, :]  # the bug: acc is never multiplied by alpha
        m = m_new
    return (acc / row[..., None]).to(q.dtype)


def rope_halves_swapped(q, k, cos, sin):  # type: ignore[no-untyped-def]
    """rotate_half returning (x₂, −x₁) where (−x₂, x₁) is meant."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def rotate_half(t):  # type: ignore[no-untyped-def]
        t1, t2 = t.chunk(2, dim=-1)
        return torch.cat((t2, -t1), dim=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def sdpa_top_left(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    """torch's sdpa, whose causal mask is aligned top-left: wrong for a decode step or a prefill chunk where
    the kernel is meant to align it bottom-right (the last query sees every key)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


def attention_bottom_right(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    """A correct kernel for bottom-right alignment (FlashAttention >= 2.1): query i sees keys j ≤ i + lk − lq."""
    lq, lk = q.shape[-2], k.shape[-2]
    mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq) if is_causal else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)


# ---- backward -----------------------------------------------------------------------------------------


class _SoftmaxNoRowTerm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        y = torch.softmax(x.float(), -1).to(x.dtype)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        (y,) = ctx.saved_tensors
        return y * dy  # the bug: y·(dy − Σ y·dy) without the row term


def softmax_backward_no_row_term(x: torch.Tensor) -> torch.Tensor:
    return _SoftmaxNoRowTerm.apply(x)  # type: ignore[no-any-return]


class _CEMeanNoDivide(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index):  # type: ignore[no-untyped-def]
        keep = target != ignore_index
        logp = logits.float().log_softmax(-1)
        nll = -logp.gather(1, target.clamp(0)[:, None])[:, 0]
        ctx.save_for_backward(logp, target, keep)
        return (torch.where(keep, nll, 0.0).sum() / keep.sum()).to(logits.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        logp, target, keep = ctx.saved_tensors
        g = logp.exp() - F.one_hot(target.clamp(0), logp.shape[-1]).float()
        g = torch.where(keep[:, None], g, 0.0) * dy  # the bug: the mean's 1/N is forgotten
        return g.to(dy.dtype), None, None


def ce_mean_backward_no_1_over_n(logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0):  # type: ignore[no-untyped-def]
    return _CEMeanNoDivide.apply(logits, target, ignore_index)


# ---- the list ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bug:
    """One semantic bug: the kernel, the contract it runs under, the cause and a fragment of the summary."""

    id: str
    op: str
    dtype: str
    shape: tuple[int, ...]
    kernel: Kernel
    cause: str
    says: str  # a fragment the signature's summary must contain (the fitted value or the mistake)
    klass: str = "C-PRC-01"
    params: tuple[tuple[str, Any], ...] = ()
    direction: str = "forward"
    custom: tuple[Callable[..., Any], Callable[..., Any]] | None = None  # (inputs, reference) of a custom op
    distribution: str = "normal"  # the contract's input distribution


SEMANTIC: tuple[Bug, ...] = (
    Bug("gelu-no-half", "gelu", "float32", (64, 256), gelu_no_half, "scaled-output", "scaled by 2.00"),
    Bug("gelu-no-half-bf16", "gelu", "bfloat16", (64, 256), gelu_no_half, "scaled-output", "scaled by 2.00"),
    Bug("silu-sigmoid-2x", "silu", "float32", (64, 256), silu_sigmoid_2x, "argument-scale", "σ(2·x)"),
    Bug(
        "leaky-relu-alpha",
        "custom",
        "float32",
        (64, 256),
        leaky_relu_alpha_01,
        "sign-scaled",
        "negative side scaled by 10.00",
        custom=(normal_inputs, leaky_relu_ref),
    ),
    Bug(
        "matmul-acc-overwrite",
        "matmul",
        "float32",
        (64, 256, 32),
        matmul_acc_overwrite,
        "overwritten-accumulator",
        "only the last K-block of 32 counted",
    ),
    Bug("sum-drops-tail", "sum", "float32", (16, 1000), sum_drops_tail, "tail-pattern", "last 104 of 1000"),
    Bug(
        "softmax-other-zero",
        "softmax",
        "float32",
        (32, 1000),
        softmax_other_zero,
        "masked-tail",
        "≈24 padded",
    ),
    Bug(
        "softmax-padded-sum",
        "softmax",
        "float32",
        (32, 1000),
        softmax_padded_sum,
        "masked-tail",
        "≈24 padded",
    ),
    Bug(
        "softmax-bf16-sum",
        "softmax",
        "bfloat16",
        (32, 256),
        softmax_bf16_sum,
        "low-precision-reduction",
        "bf16",
    ),
    Bug(
        "softmax-bf16-denominator",
        "softmax",
        "bfloat16",
        (32, 256),
        realistic.softmax_bf16_denominator,
        "low-precision-reduction",
        "bf16",
    ),
    *(
        Bug(
            f"layernorm-scaled-{k[-2:]}",
            "layernorm",
            d,
            (8, 256),
            layernorm_scaled_after_bias,
            "scaled-output",
            "output scaled by 1.05",
            klass=k,
        )
        for k, d in (("C-PRC-01", "float32"), ("C-CMP-01", "bfloat16"))
    ),
    Bug(
        "rmsnorm-no-upcast",
        "rmsnorm",
        "bfloat16",
        (32, 256),
        realistic.rmsnorm_no_upcast,
        "low-precision-reduction",
        "bf16",
    ),
    Bug(
        "attention-no-scale",
        "attention",
        "float32",
        (2, 4, 2, 128, 64),
        attention_no_scale,
        "wrong-semantics",
        "not scaled by 1/√D",
    ),
    Bug(
        "flash-no-rescale",
        "attention",
        "float32",
        (2, 4, 2, 128, 64),
        flash_no_rescale,
        "wrong-semantics",
        "online-softmax rescale missing: the accumulator not rescaled",
    ),
    Bug(
        "causal-off-by-one",
        "attention",
        "float32",
        (2, 4, 2, 128, 64),
        realistic.attention_leaks_next_token,
        "wrong-semantics",
        "off by one diagonal",
        params=(("causal", True),),
    ),
    Bug(
        "causal-align-top-left",
        "attention",
        "float32",
        (1, 4, 2, 128, 64),
        sdpa_top_left,
        "wrong-semantics",
        "aligned top-left where bottom-right is declared",
        params=(("causal", True), ("causal_align", "bottom-right"), ("q_len", 16)),
    ),
    Bug(
        "rope-halves-swapped",
        "rope",
        "float32",
        (2, 8, 2, 128, 64),
        rope_halves_swapped,
        "wrong-semantics",
        "halves swapped",
    ),
    Bug(
        "swiglu-wrong-half",
        "swiglu",
        "bfloat16",
        (64, 1024),
        realistic.swiglu_swapped,
        "wrong-semantics",
        "silu on the wrong half",
    ),
    Bug(
        "softmax-backward-no-row-term",
        "softmax",
        "float32",
        (32, 256),
        softmax_backward_no_row_term,
        "missing-term",
        "lacks −y·Σ(y·dy)",
        direction="backward",
    ),
    Bug(
        "ce-mean-backward-no-1-over-n",
        "cross_entropy",
        "float32",
        (64, 512),
        ce_mean_backward_no_1_over_n,
        "scaled-output",
        "gradient of logits scaled by",
        direction="backward",
    ),
)


def bug_contract(bug: Bug, kernel: str = "x:y") -> Any:
    """The contract a bug runs under (``diagnose``; its fixed twin's in benchmarks/false_alarms.py)."""
    from kcgate.contracts.records import Contract, Protocol

    return Contract(
        id=bug.id,
        klass=bug.klass,
        kernel=kernel,
        op=bug.op,
        dtypes=(bug.dtype,),
        protocol=Protocol(seeds=1, trials=2),
        params=bug.params,
        direction=bug.direction,
        distribution=bug.distribution,
    )


def diagnose(bug: Bug, seed: int) -> Any:
    """Run the bug's class check in process; its Finding (status and signature)."""
    from kcgate.engine.checks import CHECKS
    from kcgate.engine.trial import CaseContext
    from kcgate.numerics.ops import OPS
    from kcgate.numerics.ops.custom import custom_op
    from kcgate.plan import Case

    contract = bug_contract(bug)
    if bug.custom is not None:
        op = custom_op(*bug.custom)
    else:
        op = OPS[bug.op]
        if op.configure is not None:
            op = op.configure(contract.op_params())
    case = Case(bug.id, bug.id, bug.klass, bug.op, bug.dtype, bug.shape, 0, 1 + 7919 * seed)
    return CHECKS[bug.klass](CaseContext(contract=contract, case=case, kernel=bug.kernel, op=op))
