"""Held-out correct kernels of issue 46: library formulations at odd shapes that the sensitivity gate (and
the attention gradient bound) failed. Kept apart from what the gate is tuned on (tests/testing/kernels/correct.py,
the false-alarm benchmark's corpus): tests/engine/test_odd_shape_false_alarms.py runs them at the shapes the
issue names, and benchmarks/false_alarms.py adds them to its sweep.

Each is rewritten from the library's source as it ships (none of those libraries is installed here); the
docstring names the function and what it rounds where.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tests.testing.kernels.correct import DT3, Entry

EPS = 1e-5  # torch's layer_norm default


def _wide(x: torch.Tensor) -> torch.Tensor:
    return x.float() if x.dtype.itemsize < 4 else x


# ---- layer norm: the textbook two-pass form, forward and backward ---------------------------------


BLOCK = 256  # the tutorial's BLOCK_SIZE for rows over 256 (it caps it at 64 KB / element size)


def _tutorial_sum(a: torch.Tensor) -> torch.Tensor:
    """The tutorial's row sum: ``_mean += a`` over column blocks of BLOCK lanes (zero-padded), then ``tl.sum``
    of the lanes (a tree)."""
    n = a.shape[-1]
    lanes = torch.zeros(*a.shape[:-1], BLOCK, dtype=a.dtype)
    for off in range(0, n, BLOCK):
        blk = a[..., off : off + BLOCK]
        lanes = lanes + torch.nn.functional.pad(blk, (0, BLOCK - blk.shape[-1]))
    while lanes.shape[-1] > 1:
        lanes = lanes[..., 0::2] + lanes[..., 1::2]
    return lanes


class _TwoPassLayerNorm(torch.autograd.Function):
    """Triton's layer-norm tutorial (python/tutorials/05-layer-norm.py, ``_layer_norm_fwd_fused`` and
    ``_layer_norm_bwd_dx_fused``), row by row in fp32: mean = Σx/N, var = Σ(x − mean)²/N, rstd = 1/√(var + eps),
    y = (x − mean)·rstd·w + b; backward xhat = (x − mean)·rstd, wdy = w·dy, c1 = Σ(xhat·wdy)/N, c2 = Σwdy/N,
    dx = (wdy − (xhat·c1 + c2))·rstd, dw = Σ_rows dy·xhat, db = Σ_rows dy. The forward's sums in the tutorial's order (``_tutorial_sum``); the backward's in torch's."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, n = _wide(x), x.shape[-1]
        mean = _tutorial_sum(a) / n
        xbar = a - mean
        var = _tutorial_sum(xbar * xbar) / n
        rstd = 1.0 / torch.sqrt(var + EPS)
        ctx.save_for_backward(x, w, mean, rstd)
        return (xbar * rstd * _wide(w) + _wide(b)).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, w, mean, rstd = ctx.saved_tensors
        a, g, n = _wide(x), _wide(dy), x.shape[-1]
        xhat = (a - mean) * rstd
        wdy = _wide(w) * g
        c1 = (xhat * wdy).sum(-1, keepdim=True) / n
        c2 = wdy.sum(-1, keepdim=True) / n
        dx = (wdy - (xhat * c1 + c2)) * rstd
        rows = g.reshape(-1, n)
        dw = (rows * xhat.reshape(-1, n)).sum(0)
        db = rows.sum(0)
        return dx.to(x.dtype), dw.to(w.dtype), db.to(w.dtype)


