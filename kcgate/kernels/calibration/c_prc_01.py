"""C-PRC-01 (accumulator precision): matmul declared with an fp32 accumulator.

bad: fp32 partial dot products per K-block of 32, running sum rounded to fp16 after each add (the
Ascend ``allow_fp32_to_fp16`` coercion pattern).
"""

from __future__ import annotations

import torch

from kcgate.kernels.functional import allclose_loose
from kcgate.numerics.emulate import blocked_matmul

BASIC_TEST = "KernelBench-style torch.allclose(atol=1e-2, rtol=1e-2) at a 64x128x64 unit-test shape"


def good(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


def bad(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return blocked_matmul(a, b, block=32, acc=torch.float16).to(a.dtype)


def baseline(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)  # "not implemented yet"


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 128, generator=g), torch.randn(128, 64, generator=g)
    return allclose_loose(kernel(a, b), a @ b)
