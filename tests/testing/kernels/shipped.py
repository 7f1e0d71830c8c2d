"""Kernels as a training library ships them, defined in the test suite: an autograd.Function with its
own hand-written backward (called through ``.apply``), and an nn.Module holding its weight."""

from __future__ import annotations

from typing import Any

import torch


class RowSoftmax(torch.autograd.Function):
    """softmax(x / temperature) along ``dim``, its backward written out: dx = y·(dy − Σ y·dy) / temperature."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, temperature: float) -> torch.Tensor:
        y = torch.softmax(x.to(torch.float32) / temperature, dim).to(x.dtype)
        ctx.save_for_backward(y)
        ctx.dim, ctx.temperature = dim, temperature
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        (y,) = ctx.saved_tensors
        y32, dy32 = y.to(torch.float32), dy.to(torch.float32)
        dx = y32 * (dy32 - (y32 * dy32).sum(ctx.dim, keepdim=True)) / ctx.temperature
        return dx.to(y.dtype), None, None


class ScaledRMSNorm(torch.nn.Module):
    """An RMSNorm module as model code writes it: constructed with its size, holding its weight."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.to(torch.float32)
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.to(torch.float32)).to(x.dtype)


def matmul_fp64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact, but in the wrong dtype: fp64 for an fp32 contract (more accurate, still a contract break)."""
    return a.to(torch.float64) @ b.to(torch.float64)


def matmul_fp32_out(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32 output where the contract declares bf16 (the pre-issue-15 gap: C-PRC-02 passed this)."""
    return a.to(torch.float32) @ b.to(torch.float32)


def sum_fp64(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float64).sum(-1)


def sum_fp32_out(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32).sum(-1)
