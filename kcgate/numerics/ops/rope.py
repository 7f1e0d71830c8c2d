"""Rotary position embedding of q and k: NeoX (rotate-half) or GPT-J (interleaved) pairs, with cos/sin given as
inputs or computed by the kernel from a base.

Shape form ``[batch, heads, kv_heads, length, head_dim]`` (head_dim even). Call conventions (those of
Hugging Face's ``apply_rotary_pos_emb`` and Liger's ``liger_rotary_pos_emb``): ``kernel(q, k, cos, sin)`` with
q (batch, heads, length, head_dim), k (batch, kv_heads, length, head_dim) and cos, sin (1, length, head_dim);
with ``params.cos_sin = false``, ``kernel(q, k, base=b)`` and the kernel computes the angles itself. The kernel
returns (q_rot, k_rot); both are checked (flattened and concatenated). Derivation: docs/ops.md#rope.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from kcgate.numerics.ops.base import BoundArgs, GradBound, OpFamily, Tensors, draw
from kcgate.vocab.catalogue import family_constraints

LAYOUTS = ("neox", "gptj")


@dataclass(frozen=True)
class Rope:
    layout: str = "neox"
    cos_sin: bool = True  # cos and sin are inputs; False: the kernel computes them from ``base``
    base: float = 10000.0
    rotary_dim: int = 0  # partial rotary (GPT-NeoX's rotary_pct, Phi, GLM): the first lanes rotate; 0 = all
    # not params: the mistakes the diagnosis tests (sin's sign flipped: rotate_half with its halves swapped;
    # the angles of the position ``shift`` later)
    inverse: bool = False
    shift: int = 0
    # the table read as the other layout's (a GPT-J kernel reads a NeoX table's first half as its pair
    # angles; a NeoX kernel reads a GPT-J table's even lanes as its half table)
    relayout: bool = False
    angle_dtype: str = (
        ""  # the angle table (positions × inv_freq) rounded to this dtype (bfloat16, float16; inv:…)
    )


def angles(length: int, d: int, base: float, layout: str, dtype: str = "") -> torch.Tensor:
    """θ[pos, j] in fp64 for each of the head_dim lanes (each pair's two lanes share one angle); ``dtype``:
    positions, inv_freq and their product rounded to that dtype (the mistake of a low-precision table);
    ``inv:<dtype>``: inv_freq alone rounded, the product exact (a table whose inv_freq buffer was cast)."""
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pos = torch.arange(length, dtype=torch.float64)
    if dtype.startswith("inv:"):
        inv, dtype = inv.to(getattr(torch, dtype[4:])).to(torch.float64), ""
    if dtype:
        dt = getattr(torch, dtype)
        inv, pos = inv.to(dt).to(torch.float64), pos.to(dt).to(torch.float64)
    t = pos[:, None] * inv[None, :]
    if dtype:
        t = t.to(getattr(torch, dtype)).to(torch.float64)
    return torch.cat([t, t], dim=-1) if layout == "neox" else t.repeat_interleave(2, dim=-1)


def rotate(x: torch.Tensor, layout: str) -> torch.Tensor:
    """The partner lane with its sign: NeoX (−x₂, x₁) by halves, GPT-J (−x_odd, x_even) by pairs."""
    if layout == "neox":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)
    return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)


def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """x rotated by the table: its first cos.shape[-1] lanes (partial rotary), the rest passed through."""
    r = cos.shape[-1]
    if r < x.shape[-1]:
        return torch.cat([apply(x[..., :r], cos, sin, layout), x[..., r:]], dim=-1)
    return x * cos + rotate(x, layout) * sin


def rotary(cfg: Rope, d: int) -> int:
    """The lanes that rotate: ``rotary_dim``, or all ``d``."""
    return cfg.rotary_dim or d


def _inputs(cfg: Rope) -> Callable[..., Tensors]:
    def make(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
        b, h, hk, length, d = shape
        q, k = draw((b, h, length, d), dtype, gen, dist), draw((b, hk, length, d), dtype, gen, dist)
        if not cfg.cos_sin:
            return q, k
        theta = angles(length, rotary(cfg, d), cfg.base, cfg.layout)[None]
        return q, k, theta.cos().to(dtype), theta.sin().to(dtype)

    return make


def _cos_sin(x: Tensors, cfg: Rope) -> tuple[torch.Tensor, torch.Tensor]:
    if cfg.cos_sin:
        cos, sin = x[2], x[3]
        if cfg.relayout:
            cos, sin = _relaid(cos, cfg.layout), _relaid(sin, cfg.layout)
    else:
        d = rotary(cfg, x[0].shape[-1])
        theta = angles(x[0].shape[-2], d, cfg.base, cfg.layout, cfg.angle_dtype)[None]
        cos, sin = theta.cos(), theta.sin()
    if cfg.shift:
        cos, sin = cos.roll(-cfg.shift, -2), sin.roll(-cfg.shift, -2)
    return cos, (-sin if cfg.inverse else sin)


def _relaid(t: torch.Tensor, layout: str) -> torch.Tensor:
    """A table of the other layout read as ``layout``'s: its pair angles laid out as ``layout`` lays them."""
    if layout == "gptj":  # a NeoX table [θ, θ]: its first half is the pair angles
        return t[..., : t.shape[-1] // 2].repeat_interleave(2, dim=-1)
    half = t[..., 0::2]  # a GPT-J table [θ0, θ0, θ1, θ1, ...]
    return torch.cat([half, half], dim=-1)


def _oracle(cfg: Rope) -> Callable[..., torch.Tensor]:
    def oracle(*x: torch.Tensor) -> torch.Tensor:
        cos, sin = _cos_sin(x, cfg)
        return torch.cat([apply(t, cos, sin, cfg.layout).flatten() for t in x[:2]])

    return oracle


def _term_err(
    t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cfg: Rope, ba: BoundArgs
) -> torch.Tensor:
    """Allowed |error| of t·cos + rot(t)·sin before its final rounding (lanes past the table's: copied)."""
    r = cos.shape[-1]
    if r < t.shape[-1]:
        rest = torch.zeros_like(t[..., r:])
        return torch.cat([_term_err(t[..., :r], cos, sin, cfg, ba), rest], dim=-1)
    # two products and a sum, each rounded in the compute precision (the input dtype's at most, which is
    # what eager torch does): 4 roundings of the terms allowed
    u_c = max(ba.u_acc, ba.u_in)
    err = 4 * u_c * (t.abs() * cos.abs() + rotate(t, cfg.layout).abs() * sin.abs())
    if not cfg.cos_sin:
        # the kernel's angles in fp32, then cos/sin rounded to the input dtype (u_in): |δcos|, |δsin| ≤
        # |δθ| + u_in. θ = pos·base^(−x), x = 2i/d: x rounds (|δx| ≤ u·x, exact only where d is a power of
        # two), which base^(−x) turns into a relative ln(base)·x·u; pow, the reciprocal and the product
        # round 4u more (measured, docs/ops.md#rope: up to 5.8u·θ at d = 126, 2.1u at d = 64, base 1e4)
        theta = angles(t.shape[-2], t.shape[-1], cfg.base, cfg.layout)[None]
        err = err + (t.abs() + rotate(t, cfg.layout).abs()) * (_angle_rel(t.shape[-1], cfg) * theta + ba.u_in)
    return err


def _angle_rel(d: int, cfg: Rope) -> torch.Tensor:
    """Relative error of each lane's fp32 angle pos·base^(−2i/d): (4 + ln(base)·2i/d)·u_f32, laid out as
    ``angles`` lays the lanes out."""
    x = torch.arange(0, d, 2, dtype=torch.float64) / d
    rel = (4 + math.log(cfg.base) * x) * 2.0**-24
    return torch.cat([rel, rel]) if cfg.layout == "neox" else rel.repeat_interleave(2)


def _bound(cfg: Rope) -> Callable[[Tensors, torch.Tensor, BoundArgs], torch.Tensor]:
    def bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        cos, sin = _cos_sin(x, cfg)
        return torch.cat([_term_err(t, cos, sin, cfg, ba).flatten() for t in x[:2]]) + ba.u_out * y.abs()

    return bound


def _grad_bound(cfg: Rope) -> GradBound:
    def grad_bound(
        x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs
    ) -> tuple[torch.Tensor | None, ...]:
        """dq = dy·cos − rot(dy·sin) is the same rotation transposed (each pair shares one angle): the forward
        bound with dy in place of q. cos and sin are buffers: not differentiated (None)."""
        q, k = x[0], x[1]
        cos, sin = _cos_sin(x, cfg)
        dq, dk = dy[: q.numel()].view(q.shape), dy[q.numel() :].view(k.shape)
        errs = [_term_err(d, cos, sin, cfg, ba) + ba.u_out * gi.abs() for d, gi in zip((dq, dk), g)]
        return (*errs, *((None, None) if cfg.cos_sin else ()))

    return grad_bound


def torch_rope(*x: torch.Tensor, cfg: Rope) -> torch.Tensor:
    """The eager composite in the inputs' dtype (Hugging Face's apply_rotary_pos_emb)."""
    if cfg.cos_sin:
        cos, sin = x[2][:, None], x[3][:, None]
    else:
        theta = angles(x[0].shape[-2], rotary(cfg, x[0].shape[-1]), cfg.base, cfg.layout).float()[None, None]
        cos, sin = theta.cos().to(x[0].dtype), theta.sin().to(x[0].dtype)
    return torch.cat([apply(t, cos, sin, cfg.layout).flatten() for t in x[:2]])


def flatten_pair(result: Any) -> Any:
    """(q_rot, k_rot) → one tensor, in the order of the oracle; anything else is passed on as it is."""
    if (
        isinstance(result, (tuple, list))
        and len(result) == 2
        and all(isinstance(t, torch.Tensor) for t in result)
    ):
        return torch.cat([result[0].flatten(), result[1].flatten()])
    return result


def mistakes(cfg: Rope) -> tuple[tuple[str, OpFamily], ...]:
    other = "gptj" if cfg.layout == "neox" else "neox"
    name = {"neox": "NeoX (rotate-half)", "gptj": "GPT-J (interleaved)"}[other]
    out = (
        (f"the {name} layout instead of the declared one", build(replace(cfg, layout=other))),
        (
            f"the {name} layout instead of the declared one, reading the table's angles as that layout lays "
            "them out",
            build(replace(cfg, layout=other, relayout=True)),
        ),
        (
            "each pair rotated by −θ (rotate_half with its halves swapped: (x₂, −x₁) for (−x₂, x₁))",
            build(replace(cfg, inverse=True)),
        ),
        (
            "the positions off by one (each token rotated by the next position's angle)",
            build(replace(cfg, shift=1)),
        ),
    )
    if cfg.cos_sin:
        return out
    return (
        out
        + tuple(
            (
                f"the angle table (positions × inv_freq) computed in {dt} (its angles off by up to "
                f"{_table_error(dt, cfg):.2g} rad over the first 128 positions)",
                build(replace(cfg, angle_dtype=dt)),
            )
            for dt in ("bfloat16", "float16")
        )
        + tuple(
            (
                f"inv_freq rounded to {dt} before the angle table (positions × inv_freq) is computed (its angles "
                f"off by up to {_table_error('inv:' + dt, cfg):.2g} rad over the first 128 positions)",
                build(replace(cfg, angle_dtype="inv:" + dt)),
            )
            for dt in ("bfloat16", "float16")
        )
    )


def _table_error(dtype: str, cfg: Rope, length: int = 128, d: int = 64) -> float:
    """The largest angle error of a table of 128 positions (head_dim 64) rounded to ``dtype``."""
    exact = angles(length, d, cfg.base, "neox")
    return float((angles(length, d, cfg.base, "neox", dtype) - exact).abs().max())


def _angle_kwargs(cfg: Rope) -> dict[str, Any]:
    """What a kernel that computes its own angles receives: the base, and the rotary dim where partial."""
    return {"base": cfg.base} | ({"rotary_dim": cfg.rotary_dim} if cfg.rotary_dim else {})


def configure(params: dict[str, Any]) -> OpFamily:
    return build(
        Rope(
            layout=str(params.get("layout", "neox")),
            cos_sin=bool(params.get("cos_sin", True)),
            base=float(params.get("base", 10000.0)),
            rotary_dim=int(params.get("rotary_dim", 0)),
        )
    )


def build(cfg: Rope) -> OpFamily:
    return replace(
        ROPE,
        make_inputs=_inputs(cfg),
        oracle=_oracle(cfg),
        bound=_bound(cfg),
        grad_bound=_grad_bound(cfg),
        composite=lambda *x, **_: torch_rope(*x, cfg=cfg),
        mistakes=lambda: mistakes(cfg),
        float_inputs=(0, 1, 2, 3) if cfg.cos_sin else (0, 1),
        kwargs=None if cfg.cos_sin else (lambda shape: _angle_kwargs(cfg)),
        input_names=("q", "k", "cos", "sin") if cfg.cos_sin else ("q", "k"),
    )


_DEFAULT = Rope()
ROPE = OpFamily(
    name="rope",
    make_inputs=_inputs(_DEFAULT),
    oracle=_oracle(_DEFAULT),
    bound=_bound(_DEFAULT),
    grad_bound=_grad_bound(_DEFAULT),
    reduction_len=lambda s: 1,
    float_inputs=(0, 1, 2, 3),
    batch_inputs=(0, 1),
    composite=lambda *x, **_: torch_rope(*x, cfg=_DEFAULT),
    mistakes=lambda: mistakes(_DEFAULT),
    configure=configure,
    output=flatten_pair,
    input_names=("q", "k", "cos", "sin"),
    shape_constraints=family_constraints("rope"),
)
