"""Held-out kernels for the placement check (issue 54, D9): each reference's rounding mistake made in another
reduction order (blocks, trees, online passes, torch's own op, a loop), which a bit-for-bit comparison with the
reference's cast mutant misses, and correct kernels in those same orders, which must pass. Written on
2026-12-07 before the error-pattern statistic of kcgate/engine/placement.py was given its thresholds; the
rms_norm blocks-of-64 kernel and the mutant moved by 1 ulp are the issue's two attacks (the development pair),
the rest is held out.

Each ``Placed`` row: a reference with casts (as a user writes it), its inputs, the wrong kernels with the cast
mutant that must name each one (its change, and the reference's source line that holds it), and correct kernels
that round where the reference does or less, in other orders. Shapes are multiples of no block on purpose
where a kernel blocks. ``Wrong.also`` and ``Wrong.missed`` were filled in after the first run with the
thresholds set (python -m benchmarks.placement_orders): a second name that run gave, and why it missed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

Kernel = Callable[..., Any]
Make = Callable[[int, torch.dtype], tuple[torch.Tensor, ...]]


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _blocks(t: torch.Tensor, size: int) -> list[torch.Tensor]:
    return list(t.split(size, dim=-1))


def block_sum(t: torch.Tensor, size: int = 64) -> torch.Tensor:
    """The last dim summed in blocks of ``size`` (each block by torch), the block sums added in a loop, all in
    ``t``'s dtype: a GPU kernel's per-warp partials."""
    parts = [p.sum(-1, keepdim=True) for p in _blocks(t, size)]
    s = parts[0]
    for p in parts[1:]:
        s = s + p
    return s


def tree_sum(t: torch.Tensor) -> torch.Tensor:
    """The last dim summed by halving (a shared-memory tree), in ``t``'s dtype; an odd tail joins the first."""
    while t.shape[-1] > 1:
        n = t.shape[-1]
        half = n // 2
        s = t[..., :half] + t[..., half : 2 * half]
        if n % 2:
            s = torch.cat([s[..., :1] + t[..., -1:], s[..., 1:]], dim=-1)
        t = s
    return t


def loop_sum(t: torch.Tensor, size: int = 48) -> torch.Tensor:
    """The last dim accumulated chunk by chunk in a Python loop (a running sum, as a scalar CPU kernel does)."""
    s = torch.zeros_like(t[..., :1])
    for p in _blocks(t, size):
        s = s + p.sum(-1, keepdim=True)
    return s


def one_ulp(kernel: Kernel) -> Kernel:
    """``kernel`` with every other element moved by 1 ulp (up, then down): issue 54's D9 second attack."""

    def moved(*a: Any) -> torch.Tensor:
        y = kernel(*a)
        flat = y.flatten()
        i = torch.arange(flat.numel())
        up = torch.nextafter(flat, torch.full_like(flat, math.inf))
        down = torch.nextafter(flat, torch.full_like(flat, -math.inf))
        return torch.where(i % 4 == 0, up, torch.where(i % 4 == 2, down, flat)).view_as(y)

    moved.__name__ = f"{kernel.__name__}_one_ulp"
    return moved


# ---- rms_norm: vLLM's RMSNorm, the variance in fp32 -----------------------------------------------------


def rms_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    orig = x.dtype
    h = x.to(torch.float32)  # MARK rms-upcast
    var = h.pow(2).mean(dim=-1, keepdim=True)  # MARK rms-var
    h = h * torch.rsqrt(var + 1e-6)
    return h.to(orig) * w


