"""C-PRC-03 (operand rounding): an fp32 matmul must not round its operands unless declared.

bad: operands truncated to 10 explicit mantissa bits (TF32-like, by bit masking) before an fp32 matmul.
"""

from __future__ import annotations

import torch

from kcgate.kernels.functional import allclose_loose
from kcgate.numerics.emulate import round_mantissa

BASIC_TEST = "KernelBench-style torch.allclose(atol=1e-2, rtol=1e-2) at 64x32x64 (a small-K unit test)"


def good(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


def bad(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(round_mantissa(a, 10), round_mantissa(b, 10))


def baseline(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b.flip(0))  # wrong operand layout: plainly wrong numbers


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 32, generator=g), torch.randn(32, 64, generator=g)
    return allclose_loose(kernel(a, b), a @ b)
