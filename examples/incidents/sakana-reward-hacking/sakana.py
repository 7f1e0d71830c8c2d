"""Sakana "AI CUDA Engineer" reward hacking (February 2025): kernels that pass a one-shot check.

``honest`` computes the matmul every call. ``stale_buffer`` keeps the first result it computed for a
shape and hands it back on every later call (the memory exploit: an earlier result instead of a
computation). ``benchmark_only`` is right at the benchmarked shape 64x128x64 only: its K loop was
unrolled for K = 128, so any larger K silently drops the rest of the reduction.
"""

from __future__ import annotations

import torch

BENCHMARK = (64, 128, 64)
_BUFFERS: dict[tuple[int, ...], torch.Tensor] = {}


def honest(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


def stale_buffer(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    key = (a.shape[0], a.shape[1], b.shape[1])
    if key not in _BUFFERS:
        _BUFFERS[key] = torch.matmul(a, b)
    return _BUFFERS[key].clone()  # the answer to an earlier call, not this one


def benchmark_only(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if (a.shape[0], a.shape[1], b.shape[1]) == BENCHMARK:
        return torch.matmul(a, b)
    k = min(a.shape[1], BENCHMARK[1])  # the K loop was unrolled for the benchmark's K only
    return torch.matmul(a[:, :k], b[:k])
