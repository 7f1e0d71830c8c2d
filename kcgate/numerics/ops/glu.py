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

from kcgate.numerics.ops.base import (
    ERF_CANCEL,
    Bound,
    BoundArgs,
    GradBound,
    OpFamily,
    Tensors,
    draw,
    underflow,
)

F = torch.nn.functional


def _inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    return draw(shape, dtype, gen, dist), draw(shape, dtype, gen, dist)


def _act_err(a: torch.Tensor, f: torch.Tensor, u_c: float, cancels: bool) -> torch.Tensor:
    """f(a)'s error: a few roundings in the compute precision (the input dtype's at most, as eager torch rounds
    f(a) before the product), plus gelu's 1 + erf (1 + tanh) cancellation for a < −3 (``ERF_CANCEL``)."""
    return 8 * u_c * f.abs() + (ERF_CANCEL * u_c * a.abs() if cancels else 0.0)


def _glu_bound(cancels: bool) -> Bound:
    def bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        a, b = x
        # the activation, then the product, then the output
        u_c = max(ba.u_acc, ba.u_in)
        act = F.silu(a) if not cancels else F.gelu(a)
        f_err = _act_err(a, act, u_c, cancels)
        # fp16 products and activations of tiny magnitude land among subnormals: an absolute error
        tiny = 2 * underflow(ba.u_in) * (1 + b.abs()) + 2 * underflow(ba.u_out)
        return (f_err + 2 * u_c * act.abs()) * b.abs() + ba.u_out * y.abs() + tiny

    return bound


def _fprime_mag(a: torch.Tensor, act: str) -> torch.Tensor:
    """Magnitude of the terms of f'(a), whose sum crosses zero (silu' at a ≈ −1.28, gelu' at a ≈ −0.75), so
    its error is relative to them, each difference counted as the sum of its terms' magnitudes:
    silu' = σ + a·σ(1 − σ); gelu' = ½(1 + erf) + a·φ; tanh-gelu' = ½(1 + t) + ½a(1 − t²)·z' with
    t = tanh z, z = √(2/π)(a + 0.044715a³) (1 + erf, 1 + t and 1 − t² all cancel for a < −3). The second
    terms also carry their argument's rounding: exp(−a) and exp(−a²/2) are relative to |a| and a²/2 ulps,
    1 − tanh²(z) to 2|z|."""
    if act == "silu":
        sg = torch.sigmoid(a)
        return sg + a.abs() * sg * (1 - sg) * (1 + a.abs())
    if act == "tanh":
        c = (2 / torch.pi) ** 0.5
        z = c * (a + 0.044715 * a**3)
        t = torch.tanh(z)
        # 1 − t² to its roundings, u·(1 + t²), plus z's own rounding through d(1 − t²)/dz = −2t(1 − t²):
        # 2|z|·(1 − t²), which vanishes as t → 1 (a factor (1 + 2|z|) on the whole term made one x = 4.5 in a
        # bf16 gradient 12x its value, and the case refused: allowed error / output 1.21, llm.c's gelu)
        return 0.5 * (1 + t.abs()) + 0.5 * a.abs() * c * (1 + 3 * 0.044715 * a * a) * (
            1 + t * t + 2 * z.abs() * (1 - t * t)
        )
    phi = torch.exp(-0.5 * a * a) / (2 * torch.pi) ** 0.5
    return 0.5 * (1 + torch.erf(a / 2**0.5).abs()) + a.abs() * phi * (1 + 0.5 * a * a)


