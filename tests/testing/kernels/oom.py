"""Kernels whose allocation fails for real: the host allocator's MemoryError and torch's allocator error."""

from __future__ import annotations

import torch


def host_oom(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    bytearray(1 << 62)  # 4 EiB: no machine has it, so Python raises MemoryError at once
    return a @ b


def torch_oom(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: torch's CPU allocator raises "can't allocate memory"
    return a @ b
