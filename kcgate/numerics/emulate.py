"""Bit-level emulation of the numerical faults the bad kernels commit (low-precision sums, truncation).

CPU torch has no fp16 accumulator or TF32 unit, so the faults are reproduced exactly with casts and
bit masks; each helper says which hardware behaviour it stands for.
"""

from __future__ import annotations

import torch


def round_mantissa(x: torch.Tensor, bits: int, mode: str = "truncate") -> torch.Tensor:
    """fp32 values kept to ``bits`` explicit mantissa bits (TF32 keeps 10, bf16 keeps 7).

    ``truncate`` masks the low bits (round toward zero, what a cheap operand path does);
    ``nearest`` rounds half up in magnitude first, close enough to RNE for operand rounding.
    """
    drop = 23 - bits
    i = x.to(torch.float32).contiguous().view(torch.int32)
    if mode == "nearest":
        i = i + (1 << (drop - 1))
    mask = ~((1 << drop) - 1)
    return (i & mask).view(torch.float32)


def truncate_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """fp32 → bf16 by dropping the low 16 bits: round toward zero instead of round-to-nearest-even."""
    return round_mantissa(x, 7, "truncate").to(torch.bfloat16)  # exact: already representable


def blocked_matmul(a: torch.Tensor, b: torch.Tensor, block: int, acc: torch.dtype) -> torch.Tensor:
    """fp32 partial products per K-block, the running sum rounded to ``acc`` after every add.

    This is what an accumulator silently coerced to fp16/bf16 does (the Ascend pattern).
    """
    a32, b32 = a.to(torch.float32), b.to(torch.float32)
    total = torch.zeros(a.shape[0], b.shape[1], dtype=acc)
    for k0 in range(0, a.shape[1], block):
        part = a32[:, k0 : k0 + block] @ b32[k0 : k0 + block]
        total = (total.to(torch.float32) + part).to(acc)
    return total.to(torch.float32)


def chunk_sums(x: torch.Tensor, chunk: int) -> torch.Tensor:
    """Per-chunk fp32 partial sums along the last dim, shape (rows, n_chunks); the tail chunk included."""
    n = x.shape[-1]
    return torch.stack([x[..., k0 : k0 + chunk].sum(-1) for k0 in range(0, n, chunk)], dim=-1)


def sequential_sum(parts: torch.Tensor, acc: torch.dtype) -> torch.Tensor:
    """Left-to-right sum of the last dim, the running value rounded to ``acc`` after every add."""
    total = torch.zeros(parts.shape[:-1], dtype=acc)
    for j in range(parts.shape[-1]):
        total = (total.to(torch.float32) + parts[..., j].to(torch.float32)).to(acc)
    return total
