"""Gated linear units: swiglu = silu(a)·b and geglu = gelu(a)·b (erf or tanh gelu).

Shape form ``[rows, n]``; call ``kernel(a, b)`` with a and b (rows, n) (Liger's ``LigerSiLUMulFunction`` and
``LigerGELUMulFunction`` convention); geglu with ``params.approximate = "tanh"`` receives ``approximate="tanh"``.
Derivation of the bound: docs/ops.md#swiglu-and-geglu.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from kcgate.ops.base import BoundArgs, OpFamily, Tensors, draw, underflow

F = torch.nn.functional


def _inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    return draw(shape, dtype, gen, dist), draw(shape, dtype, gen, dist)


def _glu_bound(cancels: bool) -> Callable[[Tensors, torch.Tensor, BoundArgs], torch.Tensor]:
    def bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        a, b = x
        # the activation to a few roundings in the compute precision (the input dtype's at most, as eager
        # torch rounds f(a) before the product), plus gelu's 1 + erf (1 + tanh) cancellation for a < −3
        # (≈ c·u·|a| absolute, c ≈ 5 measured for torch's erf; 8 allowed); then the product, then the output
        u_c = max(ba.u_acc, ba.u_in)
        act = F.silu(a) if not cancels else F.gelu(a)
        f_err = 8 * u_c * act.abs() + (8 * u_c * a.abs() if cancels else 0.0)
        # fp16 products and activations of tiny magnitude land among subnormals: an absolute error
        tiny = 2 * underflow(ba.u_in) * (1 + b.abs()) + 2 * underflow(ba.u_out)
        return (f_err + 2 * u_c * act.abs()) * b.abs() + ba.u_out * y.abs() + tiny

    return bound


def _geglu(approximate: str) -> Callable[..., torch.Tensor]:
    return lambda a, b, **_: F.gelu(a, approximate=approximate) * b


def _configure_geglu(params: dict[str, Any]) -> OpFamily:
    approximate = str(params.get("approximate", "none"))
    return replace(
        GEGLU,
        oracle=_geglu(approximate),
        composite=_geglu(approximate),
        kwargs=(lambda shape: {"approximate": "tanh"}) if approximate == "tanh" else None,
    )


def _family(name: str, oracle: Callable[..., torch.Tensor], cancels: bool, **kw: Any) -> OpFamily:
    return OpFamily(
        name=name,
        make_inputs=_inputs,
        oracle=oracle,
        bound=_glu_bound(cancels),
        reduction_len=lambda s: 1,
        default_shapes=((64, 1024),),
        float_inputs=(0, 1),
        batch_inputs=(0, 1),
        composite=oracle,
        input_names=("a", "b"),
        **kw,
    )


SWIGLU = _family("swiglu", lambda a, b: F.silu(a) * b, False)
GEGLU = _family("geglu", _geglu("none"), True, configure=_configure_geglu)
