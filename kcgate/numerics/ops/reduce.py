"""Reductions along the last dimension: sum, mean, softmax, logsumexp, layernorm, rmsnorm.

Inputs are (rows, n). Bounds follow FACTS.md: λ·√n·u_acc for sums, (λ√n + c)·u for softmax,
and the mean's error amplified by |mean|/std for the norms (the cancellation C-PRC-02 probes).

Backward bounds come from each analytic gradient: the forward's relative error of the quantities a
backward reuses (y, x̂, 1/σ, lse, possibly saved in the output dtype), plus λ·√L·u_acc for each sum it
computes (Σ y·dy over n; the weight and bias gradients sum over the rows), plus the gradient's own rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from kcgate.numerics.ops.base import Bound, BoundArgs, GradBound, OpFamily, Tensors, draw, sqrt, underflow

EPS = 1e-5  # layernorm / rmsnorm default epsilon (params.eps); kernels are called as kernel(x, w, b) / kernel(x, w)


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


def _lse_err(x: torch.Tensor, ba: BoundArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """log_softmax y = x − lse: lse, and y's allowed |error| before the output's rounding: lse's absolute
    error (as the logsumexp bound), then lse (or lse − m) rounded to the compute precision and x − lse
    rounded (textbook ``x - logsumexp(x)`` in the input dtype; torch rounds once from fp32)."""
    n = x.shape[-1]
    lse = torch.logsumexp(x, -1, keepdim=True)
    m = x.abs().amax(-1, keepdim=True)
    u_c = max(ba.u_acc, ba.u_in)
    return lse, (ba.lam * sqrt(n) + 4) * ba.u_acc * (1 + m) + u_c * (lse.abs() + x.abs() + m)


def _log_softmax_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    return _lse_err(x[0], ba)[1] + ba.u_out * y.abs()


def _log_softmax_grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    """dx = dy − p·Σdy, p = exp(y) from the saved output: y's absolute error (and its rounding to the output
    dtype) is a relative error of p; exp, the product and the difference round; the row sum of dy adds
    λ√n·u_acc·Σ|dy|·p."""
    n = x[0].shape[-1]
    lse, e_y = _lse_err(x[0], ba)
    y = x[0] - lse
    p = y.exp()
    u_c = max(ba.u_acc, ba.u_in)
    s = dy.sum(-1, keepdim=True)
    s_abs = dy.abs().sum(-1, keepdim=True)
    rel = e_y + ba.u_out * y.abs() + 2 * u_c
    err = p * (rel * s.abs() + ba.lam * sqrt(n) * ba.u_acc * s_abs) + u_c * (dy.abs() + p * s.abs())
    return (err + ba.u_out * g[0].abs(),)


def _l2norm(eps: float) -> Callable[..., torch.Tensor]:
    def oracle(x: torch.Tensor) -> torch.Tensor:
        return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)

    return oracle


def _l2norm_composite(eps: float) -> Callable[..., torch.Tensor]:
    return lambda x: torch.nn.functional.normalize(x, dim=-1, eps=eps)


def _l2norm_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    """As rmsnorm's (x/‖x‖ = x̂/√n): the sum of squares, the root and the division, and a textbook kernel's
    x·x and ‖x‖ rounded to the input dtype (2u_in)."""
    n = x[0].shape[-1]
    return ((ba.lam * sqrt(n) + 4) * ba.u_acc + ba.u_out + 2 * ba.u_in) * y.abs()


def _l2norm_grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    """x/‖x‖ = rmsnorm(x)/√n with unit weight: rmsnorm's dx with the upstream dy/√n. An eager composite
    (x / sqrt((x*x).sum())) rounds dy/s, x·dy, x·Σ(x·dy)/s³ and their difference's terms to the input dtype:
    4u_in relative in each term."""
    a = x[0]
    xhat, r, e = _norm_parts(a, ba, centred=False, eps=0.0)
    dx = _norm_dx(xhat, r, e, dy / sqrt(a.shape[-1]), ba, centred=False, u_g=4 * ba.u_in)
    return (dx + ba.u_out * g[0].abs(),)


def _configure_l2norm(params: dict[str, Any]) -> OpFamily:
    eps = float(params.get("eps", 1e-12))
    return replace(L2NORM, oracle=_l2norm(eps), composite=_l2norm_composite(eps))


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


class _SoftmaxWithoutY(torch.autograd.Function):
    """softmax whose backward omits the y factor: dx = dy − Σ(y·dy) for y·(dy − Σ(y·dy)) (a known mistake)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = torch.softmax(x, -1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return dy - (y * dy).sum(-1, keepdim=True)


def _softmax_without_y(x: torch.Tensor) -> torch.Tensor:
    return _SoftmaxWithoutY.apply(x)  # type: ignore[no-any-return]


def _softmax_without_y_grad(
    x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs
) -> tuple[torch.Tensor, ...]:
    """dx = dy − Σ y·dy, the mistake's own bound: the row sum as in _softmax_grad (y's relative error in
    each term, λ√n·u_acc·Σ|y·dy|), the difference's rounding, then the gradient's own; no factor y after."""
    n = x[0].shape[-1]
    y = torch.softmax(x[0], -1)
    eps_y = (ba.lam * sqrt(n) + 4) * ba.u_acc + ba.u_out
    s_abs = (y * dy).abs().sum(-1, keepdim=True)
    s = (y * dy).sum(-1, keepdim=True).abs()
    err = (eps_y + ba.lam * sqrt(n) * ba.u_acc) * s_abs + 2 * ba.u_acc * (dy.abs() + s)
    return (err + ba.u_out * g[0].abs(),)


def _softmax_grad_mistakes() -> tuple[tuple[str, OpFamily], ...]:
    return (
        (
            "its backward's y factor missing (dx = dy − Σ(y·dy) where y·(dy − Σ(y·dy)) is meant)",
            replace(
                SOFTMAX, oracle=_softmax_without_y, grad_bound=_softmax_without_y_grad, grad_mistakes=None
            ),
        ),
    )


def _lse_grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    """dx = exp(x − lse)·dy: the forward's absolute error of lse (and its rounding to the output dtype
    when it is saved) is a relative error of every exp; so is x − lse rounded in the gradient's dtype
    (autograd's formula runs in the tensors' dtype), then exp and the product round once each."""
    n = x[0].shape[-1]
    lse = torch.logsumexp(x[0], -1, keepdim=True)
    shift = x[0].abs().amax(-1, keepdim=True)
    rel = (ba.lam * sqrt(n) + 4) * ba.u_acc * (1 + shift) + ba.u_out * (2 * lse.abs() + x[0].abs() + 2)
    return ((rel + ba.u_out) * g[0].abs(),)


@dataclass(frozen=True)
class Norm:
    """A layernorm's or rmsnorm's parameters, as kernels ship them (Liger's LigerRMSNorm, HF's *RMSNorm)."""

    eps: float = EPS
    offset: float = 0.0  # rmsnorm: y = x̂·(offset + w); Gemma's RMSNorm stores w with offset 1
    casting_mode: str = "llama"  # rmsnorm: where the kernel rounds to the input dtype (docs/ops.md#rmsnorm)
    eps_outside: bool = False  # not a param: the mistake x / (√mean(x²) + eps), x̂ = (x − μ) / (σ + eps)
    # not params either, the backward mistakes the diagnosis tests: a gradient path lost ("rstd": through 1/σ,
    # "mean": through μ), and the weight's and bias's gradients summed over rows [start, stop) only (a slice:
    # (−8, 0) is the last 8), and dx's row sums (Σ w·dy, Σ w·dy·x̂) taken over blocks of this many rows
    detach: str = ""
    rows: tuple[int, int] | None = None
    dx_block: int = 0
    dx_last_cols: int = 0  # and dx's Σ w·dy·x̂ over its last block of this many columns only
    xhat_dtype: str = ""  # rmsnorm: x̂ rounded to this dtype before × (offset + w) (the mistake of gemma mode)


# The eps values kernels ship with (Llama and Liger 1e-6, torch and most layernorms 1e-5, BERT's 1e-12): a
# kernel whose error one of them explains is named as an eps mismatch, not as excess error.
COMMON_EPS = (1e-5, 1e-6, 1e-12)


def _norm_parts(
    a: torch.Tensor, ba: BoundArgs, centred: bool, eps: float = EPS
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x̂, 1/σ, and the forward's absolute error of x̂ per element (as in the forward bounds)."""
    n = a.shape[-1]
    if centred:
        mu = a.mean(-1, keepdim=True)
        r = 1 / (a.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
        xhat = (a - mu) * r
        e = ba.lam * sqrt(n) * ba.u_acc * (a.abs().mean(-1, keepdim=True) * r + xhat.abs() + 1)
    else:
        r = torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + eps)
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
    """dx = r·(g − mean(g) − x̂·mean(g·x̂)) (rmsnorm: no mean(g)), g = w·dy: each term's error.

    ``u_g``: the relative roundings to the input dtype of each term before the fp32 steps or after them:
    g = w·dy (HF's weight * h), and each gradient path's contribution (T5's x · rsqrt(var) in fp32 from a
    16-bit x: autograd rounds dy·r and x·Σ(g·x̂)·r/n to x's dtype apiece before adding them)."""
    n = xhat.shape[-1]
    # each |·| once, and the full-size sums in place: the same operations in the same order (bitwise the
    # bound written out; a full-size pass is ~1 ms at 2^20 fp64 elements, and this ran ~20 of them)
    ga, xa = gw.abs(), xhat.abs()
    gx = (ga * xa).mean(-1, keepdim=True)
    terms = xa.mul_(gx).add_(ga, alpha=1)
    if centred:
        terms += ga.mean(-1, keepdim=True)
    rel = ba.lam * sqrt(n) * ba.u_acc + 4 * ba.u_acc + u_g + 2 * e.amax(-1, keepdim=True)
    eg = (ga.mul_(e)).mean(-1, keepdim=True)
    return terms.mul_(rel).add_(e * gx).add_(eg).mul_(r)


def _saved_rstd(
    xhat: torch.Tensor, r: torch.Tensor, gw: torch.Tensor, dx: torch.Tensor, u_s: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """x̂'s error per element, and dx's, when the forward saves 1/σ rounded to a dtype of unit roundoff ``u_s``
    and the backward rebuilds x̂ from it (torch's CPU kernel saves μ and 1/σ in γ's dtype: bf16 for a bf16
    layer). r̃ = r·(1 + δ), |δ| ≤ u_s: x̂ becomes x̂·(1 + δ), m = mean(g·x̂) becomes m·(1 + δ), and
    dx = r̃·(g − mean g − x̂·m) becomes dx·(1 + δ) − r·x̂·m·(2δ + 3δ² + δ³): x̂ errs by e_s = u_s·|x̂|, dx by
    u_s·|dx| + r·|x̂|·|m|·(2u_s + 3u_s² + u_s³) (``dx``: the fp64 gradient). The saved mean's rounding
    (u_s·|μ|/σ in x̂) is not allowed: it is the cancellation C-PRC-02 probes (docs/ops.md#saved-statistics)."""
    m = (gw * xhat).mean(-1, keepdim=True).abs()
    return u_s * xhat.abs(), u_s * dx.abs() + r * xhat.abs() * m * (2 * u_s + 3 * u_s**2 + u_s**3)


def _mean_shift(
    a: torch.Tensor, r: torch.Tensor, e: torch.Tensor, ba: BoundArgs
) -> tuple[torch.Tensor, torch.Tensor]:
    """x̂'s error split: the mean's rounding, λ·√n·u·mean|x|·r, moves a whole row of x̂ by one shift (large
    means: it is most of ``e``); what is left is per element, with x·r − μ·r's rounding (torch's CPU kernel
    forms x·r·w + (b − μ·r·w)), 2u·|x|·r. (per-element error, the row's shift)"""
    shift = ba.lam * sqrt(a.shape[-1]) * ba.u_acc * a.abs().mean(-1, keepdim=True) * r
    return e - shift + 2 * ba.u_acc * a.abs() * r, shift


def _shift_dx(xhat: torch.Tensor, r: torch.Tensor, c: torch.Tensor, gw: torch.Tensor) -> torch.Tensor:
    """dx's error from a shift c of a row's x̂ (docs/ops.md#backward): dx = r·(g − mean g − x̂·m), m =
    mean(g·x̂), moves by r·c·(m + x̂·mean g) to first order, and 1/σ by a relative c² (the variance about a
    shifted mean is var + c²/r²). mean|g| for |mean g|: a kernel forming Σ g·x − μ·Σ g (torch's CPU
    backward) loses that sum to the same cancellation."""
    gx = (gw.abs() * xhat.abs()).mean(-1, keepdim=True)
    g1 = gw.abs().mean(-1, keepdim=True)
    return r * (c * (gx + xhat.abs() * g1) + c * c * (gw.abs() + xhat.abs() * gx + g1))


def _layernorm_grad(cfg: Norm) -> GradBound:
    def grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor | None, ...]:
        """dw = Σ_rows dy·x̂ and db = Σ_rows dy sum over the rows; dx from its analytic form; each row's μ and
        1/σ possibly saved in the output dtype (_saved_rstd)."""
        a, w, _ = x
        rows = a.shape[0]
        xhat, r, e = _norm_parts(a, ba, centred=True, eps=cfg.eps)
        e_el, shift = _mean_shift(a, r, e, ba)
        e_s, dx_s = _saved_rstd(xhat, r, w * dy, g[0], ba.u_out)
        dx = _norm_dx(xhat, r, e_el, w * dy, ba, centred=True) + _shift_dx(xhat, r, shift, w * dy) + dx_s
        dw = ba.lam * sqrt(rows) * ba.u_acc * (dy.abs() * xhat.abs()).sum(0) + (dy.abs() * e_el).sum(0)
        # the rows' mean errors are their own sums' roundings, independent over the rows: in dw one random
        # walk over every row's roundings (λ once, on the root sum of squares), never more than Σ|dy|·shift
        t = dy.abs() * shift
        dw = dw + torch.minimum(t.sum(0), t.pow(2).sum(0).sqrt())
        # each row's δ is its own rounding: independent over the rows, so their sum in dw is a
        # random walk (λ·‖·‖₂, Hoeffding), never more than every term at its worst (Σ|·|)
        t = dy.abs() * e_s
        dw = dw + torch.minimum(t.sum(0), ba.lam * t.pow(2).sum(0).sqrt())
        db = ba.lam * sqrt(rows) * ba.u_acc * dy.abs().sum(0)
        return tuple(b + ba.u_out * gi.abs() for b, gi in zip((dx, dw, db), g))

    return grad


def _rmsnorm_grad(cfg: Norm) -> GradBound:
    def grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor | None, ...]:
        a, w = x
        rows = a.shape[0]
        xhat, r, e = _norm_parts(a, ba, centred=False, eps=cfg.eps)
        # the casting mode's roundings of g, and u_in for each path of dx rounded on its own (docs/ops.md#t5)
        u_g = _u_elementwise(cfg, ba) + ba.u_in
        dx = _norm_dx(xhat, r, e, (cfg.offset + w) * dy, ba, centred=False, u_g=u_g)
        # HF's weight * h in the input dtype: h and each product dy·h round to it before the row sum (2u_in)
        dya = dy.abs()
        t = (dya * xhat.abs_()).sum(0)  # x̂ is not read again
        dw = (ba.lam * sqrt(rows) * ba.u_acc + 2 * ba.u_in) * t + (dya.mul_(e)).sum(0)
        return tuple(b.add_(gi.abs().mul_(ba.u_out)) for b, gi in zip((dx, dw), g))

    return grad


def _norm_inputs(cfg: Norm) -> Callable[..., Tensors]:
    def make(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
        """x, the scale w (1 + 0.1·N, or 0.1·N stored under an offset of 1: the same scales) and the bias."""
        rows, n = shape
        w = 1 - cfg.offset + 0.1 * draw((n,), dtype, gen, "normal").to(torch.float64)
        b = 0.1 * draw((n,), dtype, gen, "normal").to(torch.float64)
        return draw(shape, dtype, gen, dist), w.to(dtype), b.to(dtype)

    return make


def _rows_only(p: torch.Tensor, x: torch.Tensor, rows: tuple[int, int] | None) -> torch.Tensor:
    """The parameter as every row sees it, its gradient summed over rows [start, stop) only (the forward
    unchanged): the mistake of a weight gradient reduced over one block of rows."""
    if rows is None:
        return p
    keep = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
    keep.view(-1, 1)[rows[0] : rows[1] or None] = 1
    return p * keep + p.detach() * (1 - keep)


def _block_sum(t: torch.Tensor, blk: int) -> torch.Tensor:
    """t's (rows, 1) values summed over each block of ``blk`` consecutive rows (the last one partial), per row."""
    flat = t.reshape(-1)
    ids = torch.arange(flat.numel()) // blk
    sums = torch.zeros(int(ids[-1]) + 1, dtype=t.dtype).index_add(0, ids, flat)
    return sums[ids].reshape(t.shape)


def _dx_row_blocks(x: torch.Tensor, mu: torch.Tensor | None, r: torch.Tensor, scale: torch.Tensor, blk: int):  # type: ignore[no-untyped-def]
    """The norm with dx's row sums taken over blocks of ``blk`` rows (FlagGems#59): the forward unchanged, but
    each row's paths through μ and 1/σ carry the block's Σ w·dy and Σ w·dy·x̂, not its own. The zero terms φ
    and ψ route them: ∂φ_j/∂x_i = 1/(nσ_i) and ∂ψ_j/∂x_i = −x̂_i/(nσ_i) for every row i of row j's block."""
    rd = r.detach()
    psi = _block_sum((r - rd) / rd, blk)
    if mu is None:
        return x * rd * (1 + psi) * scale
    phi = _block_sum(rd * (mu - mu.detach()), blk)
    return (x - mu.detach()) * rd * (1 + psi) * scale - scale * phi


def _dx_last_cols(x: torch.Tensor, mu: torch.Tensor | None, r: torch.Tensor, scale: torch.Tensor, cols: int):  # type: ignore[no-untyped-def]
    """The norm with dx's Σ w·dy·x̂ taken over the last block of ``cols`` columns only (tt-metal#53215: the
    running sum overwritten per block): the forward unchanged; the zero term ψ carries the path through 1/σ,
    ∂ψ/∂x = −x̂/(nσ), weighted by x̂·w on the kept columns alone."""
    rd = r.detach()
    keep = torch.zeros(x.shape[-1], dtype=x.dtype)
    keep[-cols:] = 1
    centred = x if mu is None else x - mu
    return centred * rd * scale + (r - rd) / rd * (centred * r).detach() * scale * keep


def _layernorm_parts(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, cfg: Norm) -> torch.Tensor:
    """layer_norm written out, for the backward mistakes (a path detached, a block of rows)."""
    mu = x.mean(-1, keepdim=True)
    r = torch.rsqrt((x - mu).pow(2).mean(-1, keepdim=True) + cfg.eps)
    if cfg.dx_block:
        return _dx_row_blocks(x, mu, r, w, cfg.dx_block) + b
    if cfg.dx_last_cols:
        return _dx_last_cols(x, mu, r, w, cfg.dx_last_cols) + b
    mu = mu.detach() if cfg.detach == "mean" else mu
    r = r.detach() if cfg.detach == "rstd" else r
    return (x - mu) * r * _rows_only(w, x, cfg.rows) + _rows_only(b, x, cfg.rows)


def _layernorm(cfg: Norm) -> Callable[..., torch.Tensor]:
    def oracle(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if cfg.detach or cfg.rows is not None or cfg.dx_block or cfg.dx_last_cols:
            return _layernorm_parts(x, w, b, cfg)
        if cfg.eps_outside:
            mu = x.mean(-1, keepdim=True)
            sd = x.var(-1, unbiased=False, keepdim=True).sqrt()
            return (x - mu) / (sd + cfg.eps) * w + b
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, cfg.eps)

    return oracle


def _layernorm_bound(cfg: Norm) -> Bound:
    def bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        a, w, b = x
        n = a.shape[-1]
        mu = a.mean(-1, keepdim=True)
        sd = (a.var(-1, unbiased=False, keepdim=True) + cfg.eps).sqrt()
        xhat = ((a - mu) / sd).abs()
        # the mean is computed with error ≈ λ√n·u·mean|x|; relative to std it is amplified by |x|/std
        rel = ba.lam * sqrt(n) * ba.u_acc * (a.abs().mean(-1, keepdim=True) / sd + xhat + 1)
        return rel * w.abs() + ba.u_acc * b.abs() + ba.u_out * y.abs()

    return bound


def _rmsnorm_inputs(cfg: Norm) -> Callable[..., Tensors]:
    make = _norm_inputs(cfg)

    def rms(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
        x, w, _ = make(shape, dtype, gen, dist)
        return x, w

    return rms


def _rmsnorm(cfg: Norm) -> Callable[..., torch.Tensor]:
    def oracle(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ms = x.pow(2).mean(-1, keepdim=True)
        r = 1 / (ms.sqrt() + cfg.eps) if cfg.eps_outside else torch.rsqrt(ms + cfg.eps)
        r = r.detach() if cfg.detach == "rstd" else r
        if cfg.dx_block:
            return _dx_row_blocks(x, None, r, cfg.offset + w, cfg.dx_block)
        if cfg.dx_last_cols:
            return _dx_last_cols(x, None, r, cfg.offset + w, cfg.dx_last_cols)
        xhat = x * r
        if cfg.xhat_dtype:
            xhat = xhat.to(getattr(torch, cfg.xhat_dtype)).to(x.dtype)
        return xhat * (cfg.offset + _rows_only(w, x, cfg.rows))

    return oracle


def _u_elementwise(cfg: Norm, ba: BoundArgs) -> float:
    """The roundings to the input dtype of x̂ and (offset + w) that the casting mode makes, before the output's:
    llama rounds x̂ (HF's LlamaRMSNorm casts it before ``weight * h``) and, with an offset, offset + w; gemma
    computes in fp32 (HF's Gemma, Liger's "gemma"): x̂ is not rounded, one u_in kept as llama's default allows;
    none computes x̂ = x·r, offset + w and their product in the input dtype: three."""
    if cfg.casting_mode == "none":
        return 3 * ba.u_in
    if cfg.casting_mode == "llama" and cfg.offset:
        return 2 * ba.u_in
    return ba.u_in


def _rmsnorm_bound(cfg: Norm) -> Bound:
    def bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        """The sum of squares (λ√n·u_acc), rsqrt and the products (4u_acc), the casting mode's roundings to the
        input dtype (docs/ops.md#eager-composites), the output's."""
        n = x[0].shape[-1]
        rounds = _u_elementwise(cfg, ba)
        out = ((ba.lam * sqrt(n) + 4) * ba.u_acc + ba.u_out + rounds) * y.abs()
        if len(x) < 2 or not ba.u_in:
            return out
        # x̂ rounded to the input dtype below its normal range errs by half the subnormal spacing, absolutely,
        # and the weight then scales it: past the subnormal floor's own where |w| > 1 (apex's manual_rms_norm
        # in fp16, a row spanning binades)
        return out + (rounds / ba.u_in) * underflow(ba.u_in) * (x[1] + cfg.offset).abs()

    return bound


def _rms_norm(cfg: Norm) -> Callable[..., torch.Tensor]:
    """torch's fused rms_norm with the casting mode's precision: the composite a correct low-precision kernel
    is compared with (gemma: in fp32, rounded once)."""
    F = torch.nn.functional

    def composite(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        n = (x.shape[-1],)
        if cfg.casting_mode == "gemma":
            return (F.rms_norm(x.float(), n, None, cfg.eps) * (cfg.offset + w.float())).to(x.dtype)
        return F.rms_norm(x, n, w + cfg.offset if cfg.offset else w, cfg.eps)

    return composite


def _norm_mistakes(name: str, cfg: Norm) -> tuple[tuple[str, OpFamily], ...]:
    """The other common eps values, and eps added outside the square root (with any of them)."""
    where = "√(var)" if name == "layernorm" else "√mean(x²)"
    out = [
        (
            f"eps = {e:g} instead of the contract's {cfg.eps:g} (params.eps = {e:g} if the kernel means it)",
            replace(cfg, eps=e),
        )
        for e in COMMON_EPS
    ]
    out = [m for m in out if m[1].eps != cfg.eps]
    eps_values = (cfg.eps, *(e for e in COMMON_EPS if e != cfg.eps))
    out += [
        (
            f"eps added outside the square root ({where} + eps, eps = {e:g})",
            replace(cfg, eps=e, eps_outside=True),
        )
        for e in eps_values
    ]
    return tuple((what, build_norm(name, alt)) for what, alt in out)


GRAD_ROW_BLOCKS = (1, 2, 4, 8, 16, 32, 64, 128)  # rows per program of a norm backward's weight reduction
GRAD_COL_BLOCKS = (16, 32, 64, 128, 256, 512, 1024)  # columns per step of a norm backward's row reduction
PATHS = {
    "rstd": "path through 1/σ lost (1/σ treated as a constant in the backward)",
    "mean": "path through the mean lost (μ treated as a constant: dx lacks −mean(w·dy)/σ)",
}


def _norm_grad_mistakes(name: str, cfg: Norm) -> tuple[tuple[str, OpFamily], ...]:
    """Shipped norm backward mistakes: a gradient path lost, and dW (and dB) reduced over one block of rows
    (the first program's, or the last one's) instead of all rows."""
    paths = ("rstd", "mean") if name == "layernorm" else ("rstd",)
    out = [(f"its backward's {PATHS[p]}", replace(cfg, detach=p)) for p in paths]
    params = "weight's and bias's gradients" if name == "layernorm" else "weight's gradient"
    for blk in GRAD_ROW_BLOCKS:
        out += [
            (
                f"the {params} summed over the {which} block of {blk} row{'s' if blk > 1 else ''} only, not "
                "over all rows (a reduction over the wrong extent)",
                replace(cfg, rows=rows),
            )
            for which, rows in (("first", (0, blk)), ("last", (-blk, 0)))
        ]
    sums = "Σ w·dy and Σ w·dy·x̂" if name == "layernorm" else "Σ w·dy·x̂"
    out += [
        (
            f"its dx's row sums ({sums}) taken over each block of {blk} rows, not per row (FlagGems#59: a "
            "reduction over the wrong extent)",
            replace(cfg, dx_block=blk),
        )
        for blk in GRAD_ROW_BLOCKS[1:]
    ]
    out += [
        (
            f"its dx's row sum Σ w·dy·x̂ taken over the last block of {c} columns only (tt-metal#53215: the "
            "running sum overwritten per block, acc = for acc +=)",
            replace(cfg, dx_last_cols=c),
        )
        for c in GRAD_COL_BLOCKS
    ]
    return tuple((what, build_norm(name, alt)) for what, alt in out)


def _norm_forward_mistakes(name: str, cfg: Norm) -> tuple[tuple[str, OpFamily], ...]:
    """rmsnorm's weight offset: Gemma's 1 + w dropped, or added where the contract has none."""
    if name != "rmsnorm":
        return ()
    if cfg.offset:
        what = f"the weight offset dropped (x̂·w where x̂·({cfg.offset:g} + w) is declared: Gemma's 1 + w)"
        return ((what, build_norm(name, replace(cfg, offset=0.0))),)
    what = "a weight offset of 1 added (x̂·(1 + w), Gemma's RMSNorm, where x̂·w is declared: params.weight_offset = 1)"
    return ((what, build_norm(name, replace(cfg, offset=1.0))),)


CAST_DTYPES = ("bfloat16", "float16")  # the input dtypes a kernel may round x̂ to before the weight multiply


def _norm_cast_mistakes(name: str, cfg: Norm) -> tuple[tuple[str, OpFamily], ...]:
    """rmsnorm in the gemma casting mode (all in fp32, rounded once) written Llama's way: x̂ cast to the input
    dtype before the weight multiply (pytorch#147203, transformers#29402). One rounding of x̂: within any bound,
    so tried on passing cases too (kcgate.engine.mistakes.reproduced)."""
    if name != "rmsnorm" or cfg.casting_mode != "gemma" or cfg.xhat_dtype:
        return ()
    return tuple(
        (
            f"x̂ cast to {dt} before the weight multiply (Llama's casting where the contract declares gemma's: "
            "all in fp32, rounded once)",
            build_norm(name, replace(cfg, xhat_dtype=dt)),
        )
        for dt in CAST_DTYPES
    )


def configure_norm(name: str) -> Callable[[dict[str, Any]], OpFamily]:
    def configure(params: dict[str, Any]) -> OpFamily:
        return build_norm(
            name,
            Norm(
                eps=float(params.get("eps", EPS)),
                offset=float(params.get("weight_offset", 0.0)),
                casting_mode=str(params.get("casting_mode", "llama")),
            ),
        )

    return configure


def build_norm(name: str, cfg: Norm) -> OpFamily:
    """The layernorm or rmsnorm family for ``cfg``."""
    if name == "layernorm":
        oracle = _layernorm(cfg)
        return replace(
            LAYERNORM,
            make_inputs=_norm_inputs(cfg),
            oracle=oracle,
            bound=_layernorm_bound(cfg),
            composite=oracle,
            grad_bound=_layernorm_grad(cfg),
            variants=lambda: _norm_mistakes(name, cfg),
            mistakes=lambda: _norm_forward_mistakes(name, cfg),
            grad_mistakes=None
            if cfg.detach or cfg.rows or cfg.dx_block
            else lambda: _norm_grad_mistakes(name, cfg),
        )
    return replace(
        RMSNORM,
        make_inputs=_rmsnorm_inputs(cfg),
        oracle=_rmsnorm(cfg),
        bound=_rmsnorm_bound(cfg),
        composite=_rms_norm(cfg),
        grad_bound=_rmsnorm_grad(cfg),
        variants=lambda: _norm_mistakes(name, cfg),
        mistakes=lambda: _norm_forward_mistakes(name, cfg) + _norm_cast_mistakes(name, cfg),
        rounding_mistakes=lambda: _norm_cast_mistakes(name, cfg),
        grad_mistakes=None
        if cfg.detach or cfg.rows or cfg.dx_block
        else lambda: _norm_grad_mistakes(name, cfg),
    )


def _family(
    name: str, oracle, bound, make=_rows, floats=(0,), composite=None, names=("x",), grad=None, **kw
) -> OpFamily:  # type: ignore[no-untyped-def]
    return OpFamily(
        **kw,
        grad_bound=grad,
        input_names=names,
        name=name,
        make_inputs=make,
        oracle=oracle,
        bound=bound,
        reduction_len=lambda s: s[-1],
        float_inputs=floats,
        composite=composite,
    )


SUM = _family("sum", lambda x: x.sum(-1), _sum_bound, composite=lambda x: x.sum(-1), grad=_sum_grad)
MEAN = _family("mean", lambda x: x.mean(-1), _mean_bound, composite=lambda x: x.mean(-1), grad=_mean_grad)
SOFTMAX = _family(
    "softmax",
    lambda x: torch.softmax(x, -1),
    _softmax_bound,
    composite=lambda x: torch.softmax(x, -1),
    grad=_softmax_grad,
    grad_mistakes=_softmax_grad_mistakes,
)
LOGSUMEXP = _family(
    "logsumexp",
    lambda x: torch.logsumexp(x, -1),
    _lse_bound,
    composite=lambda x: torch.logsumexp(x, -1),
    grad=_lse_grad,
)
_NORM = Norm()
LAYERNORM = _family(
    "layernorm",
    _layernorm(_NORM),
    _layernorm_bound(_NORM),
    _norm_inputs(_NORM),
    (0, 1, 2),
    _layernorm(_NORM),
    ("x", "w", "b"),
    _layernorm_grad(_NORM),
    configure=configure_norm("layernorm"),
    variants=lambda: _norm_mistakes("layernorm", _NORM),
    mistakes=lambda: _norm_forward_mistakes("layernorm", _NORM),
    grad_mistakes=lambda: _norm_grad_mistakes("layernorm", _NORM),
)
RMSNORM = _family(
    "rmsnorm",
    _rmsnorm(_NORM),
    _rmsnorm_bound(_NORM),
    _rmsnorm_inputs(_NORM),
    (0, 1),
    _rms_norm(_NORM),
    ("x", "w"),
    _rmsnorm_grad(_NORM),
    configure=configure_norm("rmsnorm"),
    variants=lambda: _norm_mistakes("rmsnorm", _NORM),
    mistakes=lambda: _norm_forward_mistakes("rmsnorm", _NORM),
    grad_mistakes=lambda: _norm_grad_mistakes("rmsnorm", _NORM),
)
LOG_SOFTMAX = _family(
    "log_softmax",
    lambda x: torch.log_softmax(x, -1),
    _log_softmax_bound,
    composite=lambda x: torch.log_softmax(x, -1),
    grad=_log_softmax_grad,
)
L2NORM = _family(
    "l2norm",
    _l2norm(1e-12),
    _l2norm_bound,
    composite=_l2norm_composite(1e-12),
    grad=_l2norm_grad,
    configure=_configure_l2norm,
)