def rms_all_low_mutant(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # the upcast dropped, as written
    var = x.pow(2).mean(dim=-1, keepdim=True)
    return (x * torch.rsqrt(var + 1e-6)).to(x.dtype) * w


def rms_low_blocks64(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # D9: the squares summed in blocks
    var = block_sum(x * x, 64) / x.shape[-1]
    return x * torch.rsqrt(var + 1e-6) * w


def rms_low_tree(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    var = tree_sum(x * x) / x.shape[-1]
    return x * torch.rsqrt(var + 1e-6) * w


def rms_low_loop_div(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # a loop, and x / sqrt(.) for rsqrt
    var = loop_sum(x * x) / x.shape[-1]
    return x / torch.sqrt(var + 1e-6) * w


def rms_fp32_blocks64(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.float()
    var = block_sum(h * h, 64) / x.shape[-1]
    return (h * torch.rsqrt(var + 1e-6)).to(x.dtype) * w


def rms_fp32_tree(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.float()
    var = tree_sum(h * h) / x.shape[-1]
    return (h * torch.rsqrt(var + 1e-6)).to(x.dtype) * w


def rms_fp32_loop_div(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.float()
    return (h / torch.sqrt(loop_sum(h * h) / x.shape[-1] + 1e-6)).to(x.dtype) * w


def rms_torch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # torch's own op, in fp32
    return F.rms_norm(x.float(), (x.shape[-1],), eps=1e-6).to(x.dtype) * w


def rms_fused_blocks(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # fp32 to the end, one rounding
    h = x.float()
    return (h * torch.rsqrt(block_sum(h * h, 32) / x.shape[-1] + 1e-6) * w.float()).to(x.dtype)


def _xw(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    g = _g(seed)
    return torch.randn(48, 1000, generator=g).to(dtype), (torch.randn(1000, generator=g) * 0.5 + 1).to(dtype)


# ---- Gemma's RMSNorm: fp32 to the end, one cast -----------------------------------------------------------


def gemma_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    orig = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6)  # MARK gemma-xhat
    h = h * (1.0 + w.float())
    return h.to(orig)


def gemma_llama_blocks_div(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # Llama's cast order, blocked
    h = x.float()
    h = (h / torch.sqrt(block_sum(h * h, 64) / x.shape[-1] + 1e-6)).to(x.dtype)
    return h * (1.0 + w)


def gemma_llama_torch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # Llama's cast order, torch's op
    return F.rms_norm(x.float(), (x.shape[-1],), eps=1e-6).to(x.dtype) * (1.0 + w)


def gemma_llama_tree_low_var(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # and the variance in a tree
    h = x.float()
    h = (h * torch.rsqrt(tree_sum(h * h) / x.shape[-1] + 1e-6)).to(x.dtype)
    return h * (1.0 + w)


def gemma_torch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # torch's op with the (1 + w) weight
    return F.rms_norm(x.float(), (x.shape[-1],), 1.0 + w.float(), eps=1e-6).to(x.dtype)


def gemma_blocks_fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # Liger's order: (1 + w) · rstd · x
    h = x.float()
    scale = (1.0 + w.float()) * torch.rsqrt(block_sum(h * h, 64) / x.shape[-1] + 1e-6)
    return (scale * h).to(x.dtype)


def gemma_loop(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.float()
    return (h / torch.sqrt(loop_sum(h * h) / x.shape[-1] + 1e-6) * (1.0 + w.float())).to(x.dtype)


# ---- softmax, written out ---------------------------------------------------------------------------------


def softmax_ref(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()  # MARK softmax-upcast
    m = xf.amax(dim=-1, keepdim=True)
    e = torch.exp(xf - m)  # MARK softmax-exp
    s = e.sum(dim=-1, keepdim=True)  # MARK softmax-sum
    return (e / s).to(x.dtype)


def softmax_low_online(x: torch.Tensor) -> torch.Tensor:  # all in the dtype, an online pass over blocks of 64
    m = torch.full_like(x[..., :1], -math.inf)
    s = torch.zeros_like(x[..., :1])
    for b in _blocks(x, 64):
        m_new = torch.maximum(m, b.amax(-1, keepdim=True))
        s = s * torch.exp(m - m_new) + torch.exp(b - m_new).sum(-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / s


def softmax_low_tree(x: torch.Tensor) -> torch.Tensor:  # all in the dtype, the row sum in a tree
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / tree_sum(e)


def softmax_exp_low_blocks(x: torch.Tensor) -> torch.Tensor:  # exp stored in the dtype, then summed in blocks
    e = torch.exp(x.float() - x.float().amax(-1, keepdim=True)).to(x.dtype)
    return e / block_sum(e, 64)


def softmax_sum_low_tree(x: torch.Tensor) -> torch.Tensor:  # the row sum kept in the dtype, summed in a tree
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / tree_sum(e).to(x.dtype)).to(x.dtype)


def softmax_torch_low(x: torch.Tensor) -> torch.Tensor:  # torch's own op in the input dtype (fp32 inside)
    return torch.softmax(x, dim=-1)


def softmax_online_fp32(x: torch.Tensor) -> torch.Tensor:
    return softmax_low_online(x.float()).to(x.dtype)


def softmax_via_log(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(torch.log_softmax(x.float(), dim=-1)).to(x.dtype)


def softmax_fp32_tree(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x.float() - x.float().amax(-1, keepdim=True))
    return (e / tree_sum(e)).to(x.dtype)


def _logits(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    return ((torch.randn(64, 700, generator=_g(seed)) * 2.0).to(dtype),)


# ---- cross-entropy per row ----------------------------------------------------------------------------------


def ce_ref(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    lf = logits.float()  # MARK ce-upcast
    m = lf.amax(dim=-1)
    lse = m + torch.log(torch.exp(lf - m[:, None]).sum(dim=-1))  # MARK ce-lse
    loss = lse - lf.gather(-1, target[:, None])[:, 0]
    return loss.to(logits.dtype)


def _lse_online(lf: torch.Tensor, size: int) -> torch.Tensor:
    m = torch.full_like(lf[:, 0], -math.inf)
    s = torch.zeros_like(lf[:, 0])
    for b in _blocks(lf, size):
        m_new = torch.maximum(m, b.amax(-1))
        s = s * torch.exp(m - m_new) + torch.exp(b - m_new[:, None]).sum(-1)
        m = m_new
    return m + torch.log(s)


def ce_low_online(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # all in the dtype, online
    return _lse_online(logits, 128) - logits.gather(-1, target[:, None])[:, 0]


def ce_low_tree(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # all in the dtype, a tree
    m = logits.amax(-1, keepdim=True)
    lse = m[:, 0] + torch.log(tree_sum(torch.exp(logits - m))[:, 0])
    return lse - logits.gather(-1, target[:, None])[:, 0]


def ce_lse_low_online(
    logits: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:  # the lse stored in the dtype
    lf = logits.float()
    lse = _lse_online(lf, 96).to(logits.dtype)
    return (lse - lf.gather(-1, target[:, None])[:, 0]).to(logits.dtype)


def ce_torch(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), target, reduction="none").to(logits.dtype)


def ce_online_fp32(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    lf = logits.float()
    return (_lse_online(lf, 128) - lf.gather(-1, target[:, None])[:, 0]).to(logits.dtype)


def ce_logsumexp_fp32(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    lf = logits.float()
    return (torch.logsumexp(lf, -1) - lf.gather(-1, target[:, None])[:, 0]).to(logits.dtype)


def _ce_inputs(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    g = _g(seed)
    return (torch.randn(640, 300, generator=g) * 3.0).to(dtype), torch.randint(0, 300, (640,), generator=g)


# ---- layer_norm ------------------------------------------------------------------------------------------------


def ln_ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    xf = x.float()  # MARK ln-upcast
    mean = xf.mean(dim=-1, keepdim=True)
    var = (xf - mean).pow(2).mean(dim=-1, keepdim=True)
    y = (xf - mean) * torch.rsqrt(var + 1e-5)  # MARK ln-xhat
    return (y * w.float() + b.float()).to(x.dtype)


def ln_low_blocks(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # stats in the dtype
    n = x.shape[-1]
    mean = block_sum(x, 64) / n
    d = x - mean
    y = d * torch.rsqrt(block_sum(d * d, 64) / n + 1e-5)
    return (y * w.float() + b.float()).to(x.dtype)


def ln_low_tree(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1]
    d = x - tree_sum(x) / n
    y = d / torch.sqrt(tree_sum(d * d) / n + 1e-5)
    return (y * w.float() + b.float()).to(x.dtype)


def ln_xhat_low_blocks(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # x̂ stored low
    xf = x.float()
    n = x.shape[-1]
    d = xf - block_sum(xf, 64) / n
    y = (d * torch.rsqrt(block_sum(d * d, 64) / n + 1e-5)).to(x.dtype)
    return (y * w.float() + b.float()).to(x.dtype)


def ln_torch(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5).to(x.dtype)


def ln_torch_low(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor
) -> torch.Tensor:  # torch's op in the dtype
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def ln_welford_fp32(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    n = x.shape[-1]
    mean = loop_sum(xf) / n
    var = loop_sum((xf - mean) ** 2) / n
    return ((xf - mean) / torch.sqrt(var + 1e-5) * w.float() + b.float()).to(x.dtype)


def _ln_inputs(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    g = _g(seed)
    x = torch.randn(48, 900, generator=g) + 0.5
    return (
        x.to(dtype),
        (torch.randn(900, generator=g) * 0.5 + 1).to(dtype),
        torch.randn(900, generator=g).to(dtype),
    )


# ---- the table ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wrong:
    kernel: Kernel
    change: str  # the mutant's change as kcgate names it ("{dtype}" for the case's dtype)
    mark: str  # the MARK comment on the reference's line the change is at
    dev: bool = False  # one of issue 54's two attacks (the thresholds' development pair)
    # another (change, mark) that names the same mistake, accepted after the first run named it
    also: tuple[str, str] | None = None
    missed: str = ""  # why the check misses it (measured on the first run, after the thresholds were set)


@dataclass(frozen=True)
class Placed:
    name: str
    reference: Kernel
    make: Make
    wrong: dict[str, Wrong] = field(default_factory=dict)
    correct: tuple[Kernel, ...] = ()


SCALE_ROUNDED_ELSEWHERE = (
    "x / sqrt(v) rounds sqrt(v) where the mutant rounds rsqrt(v): the rounding that dominates the mutant's deviation "
    "is not the kernel's, and the variance each sums in the dtype is another draw (coefficient 0.02-0.15)"
)
MEAN_FLIPS = (
    "the mean in the dtype lands on the other neighbour of the mutant's in most rows: the kernel's deviation is the "
    "mutant's with the sign reversed (correlation down to -0.93); the derived bound fails these kernels anyway"
)
UPCAST_TO = ".to(torch.float32) dropped"
UPCAST_FLOAT = ".float() dropped"

PLACED: tuple[Placed, ...] = (
    Placed(
        "rms_norm",
        rms_ref,
        _xw,
        {
            "blocks of 64, all in the dtype": Wrong(rms_low_blocks64, UPCAST_TO, "rms-upcast", dev=True),
            "the mutant, every other element 1 ulp off": Wrong(
                one_ulp(rms_all_low_mutant), UPCAST_TO, "rms-upcast", dev=True
            ),
            "a tree, all in the dtype": Wrong(
                rms_low_tree, UPCAST_TO, "rms-upcast", also=("var rounded to {dtype}", "rms-var")
            ),
            "a loop and x / sqrt, all in the dtype": Wrong(
                rms_low_loop_div, UPCAST_TO, "rms-upcast", missed=SCALE_ROUNDED_ELSEWHERE
            ),
        },
        (rms_fp32_blocks64, rms_fp32_tree, rms_fp32_loop_div, rms_torch, rms_fused_blocks),
    ),
    Placed(
        "gemma_rms_norm",
        gemma_ref,
        _xw,
        {
            "Llama's cast order, blocks and x / sqrt": Wrong(
                gemma_llama_blocks_div, "the downcast moved up to h: {dtype} from there on", "gemma-xhat"
            ),
            "Llama's cast order, torch's rms_norm": Wrong(
                gemma_llama_torch, "the downcast moved up to h: {dtype} from there on", "gemma-xhat"
            ),
            "Llama's cast order, a tree": Wrong(
                gemma_llama_tree_low_var, "the downcast moved up to h: {dtype} from there on", "gemma-xhat"
            ),
        },
        (gemma_torch, gemma_blocks_fused, gemma_loop),
    ),
    Placed(
        "softmax",
        softmax_ref,
        _logits,
        {
            "online over blocks, all in the dtype": Wrong(softmax_low_online, UPCAST_FLOAT, "softmax-upcast"),
            "a tree, all in the dtype": Wrong(softmax_low_tree, UPCAST_FLOAT, "softmax-upcast"),
            "exp stored in the dtype, summed in blocks": Wrong(
                softmax_exp_low_blocks, "e rounded to {dtype}", "softmax-exp"
            ),
            "the row sum in the dtype, a tree": Wrong(
                softmax_sum_low_tree, "s rounded to {dtype}", "softmax-sum"
            ),
        },
        (softmax_torch_low, softmax_online_fp32, softmax_via_log, softmax_fp32_tree),
    ),
    Placed(
        "cross_entropy",
        ce_ref,
        _ce_inputs,
        {
            "online, all in the dtype": Wrong(ce_low_online, UPCAST_FLOAT, "ce-upcast"),
            "a tree, all in the dtype": Wrong(ce_low_tree, UPCAST_FLOAT, "ce-upcast"),
            "the lse stored in the dtype, online": Wrong(
                ce_lse_low_online, "lse rounded to {dtype}", "ce-lse"
            ),
        },
        (ce_torch, ce_online_fp32, ce_logsumexp_fp32),
    ),
    Placed(
        "layer_norm",
        ln_ref,
        _ln_inputs,
        {
            "stats in blocks, all in the dtype": Wrong(
                ln_low_blocks, UPCAST_FLOAT, "ln-upcast", missed=MEAN_FLIPS
            ),
            "stats in a tree and x / sqrt, all in the dtype": Wrong(
                ln_low_tree, UPCAST_FLOAT, "ln-upcast", missed=MEAN_FLIPS
            ),
            "x̂ stored in the dtype, stats in blocks": Wrong(
                ln_xhat_low_blocks, "y rounded to {dtype}", "ln-xhat"
            ),
        },
        (ln_torch, ln_torch_low, ln_welford_fp32),
    ),
)
