"""Reductions along the last dimension: sum, mean, softmax, logsumexp, layernorm, rmsnorm.

Inputs are (rows, n). Bounds follow FACTS.md: λ·√n·u_acc for sums, (λ√n + c)·u for softmax,
and the mean's error amplified by |mean|/std for the norms (the cancellation C-PRC-02 probes).

Backward bounds come from each analytic gradient: the forward's relative error of the quantities a
backward reuses (y, x̂, 1/σ, lse, possibly saved in the output dtype), plus λ·√L·u_acc for each sum it
computes (Σ y·dy over n; the weight and bias gradients sum over the rows), plus the gradient's own rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kcgate.numerics.ops.base import BoundArgs, OpFamily, Tensors, draw, sqrt

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
    # torch (CPU, bf16/fp16) rounds log Σ exp(x − m) to the output dtype before adding m back: a second
    # rounding, of |y − m| (docs/ops.md#logsumexp)
    second = ba.u_out * (y - x[0].amax(-1)).abs()
    return (ba.lam * sqrt(n) + 4) * ba.u_acc * (1 + shift) + ba.u_out * y.abs() + second


def _sum_grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    return (ba.u_out * g[0].abs(),)  # dx = dy broadcast: a copy, rounded once at most


def _mean_grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    return ((ba.u_acc + ba.u_out) * g[0].abs(),)  # dx = dy / n


def _softmax_grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    """dx = y·(dy − Σ y·dy): y carries the forward's relative error (and its rounding to the output dtype
    when the backward reuses the saved output); the row sum adds λ√n·u_acc·Σ|y·dy|."""
    n = x[0].shape[-1]
    y = torch.softmax(x[0], -1)
    eps_y = (ba.lam * sqrt(n) + 4) * ba.u_acc + ba.u_out
    s_abs = (y * dy).abs().sum(-1, keepdim=True)
    s = (y * dy).sum(-1, keepdim=True).abs()
    err = eps_y * g[0].abs() + y * (
        (eps_y + ba.lam * sqrt(n) * ba.u_acc) * s_abs + 2 * ba.u_acc * (dy.abs() + s)
    )
    return (err + ba.u_out * g[0].abs(),)


def _lse_grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    """dx = exp(x − lse)·dy: the forward's absolute error of lse (and its rounding to the output dtype
    when it is saved) is a relative error of every exp; so is x − lse rounded in the gradient's dtype
    (autograd's formula runs in the tensors' dtype), then exp and the product round once each."""
    n = x[0].shape[-1]
    lse = torch.logsumexp(x[0], -1, keepdim=True)
    shift = x[0].abs().amax(-1, keepdim=True)
    rel = (ba.lam * sqrt(n) + 4) * ba.u_acc * (1 + shift) + ba.u_out * (2 * lse.abs() + x[0].abs() + 2)
    return ((rel + ba.u_out) * g[0].abs(),)


def _norm_parts(
    a: torch.Tensor, ba: BoundArgs, centred: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x̂, 1/σ, and the forward's absolute error of x̂ per element (as in the forward bounds)."""
    n = a.shape[-1]
    if centred:
        mu = a.mean(-1, keepdim=True)
        r = 1 / (a.var(-1, unbiased=False, keepdim=True) + EPS).sqrt()
        xhat = (a - mu) * r
        e = ba.lam * sqrt(n) * ba.u_acc * (a.abs().mean(-1, keepdim=True) * r + xhat.abs() + 1)
    else:
        r = torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + EPS)
        xhat = a * r
        e = (ba.lam * sqrt(n) + 4) * ba.u_acc * (xhat.abs() + 1)
    return xhat, r, e


