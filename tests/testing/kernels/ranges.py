"""Kernels that are right on unit-scale inputs and wrong near exp's and log's limits, on subnormals, or over a
large dynamic range (issue 56's range probes), each beside a correct formulation: the torch op, a textbook
formula and, where one exists, a stable rewrite. Bugs of real kernels, planted in torch re-implementations.
"""

from __future__ import annotations

import torch

F = torch.nn.functional


def normal_gen(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    return (torch.randn(shape, generator=g, dtype=torch.float64).to(dtype),)


def unit_gen(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Probabilities of independent events (not rows of a distribution): uniform in (0, 1)."""
    return (torch.rand(shape, generator=g, dtype=torch.float64).clamp(min=1e-3).to(dtype),)


def norm_gen(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    w = 1 + 0.1 * torch.randn(shape[-1:], generator=g, dtype=torch.float64)
    return x.to(dtype), w.to(dtype)


# softplus: torch's (a threshold at 20), the textbook one with the threshold, a stable rewrite; the bug has none
def softplus_ref(x: torch.Tensor) -> torch.Tensor:
    return F.softplus(x.float()).to(x.dtype)


def softplus_threshold(x: torch.Tensor) -> torch.Tensor:
    """Both branches finite, so that torch.where's backward does not meet 0 · NaN (exp(h) clamped: the
    unclamped branch's gradient is inf / inf past 88.7, a NaN the where passes on)."""
    h = x.float()
    return torch.where(h > 20, h, torch.log1p(torch.exp(h.clamp(max=20)))).to(x.dtype)


def softplus_stable(x: torch.Tensor) -> torch.Tensor:
    h = x.float()
    return (h.clamp(min=0) + torch.log1p(torch.exp(-h.abs()))).to(x.dtype)


def softplus_naive(x: torch.Tensor) -> torch.Tensor:  # exp overflows past x = 88.7: inf
    return torch.log1p(torch.exp(x.float())).to(x.dtype)


# the log of a probability clamped at 1e-8 (a loss's log term); the bug drops the clamp
def clamped_log_ref(p: torch.Tensor) -> torch.Tensor:
    return torch.log(p.float().clamp(min=1e-8)).to(p.dtype)


def clamped_log(p: torch.Tensor) -> torch.Tensor:
    return torch.log(torch.maximum(p.float(), torch.tensor(1e-8))).to(p.dtype)


def unclamped_log(p: torch.Tensor) -> torch.Tensor:  # log(p) down to −87 where the reference stops at −18.4
    return torch.log(p.float()).to(p.dtype)


# silu on inputs a kernel flushes to zero where they are subnormal (a DAZ mode); the fix keeps them
def silu_ref(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x.float()).to(x.dtype)


def silu_textbook(x: torch.Tensor) -> torch.Tensor:
    h = x.float()
    return (h / (1 + torch.exp(-h))).to(x.dtype)


def silu_flushed(x: torch.Tensor) -> torch.Tensor:
    tiny = torch.finfo(x.dtype).tiny
    h = torch.where(x.abs() < tiny, torch.zeros_like(x), x).float()
    return (h * torch.sigmoid(h)).to(x.dtype)


# RMSNorm: the eps under the square root; the bug adds it after (1/(rms + eps)), which a unit-scale row never
# shows (rms ≈ 1 ≫ eps) and a row of small values does
def rms_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


def rms_textbook(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.float()
    return (h / torch.sqrt((h * h).sum(-1, keepdim=True) / h.shape[-1] + 1e-6) * w.float()).to(x.dtype)


def rms_eps_outside(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.float()
    return (h / (h.pow(2).mean(-1, keepdim=True).sqrt() + 1e-6) * w.float()).to(x.dtype)
