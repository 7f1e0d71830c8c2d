"""Kernels as a repository writes them: a matmul, an rmsnorm autograd.Function, a rope module, a softmax,
and one deliberately broken kernel (a layer norm whose variance is accumulated in bf16)."""

from __future__ import annotations

from typing import Any

import torch


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
        ctx.save_for_backward(x, w, rstd)
        return (xf * rstd * w.float()).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w, rstd = ctx.saved_tensors
        xf, dyf, wf = x.float(), dy.float(), w.float()
        xhat = xf * rstd
        dxhat = dyf * wf
        dx = rstd * (dxhat - xhat * (dxhat * xhat).mean(-1, keepdim=True))
        dw = (dyf * xhat).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dw.to(w.dtype)


class RotaryEmbedding(torch.nn.Module):
    def __init__(self, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        inv = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.arange(x.shape[-2], dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq)
        cos, sin = freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def fast_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Broken on purpose: the mean and variance are accumulated in bf16."""
    xb = x.to(torch.bfloat16)
    mean = xb.mean(-1, keepdim=True)
    var = ((xb - mean) ** 2).mean(-1, keepdim=True)
    return ((x - mean.float()) * torch.rsqrt(var.float() + 1e-5) * w + b).to(x.dtype)