def _norm_dx(
    xhat: torch.Tensor,
    r: torch.Tensor,
    e: torch.Tensor,
    gw: torch.Tensor,
    ba: BoundArgs,
    centred: bool,
    u_g: float = 0.0,
) -> torch.Tensor:
    """dx = r·(g − mean(g) − x̂·mean(g·x̂)) (rmsnorm: no mean(g)), g = w·dy: each term's error."""
    n = xhat.shape[-1]
    gx = (gw.abs() * xhat.abs()).mean(-1, keepdim=True)
    terms = gw.abs() + xhat.abs() * gx + (gw.abs().mean(-1, keepdim=True) if centred else 0)
    # u_g: g = w·dy rounded to the input dtype before the fp32 steps (HF's weight * h), relative in each g
    rel = ba.lam * sqrt(n) * ba.u_acc + 4 * ba.u_acc + u_g + 2 * e.amax(-1, keepdim=True)
    return r * (rel * terms + e * gx + (e * gw.abs()).mean(-1, keepdim=True))


def _layernorm_grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    """dw = Σ_rows dy·x̂ and db = Σ_rows dy sum over the rows; dx from its analytic form."""
    a, w, _ = x
    rows = a.shape[0]
    xhat, r, e = _norm_parts(a, ba, centred=True)
    dx = _norm_dx(xhat, r, e, w * dy, ba, centred=True)
    dw = ba.lam * sqrt(rows) * ba.u_acc * (dy.abs() * xhat.abs()).sum(0) + (dy.abs() * e).sum(0)
    db = ba.lam * sqrt(rows) * ba.u_acc * dy.abs().sum(0)
    return tuple(b + ba.u_out * gi.abs() for b, gi in zip((dx, dw, db), g))


def _rmsnorm_grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    a, w = x
    rows = a.shape[0]
    xhat, r, e = _norm_parts(a, ba, centred=False)
    dx = _norm_dx(xhat, r, e, w * dy, ba, centred=False, u_g=ba.u_in)
    # HF's weight * h in the input dtype: h and each product dy·h round to it before the row sum (2u_in)
    t = (dy.abs() * xhat.abs()).sum(0)
    dw = (ba.lam * sqrt(rows) * ba.u_acc + 2 * ba.u_in) * t + (dy.abs() * e).sum(0)
    return tuple(b + ba.u_out * gi.abs() for b, gi in zip((dx, dw), g))


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
    """u_in·|y|: HF's LlamaRMSNorm casts the normalised x̂ to the input dtype before ``weight * h``, a rounding
    of x̂ before the output's own (docs/ops.md#eager-composites)."""
    n = x[0].shape[-1]
    return ((ba.lam * sqrt(n) + 4) * ba.u_acc + ba.u_out + ba.u_in) * y.abs()


def _rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """torch's fused rms_norm: the composite a correct low-precision kernel is compared with."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)


def _family(
    name: str, oracle, bound, shapes, make=_rows, floats=(0,), composite=None, names=("x",), grad=None
) -> OpFamily:  # type: ignore[no-untyped-def]
    return OpFamily(
        grad_bound=grad,
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


SUM = _family(
    "sum", lambda x: x.sum(-1), _sum_bound, ((64, 4096),), composite=lambda x: x.sum(-1), grad=_sum_grad
)
MEAN = _family(
    "mean", lambda x: x.mean(-1), _mean_bound, ((64, 4096),), composite=lambda x: x.mean(-1), grad=_mean_grad
)
SOFTMAX = _family(
    "softmax",
    lambda x: torch.softmax(x, -1),
    _softmax_bound,
    ((64, 1024),),
    composite=lambda x: torch.softmax(x, -1),
    grad=_softmax_grad,
)
LOGSUMEXP = _family(
    "logsumexp",
    lambda x: torch.logsumexp(x, -1),
    _lse_bound,
    ((64, 1024),),
    composite=lambda x: torch.logsumexp(x, -1),
    grad=_lse_grad,
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
    _layernorm_grad,
)
RMSNORM = _family(
    "rmsnorm",
    _rmsnorm,
    _rmsnorm_bound,
    ((64, 1024),),
    _rmsnorm_inputs,
    (0, 1),
    _rms_norm,
    ("x", "w"),
    _rmsnorm_grad,
)
