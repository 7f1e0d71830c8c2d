"""Reductions along the last dimension: sum, mean, softmax, logsumexp, layernorm, rmsnorm.

Inputs are (rows, n). Bounds follow FACTS.md: λ·√n·u_acc for sums, (λ√n + c)·u for softmax,
and the mean's error amplified by |mean|/std for the norms (the cancellation C-PRC-02 probes).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kcgate.ops.base import BoundArgs, OpFamily, Tensors, draw, sqrt

EPS = 1e-5  # layernorm / rmsnorm epsilon; kernels are called as kernel(x, weight, bias) / kernel(x, weight)


def _rows(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    return (draw(shape, dtype, gen, dist),)


def _sum_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    n = x[0].shape[-1]
    return ba.lam * sqrt(n) * ba.u_acc * x[0].abs().sum(-1) + ba.u_out * y.abs()


def _mean_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    n = x[0].shape[-1]
    return ba.lam * sqrt(n) * ba.u_acc * x[0].abs().mean(-1) + ba.u_out * y.abs()


def _softmax_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    n = x[0].shape[-1]
    return ((ba.lam * sqrt(n) + 4) * ba.u_acc + ba.u_out) * y.abs()


def _lse_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    n = x[0].shape[-1]
    shift = x[0].abs().amax(-1)  # adding the max back costs u·|max|
    return (ba.lam * sqrt(n) + 4) * ba.u_acc * (1 + shift) + ba.u_out * y.abs()


def _norm_inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    rows, n = shape
    w = 1 + 0.1 * draw((n,), dtype, gen, "normal").to(torch.float64)
    b = 0.1 * draw((n,), dtype, gen, "normal").to(torch.float64)
    return draw(shape, dtype, gen, dist), w.to(dtype), b.to(dtype)


def _layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, EPS)


def _layernorm_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    a, w, b = x
    n = a.shape[-1]
    mu = a.mean(-1, keepdim=True)
    sd = (a.var(-1, unbiased=False, keepdim=True) + EPS).sqrt()
    xhat = ((a - mu) / sd).abs()
    # the mean is computed with error ≈ λ√n·u·mean|x|; relative to std it is amplified by |x|/std
    rel = ba.lam * sqrt(n) * ba.u_acc * (a.abs().mean(-1, keepdim=True) / sd + xhat + 1)
    return rel * w.abs() + ba.u_acc * b.abs() + ba.u_out * y.abs()


def _rmsnorm_inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    x, w, _ = _norm_inputs(shape, dtype, gen, dist)
    return x, w


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def _rmsnorm_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    n = x[0].shape[-1]
    return ((ba.lam * sqrt(n) + 4) * ba.u_acc + ba.u_out) * y.abs()


def _rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """torch's fused rms_norm: the composite a correct low-precision kernel is compared with."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)


def _family(
    name: str, oracle, bound, shapes, make=_rows, floats=(0,), composite=None, names=("x",)
) -> OpFamily:  # type: ignore[no-untyped-def]
    return OpFamily(
        input_names=names,
        name=name,
        make_inputs=make,
        oracle=oracle,
        bound=bound,
        reduction_len=lambda s: s[-1],
        default_shapes=shapes,
        float_inputs=floats,
        composite=composite,
    )


SUM = _family("sum", lambda x: x.sum(-1), _sum_bound, ((64, 4096),), composite=lambda x: x.sum(-1))
MEAN = _family("mean", lambda x: x.mean(-1), _mean_bound, ((64, 4096),), composite=lambda x: x.mean(-1))
SOFTMAX = _family(
    "softmax",
    lambda x: torch.softmax(x, -1),
    _softmax_bound,
    ((64, 1024),),
    composite=lambda x: torch.softmax(x, -1),
)
LOGSUMEXP = _family(
    "logsumexp",
    lambda x: torch.logsumexp(x, -1),
    _lse_bound,
    ((64, 1024),),
    composite=lambda x: torch.logsumexp(x, -1),
)
LAYERNORM = _family(
    "layernorm",
    _layernorm,
    _layernorm_bound,
    ((64, 1024),),
    _norm_inputs,
    (0, 1, 2),
    _layernorm,
    ("x", "w", "b"),
)
RMSNORM = _family(
    "rmsnorm", _rmsnorm, _rmsnorm_bound, ((64, 1024),), _rmsnorm_inputs, (0, 1), _rms_norm, ("x", "w")
)