def textbook_layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The two-pass layer norm with its hand-written backward (``_TwoPassLayerNorm``)."""
    return _TwoPassLayerNorm.apply(x, w, b)  # type: ignore[no-any-return]


# ---- rope with the angles computed at run time -----------------------------------------------------


def hf_rope_runtime_angles(
    q: torch.Tensor, k: torch.Tensor, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``LlamaRotaryEmbedding.forward`` + ``apply_rotary_pos_emb`` (models/llama/modeling_llama.py):
    ``inv_freq = 1/(base ** (arange(0, dim, 2, int64).float()/dim))`` and ``freqs = inv_freq @ position_ids``
    in float32 (autocast disabled), ``emb = cat(freqs, freqs)``, ``cos = emb.cos().to(x.dtype)``, then
    ``q * cos + rotate_half(q) * sin`` in the input dtype."""
    d, length = q.shape[-1], q.shape[-2]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    pos = torch.arange(length, dtype=torch.int64).float()
    freqs = (inv_freq[:, None] @ pos[None, :]).transpose(0, 1)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(q.dtype)[None, None], emb.sin().to(q.dtype)[None, None]

    def rotate_half(t: torch.Tensor) -> torch.Tensor:
        t1, t2 = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2 :]
        return torch.cat((-t2, t1), dim=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


# ---- eager attention references --------------------------------------------------------------------


def _repeat(t: torch.Tensor, h: int) -> torch.Tensor:
    return t if t.shape[-3] == h else t.repeat_interleave(h // t.shape[-3], dim=-3)


def _causal_mask(lq: int, lk: int, bottom_right: bool) -> torch.Tensor:
    """True where a key is hidden: top-left (key j > query i, torch's sdpa) or bottom-right (j > i + lk − lq)."""
    shift = lk - lq if bottom_right else 0
    return torch.ones(lq, lk, dtype=torch.bool).triu(1 + shift)


def flash_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    """flash-attention's ``attention_ref(..., upcast=False, reorder_ops=False)`` (tests/test_flash_attn.py),
    in kcgate's (b, h, s, d) layout: ``scores = einsum(q / sqrt(d), k)`` with q scaled *in the input dtype*
    (1/√d is exact only for a power-of-four head dim), ``softmax(scores).to(v.dtype)``, ``einsum(p, v)``;
    causal is its local mask with window (−1, 0), aligned bottom-right."""
    h = q.shape[-3]
    k, v = _repeat(k, h), _repeat(v, h)
    d = q.shape[-1]
    scale = kw.get("scale")
    qs = q / math.sqrt(d) if not scale else q * scale
    scores = torch.einsum("bhtd,bhsd->bhts", qs, k)
    if kw.get("is_causal"):
        scores = scores.masked_fill(_causal_mask(q.shape[-2], k.shape[-2], True), float("-inf"))
    attention = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.einsum("bhts,bhsd->bhtd", attention, v)


def vllm_ref_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    """vLLM's ``ref_masked_attention`` (tests/kernels/attention/test_attention.py) with its GQA expansion
    (``torch.repeat_interleave(key, num_queries_per_kv, dim=1)``) and causal mask (``triu(ones, 1)`` times
    ``finfo(float32).min``): ``scale * einsum(q, k).float()`` (the dot product rounded to the input dtype,
    then scaled in fp32), the mask added in fp32, ``softmax(...).to(v.dtype)``, ``einsum(p, v)``."""
    h = q.shape[-3]
    k, v = _repeat(k, h), _repeat(v, h)
    scale = kw.get("scale") or q.shape[-1] ** -0.5
    w = scale * torch.einsum("bhqd,bhkd->bhqk", q, k).float()
    if kw.get("is_causal"):
        w = w + _causal_mask(q.shape[-2], k.shape[-2], False).float() * torch.finfo(torch.float32).min
    p = torch.softmax(w, dim=-1).to(v.dtype)
    return torch.einsum("bhqk,bhkd->bhqd", p, v)


def hf_eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    """transformers' ``eager_attention_forward`` (models/llama/modeling_llama.py) with ``repeat_kv`` and an
    additive causal mask of ``finfo(dtype).min`` aligned top-left (its ``create_causal_mask`` for a prefill):
    ``matmul(q, kᵀ) * scaling`` in the input dtype, ``softmax(dtype=float32).to(q.dtype)``, ``matmul(p, v)``."""
    h = q.shape[-3]
    k, v = _repeat(k, h), _repeat(v, h)
    scaling = kw.get("scale") or q.shape[-1] ** -0.5
    w = torch.matmul(q, k.transpose(2, 3)) * scaling
    if kw.get("is_causal"):
        mask = _causal_mask(q.shape[-2], k.shape[-2], False)
        w = w + torch.zeros(mask.shape, dtype=w.dtype).masked_fill(mask, torch.finfo(w.dtype).min)
    p = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(p, v)


# ---- the false-alarm benchmark's entries (benchmarks/false_alarms.py): odd declared shapes ---------------

_M = "tests.testing.kernels.heldout"
_CAUSAL = (("causal", True),)
# the large-mean entry runs where the input distribution is the point: C-PRC-01 and C-PRC-02
_NOT_PRC = ("C-PRC-03", "C-PRC-04", "C-ORD-01", "C-ORD-02", "C-CMP-01", "C-CMP-02", "C-CMP-03")
HELD_OUT: tuple[Entry, ...] = (
    Entry(
        "tutorial-layernorm",
        "layernorm",
        "textbook_layernorm",
        "textbook",
        (64, 1024),
        backward=True,
        module=_M,
    ),
    Entry(
        "tutorial-layernorm-large-mean",
        "layernorm",
        "textbook_layernorm",
        "textbook",
        (64, 1024),
        ("float32",),
        backward=True,
        extra=('distribution = "large-mean"',),
        skip=_NOT_PRC,
        module=_M,
    ),
    Entry(
        "hf-rope-runtime-angles",
        "rope",
        "hf_rope_runtime_angles",
        "eager16",
        (1, 8, 2, 128, 64),
        params=(("cos_sin", False),),
        backward=True,
        module=_M,
    ),
    Entry(
        "flash-attention-ref",
        "attention",
        "flash_attention_ref",
        "eager16",
        (1, 4, 1, 113, 59),
        backward=True,
        module=_M,
    ),
    Entry(
        "flash-attention-ref-causal",
        "attention",
        "flash_attention_ref",
        "eager16",
        (1, 4, 1, 113, 59),
        params=_CAUSAL,
        backward=True,
        module=_M,
    ),
    Entry(
        "vllm-ref-gqa-causal",
        "attention",
        "vllm_ref_attention",
        "eager16",
        (1, 4, 1, 113, 59),
        params=_CAUSAL,
        backward=True,
        module=_M,
    ),
    Entry(
        "hf-eager-gqa-causal-lq37",
        "attention",
        "hf_eager_attention",
        "eager16",
        (1, 4, 1, 113, 59),
        params=(("causal", True), ("q_len", 37)),
        backward=True,
        module=_M,
    ),
    Entry(
        "hf-eager-gqa-causal-lq131",
        "attention",
        "hf_eager_attention",
        "eager16",
        (1, 6, 2, 113, 61),
        params=(("causal", True), ("q_len", 131)),
        backward=True,
        module=_M,
    ),
)
__all__ = ["DT3", "HELD_OUT"]
