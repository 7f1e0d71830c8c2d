"""Hand-written kernels for ``kcgate mutate``: eager torch written the way Triton kernels are, in blocks.

Each kernel is correct (its contract in contracts.toml passes); ``kcgate mutate`` plants the bugs such
kernels ship (an upcast dropped, a tail block dropped, a max subtraction removed, a gradient term dropped)
and reports which of them the contracts would let through.
"""

from __future__ import annotations

import math
from typing import Any

import torch

BLOCK = 128
EPS = 1e-5


def rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """RMSNorm in fp32, the result cast back to the input dtype (Llama's)."""
    xf = x.to(torch.float32)
    inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
    return (xf * inv).to(x.dtype) * w


def softmax(x: torch.Tensor) -> torch.Tensor:
    """A row softmax as one Triton program per row computes it: the row padded to a power-of-two block
    with -inf (``tl.load(..., other=-inf)``), in fp32, the row's max subtracted."""
    n = x.shape[-1]
    width = 1 << (n - 1).bit_length()
    xf = torch.nn.functional.pad(x.float(), (0, width - n), value=-math.inf)
    z = xf - xf.amax(-1, keepdim=True)
    num = torch.exp(z)
    return (num / num.sum(-1, keepdim=True))[..., :n].to(x.dtype)


def online_logsumexp(x: torch.Tensor) -> torch.Tensor:
    """logsumexp over the columns in blocks, with a running max and a rescaled running sum (flash style)."""
    xf = x.float()
    n = xf.shape[-1]
    m_i = torch.full(xf.shape[:-1], -math.inf, dtype=torch.float32)
    l_i = torch.zeros(xf.shape[:-1], dtype=torch.float32)
    for start in range(0, n, BLOCK):
        block = xf[..., start : start + BLOCK]
        m_new = torch.maximum(m_i, block.amax(-1))
        alpha = torch.exp(m_i - m_new)
        l_i = l_i * alpha + torch.exp(block - m_new[..., None]).sum(-1)
        m_i = m_new
    return (m_i + torch.log(l_i)).to(x.dtype)


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """A blocked row sum with an fp32 accumulator; the grid covers the tail block (cdiv)."""
    n = x.shape[-1]
    acc = torch.zeros(x.shape[:-1], dtype=torch.float32)
    for b in range((n + BLOCK - 1) // BLOCK):
        offs = b * BLOCK + torch.arange(0, BLOCK)
        mask = offs < n
        tile = torch.where(mask, x[..., offs.clamp(max=n - 1)].float(), 0.0)
        acc += tile.sum(-1)
    return acc.to(x.dtype)


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU (erf form) evaluated in fp32."""
    xf = x.float()
    return (0.5 * xf * (1.0 + torch.erf(xf * (1.0 / math.sqrt(2.0))))).to(x.dtype)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product attention, the softmax masked the way a causal kernel masks (here: nothing)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q.float() @ k.float().transpose(-2, -1)) * scale
    s = s - s.amax(-1, keepdim=True)
    p = torch.exp(s)
    return ((p / p.sum(-1, keepdim=True)) @ v.float()).to(q.dtype)


def rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """NeoX rotary embedding (rotate-half) computed in fp32."""
    cos, sin = cos.unsqueeze(1).float(), sin.unsqueeze(1).float()

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    qf, kf = q.float(), k.float()
    return (qf * cos + rotate_half(qf) * sin).to(q.dtype), (kf * cos + rotate_half(kf) * sin).to(k.dtype)


class _SiLU(torch.autograd.Function):
    """SiLU with a hand-written backward: d/dx x·σ(x) = σ(x)·(1 + x·(1 − σ(x)))."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return dy * s * (1 + x * (1 - s))


def silu(x: torch.Tensor) -> torch.Tensor:
    return _SiLU.apply(x)  # type: ignore[no-any-return]
