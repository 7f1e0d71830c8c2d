"""Held-out realistic bugs: mistakes real kernel libraries have shipped, written after the thresholds were set
and never tuned against them (tests/test_realistic_bugs.py runs each through ``kcgate run``). Each kernel
follows its family's call convention; the docstring says what a real implementation got wrong."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def layernorm_unbiased_var(x, w, b):  # type: ignore[no-untyped-def]
    """Normalises by the unbiased variance (n - 1), as torch.var's default does."""
    xf = x.float()
    mu = xf.mean(-1, keepdim=True)
    var = xf.var(-1, keepdim=True)  # unbiased: the bug
    return ((xf - mu) / torch.sqrt(var + 1e-5) * w.float() + b.float()).to(x.dtype)


def layernorm_eps_outside_sqrt(x, w, b):  # type: ignore[no-untyped-def]
    """(x - mu) / (sqrt(var) + eps): eps added after the square root."""
    xf = x.float()
    mu = xf.mean(-1, keepdim=True)
    var = xf.var(-1, keepdim=True, unbiased=False)
    return ((xf - mu) / (torch.sqrt(var) + 1e-5) * w.float() + b.float()).to(x.dtype)


def rmsnorm_no_upcast(x, w):  # type: ignore[no-untyped-def]
    """Sum of squares in the input dtype (bf16), the mistake fused rmsnorm kernels made before upcasting."""
    ms = (x * x).mean(-1, keepdim=True)
    return x * torch.rsqrt(ms + 1e-6) * w


def gelu_tanh_for_exact(x):  # type: ignore[no-untyped-def]
    """The tanh approximation where the contract declares erf gelu."""
    return F.gelu(x, approximate="tanh")


def softmax_no_max(x):  # type: ignore[no-untyped-def]
    """exp(x) / sum(exp(x)) without subtracting the row max."""
    e = torch.exp(x.float())
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


def softmax_bf16_denominator(x):  # type: ignore[no-untyped-def]
    """The row sum of exp accumulated in the input dtype (bf16) instead of fp32."""
    e = torch.exp(x.float() - x.float().amax(-1, keepdim=True)).to(x.dtype)
    acc = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for j in range(x.shape[-1]):
        acc = acc + e[..., j]
    return (e.float() / acc.float()[..., None]).to(x.dtype)


def logsumexp_forgets_max(x):  # type: ignore[no-untyped-def]
    """Subtracts the row max for stability and forgets to add it back."""
    m = x.amax(-1, keepdim=True)
    return torch.log(torch.exp(x - m).sum(-1))


def matmul_drops_k_tail(a, b):  # type: ignore[no-untyped-def]
    """A K-tiled loop over whole tiles of 32 only: the tail K % 32 is never accumulated."""
    k = a.shape[-1] // 32 * 32
    return a[..., :k] @ b[:k]


def bmm_batch_broadcast(a, b):  # type: ignore[no-untyped-def]
    """Batch stride 0 for B: every batch multiplies by batch 0's right operand."""
    return a @ b[:1]


def row_sum_fp16_acc(x):  # type: ignore[no-untyped-def]
    """An fp32 row sum accumulated in fp16."""
    return x.half().sum(-1, dtype=torch.float16).float()


def attention_leaks_next_token(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    """Causal mask built with diagonal=2: each query also sees the next key."""
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
    s = (q.float() @ k.float().mT) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if is_causal:
        lq, lk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool).triu(2), float("-inf"))
    return (s.softmax(-1) @ v.float()).to(q.dtype)


def rope_positions_off_by_one(q, k, cos, sin):  # type: ignore[no-untyped-def]
    """Position ids start at 1: every token is rotated by the next position's angle."""
    cos, sin = cos.roll(-1, -2).unsqueeze(1), sin.roll(-1, -2).unsqueeze(1)

    def rotate_half(t):  # type: ignore[no-untyped-def]
        t1, t2 = t.chunk(2, dim=-1)
        return torch.cat((-t2, t1), dim=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def swiglu_swapped(a, b):  # type: ignore[no-untyped-def]
    """The activation applied to the up projection instead of the gate."""
    return a * F.silu(b)


def geglu_tanh_for_exact(a, b, approximate="none"):  # type: ignore[no-untyped-def]
    """Always the tanh approximation, whatever the contract's approximate says."""
    return F.gelu(a, approximate="tanh") * b


def ce_smoothing_over_c_minus_1(logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0):  # type: ignore[no-untyped-def]
    """Label smoothing spread over the C - 1 wrong classes (eps / (C - 1)) rather than torch's eps / C over all."""
    x = logits.float()
    logp = x.log_softmax(-1)
    c = x.shape[-1]
    keep = target != ignore_index
    t = target.clamp(0)
    nll = -logp.gather(1, t[:, None])[:, 0]
    other = -(logp.sum(-1) - logp.gather(1, t[:, None])[:, 0]) / (c - 1)
    loss = torch.where(keep, (1 - label_smoothing) * nll + label_smoothing * other, 0.0)
    return (loss.sum() / keep.sum() if reduction == "mean" else loss).to(logits.dtype)


def embedding_clamps(indices, weight):  # type: ignore[no-untyped-def]
    """Out-of-range indices clamped to the last row instead of raising."""
    return F.embedding(indices.clamp(0, weight.shape[0] - 1), weight)


def sum_random_order(x):  # type: ignore[no-untyped-def]
    """A split-K style reduction whose partial sums are added in a different order on every call."""
    n = x.shape[-1]
    parts = list(x.float().split(max(1, n // 8), -1))
    order = torch.randperm(len(parts)).tolist()
    acc = torch.zeros(x.shape[:-1])
    for i in order:
        acc = acc + parts[i].sum(-1)
    return acc.to(x.dtype)
