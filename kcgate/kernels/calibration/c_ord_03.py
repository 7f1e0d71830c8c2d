"""C-ORD-03 (batch invariance): matmul rows must not depend on batch size, position or batch-mates.

bad: the split strategy is chosen by batch size: small batches (decode) split K in two and add the
halves at the end, large batches reduce K in one pass — the same row gets different bits.
"""

from __future__ import annotations

import torch

from kcgate.kernels.functional import allclose_loose

BASIC_TEST = "torch.allclose(atol=1e-4, rtol=1e-4) against a @ b at batch 16, 16x256x64"
SMALL_BATCH = 8


def _fixed_order(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One fp32 multiply-add per k, in k order: each row's arithmetic ignores the rest of the batch."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for k in range(a.shape[1]):
        acc = acc + a[:, k : k + 1].to(torch.float32) * b[k : k + 1].to(torch.float32)
    return acc


def good(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _fixed_order(a, b).to(a.dtype)


def bad(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.shape[0] >= SMALL_BATCH:
        return _fixed_order(a, b).to(a.dtype)
    h = a.shape[1] // 2  # split-K for small batches, to fill the machine
    return (_fixed_order(a[:, :h], b[:h]) + _fixed_order(a[:, h:], b[h:])).to(a.dtype)


def baseline(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _fixed_order(a, b)[torch.arange(a.shape[0]).flip(0)].to(a.dtype)  # rows come back reversed


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 256, generator=g), torch.randn(256, 64, generator=g)
    return allclose_loose(kernel(a, b), a.double() @ b.double(), tol=1e-4)
