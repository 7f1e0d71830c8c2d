"""Matmul-shaped families: matmul, bmm, linear and scaled dot-product attention.

Bound (FACTS.md, Higham and Mary): |Ĉ − C| ≤ λ·√K·u_acc·(|A||B|) + u_out·|C| per element.
Backward: each gradient is itself a product, bounded the same way with its own reduction length
(dA = dY·Bᵀ sums over N, dB = Aᵀ·dY over M, linear's d(bias) over M), u_out being the gradient's dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kcgate.numerics.ops.base import BoundArgs, OpFamily, Tensors, draw, sqrt


def _dot_bound(a: torch.Tensor, b: torch.Tensor, y: torch.Tensor, k: int, ba: BoundArgs) -> torch.Tensor:
    return ba.lam * sqrt(k) * ba.u_acc * (a.abs() @ b.abs()) + ba.u_out * y.abs()


def _mm_inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    m, k, n = shape
    return draw((m, k), dtype, gen, dist), draw((k, n), dtype, gen, dist)


def _mm_grad_bound(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    a, b = x
    n, m = b.shape[-1], a.shape[-2]
    da = ba.lam * sqrt(n) * ba.u_acc * (dy.abs() @ b.abs().transpose(-1, -2))  # dA = dY·Bᵀ, length N
    db = ba.lam * sqrt(m) * ba.u_acc * (a.abs().transpose(-1, -2) @ dy.abs())  # dB = Aᵀ·dY, length M
    return da + ba.u_out * g[0].abs(), db + ba.u_out * g[1].abs()


MATMUL = OpFamily(
    name="matmul",
    make_inputs=_mm_inputs,
    oracle=lambda a, b: a @ b,
    bound=lambda x, y, ba: _dot_bound(x[0], x[1], y, x[0].shape[-1], ba),
    reduction_len=lambda s: s[1],
    float_inputs=(0, 1),
    composite=torch.matmul,
    grad_bound=_mm_grad_bound,
    input_names=("a", "b"),
)


def _bmm_inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    bt, m, k, n = shape
    return draw((bt, m, k), dtype, gen, dist), draw((bt, k, n), dtype, gen, dist)


BMM = OpFamily(
    name="bmm",
    make_inputs=_bmm_inputs,
    oracle=lambda a, b: a @ b,
    bound=lambda x, y, ba: _dot_bound(x[0], x[1], y, x[0].shape[-1], ba),
    reduction_len=lambda s: s[2],
    float_inputs=(0, 1),
    batch_inputs=(0, 1),
    composite=torch.bmm,
    grad_bound=_mm_grad_bound,
    input_names=("a", "b"),
)


def _linear_inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    m, k, n = shape  # x (m, k), weight (n, k), bias (n)
    return draw((m, k), dtype, gen, dist), draw((n, k), dtype, gen, dist), draw((n,), dtype, gen, dist)


def _linear_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    a, w, b = x
    k = a.shape[-1] + 1  # the bias is one more term of the sum
    return ba.lam * sqrt(k) * ba.u_acc * (a.abs() @ w.abs().T + b.abs()) + ba.u_out * y.abs()


def _linear_grad_bound(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    a, w, _ = x
    n, m = w.shape[0], a.shape[0]
    dx = ba.lam * sqrt(n) * ba.u_acc * (dy.abs() @ w.abs())  # dX = dY·W, length N
    dw = ba.lam * sqrt(m) * ba.u_acc * (dy.abs().T @ a.abs())  # dW = dYᵀ·X, length M
    dbias = ba.lam * sqrt(m) * ba.u_acc * dy.abs().sum(0)  # d(bias) = Σ_M dY
    return tuple(e + ba.u_out * gi.abs() for e, gi in zip((dx, dw, dbias), g))


LINEAR = OpFamily(
    name="linear",
    make_inputs=_linear_inputs,
    oracle=lambda a, w, b: a @ w.T + b,
    bound=_linear_bound,
    reduction_len=lambda s: s[1],
    float_inputs=(0, 1, 2),
    composite=torch.nn.functional.linear,
    grad_bound=_linear_grad_bound,
    input_names=("x", "w", "b"),
)


def _sdpa_inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    b, h, length, d = shape
    return tuple(draw((b, h, length, d), dtype, gen, dist) for _ in range(3))


def _sdpa_oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    s = (q @ k.transpose(-1, -2)) / sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v


def _sdpa_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    """The attention family's bound without mask or grouped heads; P in the input dtype for 16-bit inputs
    (FlashAttention-style kernels, torch's CPU flash kernel): docs/ops.md#attention."""
    from kcgate.numerics.ops.attention import Attention, dense_bound

    return dense_bound(x[0], x[1], x[2], y, Attention(), ba)


def _sdpa_grad_bound(
    x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs
) -> tuple[torch.Tensor | None, ...]:
    """The attention family's backward bound (docs/ops.md#attention)."""
    from kcgate.numerics.ops.attention import Attention, dense_grad_bound

    errs = dense_grad_bound(x[0], x[1], x[2], dy, Attention(), ba)
    return tuple(e + ba.u_out * gi.abs() for e, gi in zip(errs, g))


SDPA = OpFamily(
    name="sdpa",
    make_inputs=_sdpa_inputs,
    oracle=_sdpa_oracle,
    bound=_sdpa_bound,
    reduction_len=lambda s: s[2],
    float_inputs=(0, 1, 2),
    batch_inputs=(0, 1, 2),
    composite=torch.nn.functional.scaled_dot_product_attention,
    grad_bound=_sdpa_grad_bound,
    input_names=("q", "k", "v"),
)
