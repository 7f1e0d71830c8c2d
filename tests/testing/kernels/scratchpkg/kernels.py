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
    """Applies rotary embeddings to q and k (NeoX rotate-half layout, cos and sin given)."""

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        def rotate(x: torch.Tensor) -> torch.Tensor:
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat([-x2, x1], dim=-1)

        return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def fast_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Broken on purpose: the mean and variance are accumulated in bf16."""
    xb = x.to(torch.bfloat16)
    mean = xb.mean(-1, keepdim=True)
    var = ((xb - mean) ** 2).mean(-1, keepdim=True)
    return ((x - mean.float()) * torch.rsqrt(var.float() + 1e-5) * w + b).to(x.dtype)


def activation(x: torch.Tensor) -> torch.Tensor:
    """Its name names no family: `kcgate init` finds it by calling it (it is torch's fused SiLU)."""
    return torch.nn.functional.silu(x)


def _helper(x: torch.Tensor) -> torch.Tensor:  # private: not a kernel
    return x
