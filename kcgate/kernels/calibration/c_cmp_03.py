"""C-CMP-03 (shape-class generalisation): correct over the declared shape class on fresh inputs.

bad: the Sakana pattern — the first result for a shape is kept in a buffer and returned on every
later call with that shape. ``overfit_bad`` is the other variant: right only at the benchmark shape.
"""

from __future__ import annotations

import torch

from kcgate.kernels.functional import allclose_loose

BASIC_TEST = "KernelBench-style allclose(1e-2), one call at the benchmark shape 64x128x64 in a fresh process"
BENCHMARK = (64, 128, 64)
_BUFFERS: dict[tuple[int, ...], torch.Tensor] = {}


def good(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


def bad(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    key = (a.shape[0], a.shape[1], b.shape[1])
    if key not in _BUFFERS:
        _BUFFERS[key] = torch.matmul(a, b)
    return _BUFFERS[key].clone()  # a stale buffer from an earlier call


def overfit_bad(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if (a.shape[0], a.shape[1], b.shape[1]) == BENCHMARK:
        return torch.matmul(a, b)
    k = min(a.shape[1], 128)  # the K loop was unrolled for the benchmark's K only
    return torch.matmul(a[:, :k], b[:k])


def baseline(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.empty(a.shape[0], b.shape[1], dtype=a.dtype).fill_(float("nan"))  # never computed


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    _BUFFERS.clear()  # a benchmark harness starts a fresh process: no earlier result is cached
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 128, generator=g), torch.randn(128, 64, generator=g)
    return allclose_loose(kernel(a, b), a.double() @ b.double())
