"""Norms with their statistics summed at a narrow width, written as custom ops (issue 56): group_norm as
Liger-Kernel's Triton kernel computes it (Σx over the group block by block, then Σ(x − μ)²) and poly_norm as
vLLM's (mean of x², x⁴ and x⁶ per row), each with its running sums held in fp16 (the fault), in fp32 (the
correct twin), or with another fault (a 5% scale, an unbiased variance). Torch re-implementations of the Triton
loops: ``s += tl.sum(X)`` over BLOCK-sized tiles, the running sum ``s`` in the accumulator dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

GROUPS = 4
BLOCK = 64
EPS = 1e-5


def group_inputs(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> dict[str, torch.Tensor]:
    """x (N, C, L) normal, offset by 1 (a group's mean is not 0); the affine weight and bias per channel."""
    x = torch.randn(shape, generator=g, dtype=torch.float64) + 1.0
    w = torch.rand(shape[1], generator=g, dtype=torch.float64) + 0.5
    b = torch.randn(shape[1], generator=g, dtype=torch.float64) * 0.1
    return {"x": x.to(dtype), "w": w.to(dtype), "b": b.to(dtype)}


def group_norm_ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Liger's test reference: torch's GroupNorm."""
    return F.group_norm(x, GROUPS, w, b, EPS)


def _sums(t: torch.Tensor, acc: torch.dtype, centre: torch.Tensor | None = None) -> torch.Tensor:
    """Σt (or Σ(t − centre)², centre per row) over the last dim as a Triton loop computes it: each tile's
    ``tl.sum`` added to a running sum held in ``acc`` (the tile's terms in ``acc`` too: fp16 ``X * X``)."""
    s = torch.zeros(t.shape[:-1], dtype=acc)
    for i in range(0, t.shape[-1], BLOCK):
        tile = t[..., i : i + BLOCK].to(acc)
        if centre is not None:
            d = tile - centre[..., None].to(acc)
            tile = d * d
        s = s + tile.sum(-1)
    return s


def _group_norm(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, acc: torch.dtype, unbiased: bool = False
) -> torch.Tensor:
    """Two passes over each group (Σx, then Σ(x − μ)²: no cancellation at large means), summed in ``acc``."""
    n = x.shape[0]
    xg = x.reshape(n, GROUPS, -1)
    k = xg.shape[-1]
    mean = _sums(xg, acc).float() / k
    var = _sums(xg, acc, mean).float() / (k - 1 if unbiased else k)
    rstd = torch.rsqrt(var + EPS)
    y = (xg.float() - mean[..., None]) * rstd[..., None]
    y = y.reshape(x.shape) * w.float()[None, :, None] + b.float()[None, :, None]
    return y.to(x.dtype)


def group_norm_fp16_sums(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The fault: the running sums Σx and Σx² held in fp16."""
    return _group_norm(x, w, b, torch.float16)


def group_norm_fp32_sums(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The correct twin: the running sums in fp32."""
    return _group_norm(x, w, b, torch.float32)


def group_norm_scaled(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Another fault: fp32 sums, the output 5% large."""
    return (_group_norm(x, w, b, torch.float32).float() * 1.05).to(x.dtype)


def group_norm_unbiased(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Another fault: fp32 sums, the variance with Bessel's correction (torch.var's default), not GroupNorm's."""
    return _group_norm(x, w, b, torch.float32, unbiased=True)


def poly_inputs(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> dict[str, torch.Tensor]:
    """x normal; the three weights in [0.2, 1.2); the bias 0.1."""
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    w = torch.rand(3, generator=g, dtype=torch.float64) + 0.2
    return {"x": x.to(dtype), "w": w.to(dtype)}


def poly_norm_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """vLLM's PolyNorm.forward_native: w0·norm(x³) + w1·norm(x²) + w2·norm(x) + 0.1, in fp32."""
    xf = x.float()

    def norm(t: torch.Tensor) -> torch.Tensor:
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)

    return (w[0] * norm(xf**3) + w[1] * norm(xf**2) + w[2] * norm(xf) + 0.1).to(x.dtype)


def _poly_norm(x: torch.Tensor, w: torch.Tensor, acc: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    xf = x.float()
    out = torch.full_like(xf, 0.1)
    for i, p in enumerate((3, 2, 1)):
        t = xf**p
        sq = _sums(t * t, acc)  # the squared powers summed in acc
        rms = torch.sqrt(sq.float() / x.shape[-1] + 1e-6)
        out = out + w[i].float() * t / rms[..., None]
    return (out * scale).to(x.dtype)


def poly_norm_fp16_sums(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The fault: each power's Σt² held in fp16."""
    return _poly_norm(x, w, torch.float16)


def poly_norm_fp32_sums(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The correct twin: the sums in fp32."""
    return _poly_norm(x, w, torch.float32)


def poly_norm_scaled(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Another fault: fp32 sums, the output 5% large."""
    return _poly_norm(x, w, torch.float32, 1.05)


class _GroupNormGrads(torch.autograd.Function):
    """Forward in fp32 (the statistics in fp32); backward: dx in fp32, dw and db summed over the batch and the
    positions in ``acc`` (Liger's group_norm backward: dB = Σ dY, dW = Σ dY·x̂, tile by tile)."""

    @staticmethod
    def forward(ctx, x, w, b, acc):  # type: ignore[no-untyped-def]
        xg = x.float().reshape(x.shape[0], GROUPS, -1)
        mean = xg.mean(-1, keepdim=True)
        rstd = torch.rsqrt((xg - mean).pow(2).mean(-1, keepdim=True) + EPS)
        xhat = ((xg - mean) * rstd).reshape(x.shape)
        ctx.save_for_backward(xhat, rstd, w)
        ctx.acc = acc
        return (xhat * w.float()[None, :, None] + b.float()[None, :, None]).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        xhat, rstd, w = ctx.saved_tensors
        g = dy.float()
        rows = lambda t: t.transpose(0, 1).reshape(t.shape[1], -1)  # noqa: E731 — (C, N·L)
        db = _sums(rows(g), ctx.acc).float()
        dw = _sums(rows(g * xhat), ctx.acc).float()
        gx = (g * w.float()[None, :, None]).reshape(g.shape[0], GROUPS, -1)
        xh = xhat.reshape(gx.shape)
        dx = rstd * (gx - gx.mean(-1, keepdim=True) - xh * (gx * xh).mean(-1, keepdim=True))
        return dx.reshape(dy.shape).to(dy.dtype), dw.to(w.dtype), db.to(w.dtype), None


def group_norm_fp16_dwdb(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The fault in the backward only: dw and db summed in fp16 (issue 56: Liger's dB 21× torch's error)."""
    return _GroupNormGrads.apply(x, w, b, torch.float16)


def group_norm_fp32_dwdb(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Its correct twin: dw and db summed in fp32."""
    return _GroupNormGrads.apply(x, w, b, torch.float32)