def _glu_grad_bound(act: str) -> GradBound:
    def grad_bound(
        x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs
    ) -> tuple[torch.Tensor | None, ...]:
        """da = dy·b·f'(a): dy·b rounded, f'(a) to 16 roundings of its terms, the product rounded;
        db = dy·f(a): f(a) as in the forward bound, the product rounded; each then in the gradient's dtype."""
        a, b = x
        u_c = max(ba.u_acc, ba.u_in)
        cancels = act != "silu"
        f = F.silu(a) if not cancels else F.gelu(a, approximate="tanh" if act == "tanh" else "none")
        f_err = _act_err(a, f, u_c, cancels)
        tiny = 2 * underflow(ba.u_in) * (1 + dy.abs() * (1 + b.abs()))
        # f'(a): about 13 roundings of its terms (the argument, erf or exp or tanh, whose vectorized
        # versions cost ≈ 5 ulps alone, the products and the sum): 16 allowed; gelu's erf also errs by ≈ 5u
        # absolute whatever its size (as in the forward bound): 8u
        fp = 16 * u_c * _fprime_mag(a, act) + (8 * u_c if act == "gelu" else 0.0)
        da = fp * (dy * b).abs() + 2 * u_c * g[0].abs()
        db = f_err * dy.abs() + 2 * u_c * g[1].abs()
        return da + ba.u_out * g[0].abs() + tiny, db + ba.u_out * g[1].abs() + tiny

    return grad_bound


def _geglu(approximate: str) -> Callable[..., torch.Tensor]:
    return lambda a, b, **_: F.gelu(a, approximate=approximate) * b


def _geglu_mistakes(approximate: str) -> tuple[tuple[str, OpFamily], ...]:
    other = "none" if approximate == "tanh" else "tanh"
    return ((f"gelu with approximate = {other!r} instead of {approximate!r}", _build_geglu(other)),)


def _configure_geglu(params: dict[str, Any]) -> OpFamily:
    return _build_geglu(str(params.get("approximate", "none")))


def _build_geglu(approximate: str) -> OpFamily:
    return replace(
        GEGLU,
        oracle=_geglu(approximate),
        composite=_geglu(approximate),
        grad_bound=_glu_grad_bound("tanh" if approximate == "tanh" else "gelu"),
        kwargs=(lambda shape: {"approximate": "tanh"}) if approximate == "tanh" else None,
        mistakes=lambda: _geglu_mistakes(approximate),
    )


def _family(name: str, oracle: Callable[..., torch.Tensor], cancels: bool, **kw: Any) -> OpFamily:
    return OpFamily(
        name=name,
        make_inputs=_inputs,
        oracle=oracle,
        bound=_glu_bound(cancels),
        grad_bound=_glu_grad_bound("gelu" if cancels else "silu"),
        reduction_len=lambda s: 1,
        float_inputs=(0, 1),
        batch_inputs=(0, 1),
        composite=oracle,
        input_names=("a", "b"),
        **kw,
    )


def _swiglu_mistakes() -> tuple[tuple[str, OpFamily], ...]:
    """silu on the up projection b instead of the gate a: the same family with the inputs' roles swapped."""
    bound = _glu_bound(False)
    swapped = replace(
        SWIGLU,
        oracle=lambda a, b: a * F.silu(b),
        bound=lambda x, y, ba: bound((x[1], x[0]), y, ba),
        mistakes=None,
    )
    return (("silu on the wrong half (the up projection b, not the gate a)", swapped),)


def _swiglu_grad_mistakes() -> tuple[tuple[str, OpFamily], ...]:
    """The backward's silu'(a) = σ(a)·(1 + a·(1 − σ(a))) taken as σ(a): the path through σ lost."""
    lost = replace(
        SWIGLU, oracle=lambda a, b: a * torch.sigmoid(a).detach() * b, mistakes=None, grad_mistakes=None
    )
    return (("its backward's silu'(a) taken as σ(a) (the a·σ'(a) term lost)", lost),)


SWIGLU = _family(
    "swiglu",
    lambda a, b: F.silu(a) * b,
    False,
    mistakes=_swiglu_mistakes,
    grad_mistakes=_swiglu_grad_mistakes,
)
GEGLU = _family(
    "geglu", _geglu("none"), True, configure=_configure_geglu, mistakes=lambda: _geglu_mistakes("none")
)
