"""fp32 matmuls that differ only in how they accumulate."""

from __future__ import annotations

import torch


def fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def bf16_blocks(a: torch.Tensor, b: torch.Tensor, block: int = 128) -> torch.Tensor:
    """Declares fp32 accumulation, but keeps the running sum across K-blocks in bf16."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.bfloat16)
    for k in range(0, a.shape[1], block):
        acc = (acc.float() + a[:, k : k + block] @ b[k : k + block]).to(torch.bfloat16)
    return acc.float()


def zeros(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.zeros(a.shape[0], b.shape[1])
