"""Backward calibration: linear layers whose forward is right and whose backward is good, bad or a
baseline, for the classes that apply to backward (C-PRC-01: the dW accumulator; C-ORD-02: an atomic-add
d(bias)). Each is a ``torch.autograd.Function`` as a training library ships it (called through ``.apply``).

Used by the built-in contracts ``cal-prc-01-bwd`` and ``cal-ord-02-bwd`` (``direction = "backward"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kcgate.numerics.emulate import sequential_sum

Grads = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _right(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> Grads:
    """dX = dY·W, dW = dYᵀ·X, d(bias) = Σ_rows dY, accumulated in fp32."""
    d32, w32, x32 = dy.to(torch.float32), w.to(torch.float32), x.to(torch.float32)
    return (d32 @ w32).to(x.dtype), (d32.T @ x32).to(w.dtype), d32.sum(0).to(w.dtype)


def bf16_dw(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> Grads:
    """dW's per-row outer products summed with a bf16 running sum (an accumulator coerced to bf16)."""
    dx, _, db = _right(x, w, dy)
    terms = dy.to(torch.float32)[:, :, None] * x.to(torch.float32)[:, None, :]  # (M, N, K)
    dw = sequential_sum(terms.permute(1, 2, 0), torch.bfloat16)
    return dx, dw.to(w.dtype), db


def atomic_db(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> Grads:
    """d(bias) by fp32 atomic adds of each row's dY, landing in a new order on every call."""
    dx, dw, _ = _right(x, w, dy)
    total = torch.zeros(dy.shape[1], dtype=torch.float32)
    for r in torch.randperm(dy.shape[0]).tolist():  # the global RNG: the order atomics land in
        total = total + dy[r].to(torch.float32)
    return dx, dw, total.to(w.dtype)


def zero_grads(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> Grads:
    """A backward that was never written."""
    return torch.zeros_like(x), torch.zeros_like(w), torch.zeros(w.shape[0], dtype=w.dtype)


def noisy_db(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> Grads:
    dx, dw, db = _right(x, w, dy)
    return dx, dw, db + 1e-2 * torch.randn_like(db)  # visible noise on every call, to a basic test too


def linear_with(backward: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Grads]) -> type:
    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x, w)
            return torch.nn.functional.linear(x, w, b)

        @staticmethod
        def backward(ctx: Any, dy: torch.Tensor) -> Grads:
            x, w = ctx.saved_tensors
            return backward(x, w, dy)

    Linear.__name__ = f"Linear_{backward.__name__}"
    return Linear


GoodLinear = linear_with(_right)
Bf16DwLinear = linear_with(bf16_dw)
AtomicDbLinear = linear_with(atomic_db)
ZeroGradLinear = linear_with(zero_grads)
NoisyDbLinear = linear_with(noisy_db)
