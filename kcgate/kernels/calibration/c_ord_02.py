"""C-ORD-02 (run-to-run determinism): row sums, declared bitwise deterministic.

bad: atomics-style split reduction: fp32 partial sums per chunk of 128, added in a new random order
on every call (as atomic adds land), so repeated calls differ in the last bits.
"""

from __future__ import annotations

import torch

from kcgate.kernels.functional import allclose_loose
from kcgate.numerics.emulate import chunk_sums

BASIC_TEST = "torch.allclose(atol=1e-4, rtol=1e-4) (KernelBench's fp32 setting), 32x4096, one call"


def good(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1)


def bad(x: torch.Tensor) -> torch.Tensor:
    parts = chunk_sums(x, 128)
    order = torch.randperm(parts.shape[-1])  # the global RNG: a different order every call
    total = torch.zeros(parts.shape[:-1], dtype=torch.float32)
    for j in order.tolist():
        total = total + parts[..., j]
    return total.to(x.dtype)


def baseline(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1) + torch.randn(x.shape[:-1])  # noise on every call


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    x = torch.randn(32, 4096, generator=torch.Generator().manual_seed(0))
    return allclose_loose(kernel(x), x.double().sum(-1), tol=1e-4)
