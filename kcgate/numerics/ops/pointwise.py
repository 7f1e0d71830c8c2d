"""Elementwise activations: gelu (erf or tanh), silu, and the ``pointwise`` family of named functions.

``pointwise`` runs one of ``POINTWISE`` (relu, leaky_relu, sigmoid, tanh, elu, hardswish, mish, softplus),
named by ``params.fn`` or by the contract's ``reference`` (the reference is the oracle; the bound identifies
the function from the oracle's values, and a function it does not know gets the generic bound). Each
function's bound is a few roundings of the magnitudes of the terms it is computed from, with the
cancellations its textbook formulas have (exp(x) − 1, log(1 + exp(x)), 1 − tanh²): docs/ops.md#pointwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from kcgate.numerics.ops.base import (
    ERF_CANCEL,
    Bound,
    BoundArgs,
    GradBound,
    OpFamily,
    Tensors,
    underflow,
)
from kcgate.numerics.ops.glu import _fprime_mag
from kcgate.vocab.catalogue import POINTWISE

F = torch.nn.functional


def _inputs(shape, dtype, gen, dist):  # type: ignore[no-untyped-def]
    from kcgate.numerics.ops.base import draw

    return (draw(shape, dtype, gen, dist),)


def _pointwise_bound(cancel: float, eager: bool = False) -> Bound:
    def bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        if eager:  # every step in the compute precision u_c = max(u_acc, u_in) (docs/ops.md#pointwise)
            u_c = max(ba.u_acc, ba.u_in)
            return (8 * u_c + ba.u_out) * y.abs() + cancel * u_c * x[0].abs() + 2 * underflow(ba.u_out)
        # A few roundings in the compute precision, then one in the output dtype; cancel·u·|x| covers gelu's
        # 1 + erf(x/√2) cancelling for x < −3 (ERF_CANCEL; silu keeps the 8 it always had). u_in·|y|: eager
        # torch stores an intermediate factor in the input dtype (x * sigmoid(x) rounds σ(x);
        # docs/ops.md#eager-composites).
        return (8 * ba.u_acc + ba.u_out + ba.u_in) * y.abs() + cancel * ba.u_acc * x[0].abs()

    return bound


def _gelu_grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    """dx = dy·(Φ(x) + x·φ(x)): a few roundings relative to dx, plus Φ's absolute error from 1 + erf
    cancelling for x < −3 (about u, times dy, and x·φ's about u·|x|)."""
    return (
        (8 * ba.u_acc + ba.u_out) * g[0].abs()
        + 8 * ba.u_acc * dy.abs() * (1 + x[0].abs()) * _phi_scale(x[0]),
    )


def _phi_scale(x: torch.Tensor) -> torch.Tensor:
    # Φ(x) + |x|·φ(x) bounds the magnitude of each term of the derivative whose error we allow
    return torch.special.ndtr(x.abs()) + x.abs() * torch.exp(-0.5 * x * x) / 2.5066282746310002


def _silu_grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    """dx = dy·σ(x)·(1 + x·(1 − σ(x))): relative roundings, plus the cancellation of 1 + x·(1 − σ) near
    its zero (x ≈ −1.28), an absolute error of about u·σ(x)·(1 + |x|)."""
    s = torch.sigmoid(x[0])
    # eager x * sigmoid(x) in the input dtype: autograd rounds σ, dy·σ, dy·x and dy·x·σ(1 − σ) to it
    # before adding the two terms, u_in·|dy|·σ·(2 + 3|x|(1 − σ)) ≤ 3u_in·|dy|·σ·(1 + |x|) where they cancel
    cancel = (8 * ba.u_acc + 3 * ba.u_in) * dy.abs() * s * (1 + x[0].abs())
    return ((8 * ba.u_acc + ba.u_out) * g[0].abs() + cancel,)


_GRADS = {"gelu": _gelu_grad, "silu": _silu_grad}


def _family(name: str, oracle, tolerance: str, cancel: float = 8.0) -> OpFamily:  # type: ignore[no-untyped-def]
    return OpFamily(
        grad_bound=_GRADS[name],
        input_names=("x",),
        name=name,
        make_inputs=_inputs,
        oracle=oracle,
        bound=_pointwise_bound(cancel),
        reduction_len=lambda s: 1,
        tolerance=tolerance,
        composite=oracle,
    )


def _tanh_gelu_grad(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    """dx = dy·f'(x) for the tanh approximation: f' to 16 roundings of its terms (glu's ``_fprime_mag``: 1 + t
    and 1 − t² cancel for x < −3), then the product and the gradient's rounding."""
    u_c = max(ba.u_acc, ba.u_in)
    return ((8 * ba.u_acc + ba.u_out) * g[0].abs() + 16 * u_c * dy.abs() * _fprime_mag(x[0], "tanh"),)


def _gelu(approximate: str) -> Callable[..., torch.Tensor]:
    return lambda x, **_: F.gelu(x, approximate=approximate)


def _configure_gelu(params: dict[str, Any]) -> OpFamily:
    return _build_gelu(str(params.get("approximate", "none")))


def _build_gelu(approximate: str) -> OpFamily:
    """gelu with ``approximate``: like eps, it declares the kernel's own approximation, which the kernel is not
    passed (transformers' NewGELUActivation takes no argument; F.gelu: ``call = { kwargs = { approximate =
    "tanh" } }``). Under a tanh contract the erf gelu is its known mistake; under the erf contract a tanh gelu
    keeps the name it always had, C-CMP-01's smooth "approximation"."""
    return replace(
        GELU,
        oracle=_gelu(approximate),
        # the tanh form as model code writes it (transformers' NewGELUActivation) runs eagerly in the input
        # dtype: each step rounds there, so its roundings and the 1 + tanh cancellation are in u_c
        bound=_pointwise_bound(ERF_CANCEL, eager=True) if approximate == "tanh" else GELU.bound,
        composite=_gelu(approximate),
        grad_bound=_tanh_gelu_grad if approximate == "tanh" else _gelu_grad,
        mistakes=(lambda: (("approximate = 'none' instead of 'tanh'", _build_gelu("none")),))
        if approximate == "tanh"
        else None,
    )


GELU = replace(
    _family("gelu", _gelu("none"), "error-bound", ERF_CANCEL),
    configure=_configure_gelu,
)
SILU = _family("silu", lambda x: torch.nn.functional.silu(x), "ulp")


# ---- pointwise: named elementwise functions -----------------------------------------------------------


@dataclass(frozen=True)
class Pointwise:
    fn: str = ""  # one of POINTWISE; "" = named by the contract's reference (identified from its values)
    negative_slope: float = 0.01  # leaky_relu
    alpha: float = 1.0  # elu


def _apply(name: str, cfg: Pointwise, x: torch.Tensor) -> torch.Tensor:
    """The named function in fp64 (torch's own definitions: softplus at beta 1, threshold 20)."""
    if name == "leaky_relu":
        return F.leaky_relu(x, cfg.negative_slope)
    if name == "elu":
        return F.elu(x, cfg.alpha)
    return _PLAIN[name](x)


_PLAIN: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "hardswish": F.hardswish,
    "mish": F.mish,
    "softplus": F.softplus,
}


def _terms(name: str, cfg: Pointwise, x: torch.Tensor, y: torch.Tensor, u_c: float) -> torch.Tensor:
    """Allowed |error| of f(x) before the output's rounding, for a kernel computing in precision u_c (eager
    torch rounds intermediates to the input dtype; fused kernels in fp32): docs/ops.md#pointwise."""
    ax, ay = x.abs(), y.abs()
    if name == "relu":
        return torch.zeros_like(y)  # exact: max(x, 0) needs no rounding
    if name == "leaky_relu":
        return 2 * u_c * ay  # the slope held in the compute precision, then s·x rounded
    if name == "sigmoid":
        # exp, 1 + e, the division: 8 roundings relative; the exp's argument, |x|·σ(1 − σ)
        return 8 * u_c * (ay + ax * y * (1 - y))
    if name == "tanh":
        # relative roundings and the argument, plus the textbook forms' cancellation near 0:
        # (e^2x − 1)/(e^2x + 1) and 2σ(2x) − 1 err by about u absolute there
        return 8 * u_c * (ay + ax * (1 - y * y)) + 4 * u_c * (1 - y * y)
    if name == "elu":
        neg = x < 0
        e = torch.where(neg, cfg.alpha * torch.exp(x.clamp(max=0)), torch.zeros_like(x))
        # α(e^x − 1): e^x rounded (relative, and its argument), then the subtraction cancels near 0: an
        # absolute u·α·e^x that no relative term covers (torch uses expm1; textbook kernels exp(x) − 1)
        return 8 * u_c * ay + 8 * u_c * e * (1 + ax)
    if name == "hardswish":
        # x·clamp(x + 3, 0, 6)/6: x + 3, the product and the division, relative to |x|·(|x| + 3)/6
        return 4 * u_c * torch.where(x > -3, ax * torch.clamp(ax + 3, max=6) / 6, torch.zeros_like(x))
    if name == "mish":
        # x·tanh(sp), sp = log(1 + e^x): log(1 + e^x) errs by about u absolute (textbook form), which
        # tanh carries through (1 − t²) and the product multiplies by |x|
        sp = F.softplus(x)
        t = torch.tanh(sp)
        return 8 * u_c * ay + 4 * u_c * ax * (1 - t * t) * (1 + sp)
    if name == "softplus":
        # log(1 + e^x): 1 + e^x rounded is an absolute error u in the log (log1p avoids it; textbook
        # kernels do not), the log and the exp relative
        return 8 * u_c * ay + 2 * u_c
    return _generic(x, y, u_c)


def _generic(x: torch.Tensor, y: torch.Tensor, u_c: float) -> torch.Tensor:
    """A function kcgate does not know (a reference it cannot identify): a few roundings relative to |y| and
    to the argument, |x|·|f'(x)|, with f' from the oracle's own values (neighbouring distinct inputs), plus
    an absolute 4u·|f'| for the cancellations of the textbook forms."""
    slope = _slope(x, y)
    return 8 * u_c * (y.abs() + (1 + x.abs()) * slope)


def _slope(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """|f'(x)| estimated from the (x, f(x)) pairs: the slopes to each distinct input's two neighbours."""
    xs, inverse = torch.unique(x.flatten(), sorted=True, return_inverse=True)
    if xs.numel() < 2:
        return torch.zeros_like(y)
    ys = torch.zeros_like(xs).scatter_(0, inverse, y.flatten().to(xs.dtype))
    d = ((ys[1:] - ys[:-1]) / (xs[1:] - xs[:-1])).abs()
    left = torch.cat([d[:1], d])
    right = torch.cat([d, d[-1:]])
    # the smaller of the two: a smooth f has both alike, and a jump (a kink of f') is not a slope
    return torch.minimum(left, right)[inverse].reshape(y.shape)


def identify(x: torch.Tensor, y: torch.Tensor, cfg: Pointwise) -> str:
    """Which of ``POINTWISE`` the oracle computed (its values on these inputs, to 1e-9 in fp64); "" none."""
    for name in POINTWISE:
        f = _apply(name, cfg, x)
        if torch.allclose(f, y, rtol=1e-9, atol=1e-12):
            return name
    return ""


def _identify_grad(x: torch.Tensor, dy: torch.Tensor, g: torch.Tensor, cfg: Pointwise) -> str:
    """Which of ``POINTWISE`` has this fp64 gradient dy·f'(x) (a reference's, by autograd); "" none."""
    for name in POINTWISE:
        xr = x.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            (gf,) = torch.autograd.grad(_apply(name, cfg, xr), xr, dy)
        if torch.allclose(gf, g, rtol=1e-9, atol=1e-12):
            return name
    return ""


def _named(cfg: Pointwise, x: torch.Tensor, y: torch.Tensor) -> str:
    return cfg.fn or identify(x, y, cfg)


def _pw_bound(cfg: Pointwise) -> Bound:
    def bound(xs: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        x = xs[0]
        u_c = max(ba.u_acc, ba.u_in)
        # outputs (and eager intermediates) of tiny magnitude land among fp16's subnormals: absolute
        tiny = 2 * underflow(ba.u_out) + 2 * underflow(ba.u_in)
        return _terms(_named(cfg, x, y), cfg, x, y, u_c) + ba.u_out * y.abs() + tiny

    return bound


def _dterms(name: str, cfg: Pointwise, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The magnitude of the terms f'(x) is computed from (its rounding is relative to them, not to f',
    which may be small where they cancel): autograd's formulas on the saved output or input."""
    ax = x.abs()
    if name == "relu":
        return torch.zeros_like(x)  # dy or 0: a copy
    if name == "leaky_relu":
        return torch.where(x > 0, torch.ones_like(x), torch.full_like(x, abs(cfg.negative_slope)))
    if name == "sigmoid":
        return y * (1 - y) * (1 + ax) + y * y  # σ(1 − σ) from the saved σ: σ² rounded
    if name == "tanh":
        # 1 − y² from the saved y cancels as |y| → 1; the textbook quotient (e^2x − 1)/(e^2x + 1)'s backward
        # is the difference of two terms of magnitude up to 2 each that cancel to 1 − y²
        return (1 - y * y) * (1 + ax) + 4 * y * y
    if name == "elu":
        e = cfg.alpha * torch.exp(x.clamp(max=0))
        return torch.where(x < 0, e * (1 + ax) + y.abs() + abs(cfg.alpha), torch.ones_like(x))
    if name == "hardswish":
        return torch.where(
            x > 3, torch.ones_like(x), torch.where(x > -3, (2 * ax + 3) / 6, torch.zeros_like(x))
        )
    if name == "mish":
        sp = F.softplus(x)
        t = torch.tanh(sp)
        return t.abs() + ax * torch.sigmoid(x) * (1 + t * t) * (1 + ax)
    if name == "softplus":
        return torch.sigmoid(x) * (1 + ax)
    return (1 + ax) * _slope(x, y)


def _kink(name: str, cfg: Pointwise, x: torch.Tensor, u_c: float) -> torch.Tensor:
    """Where f has no derivative (relu's 0, hardswish's ±3, elu's 0 at α ≠ 1), autograd may take either
    one-sided derivative (``clamp`` passes the gradient at its bounds, ``torch.where(x > 0, ...)`` does not):
    the jump between them is allowed there. Inputs land on these points exactly (integers, bf16 values), and
    hardswish's x + 3 rounds onto 6 from within a few of its ulps (bf16 3.016 + 3 is 6)."""
    if name in ("relu", "leaky_relu"):
        s = 0.0 if name == "relu" else cfg.negative_slope
        return torch.where(x == 0, abs(1 - s), 0.0)
    if name == "hardswish":
        return torch.where(((x.abs() - 3).abs() <= 24 * u_c) | (x.abs() == 3), 0.5, 0.0)
    if name == "elu":
        return torch.where(x == 0, abs(1 - cfg.alpha), 0.0)
    return torch.zeros_like(x)


def _pw_grad(cfg: Pointwise) -> GradBound:
    def grad(xs: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor | None, ...]:
        """dx = dy·f'(x): f' to 8 roundings of its terms' magnitudes (``_dterms``), the product, the
        gradient's own rounding, and fp16's subnormal spacing."""
        x = xs[0]
        u_c = max(ba.u_acc, ba.u_in)
        name = cfg.fn or _identify_grad(x, dy, g[0], cfg)
        y = _apply(name, cfg, x) if name else None
        tiny = 2 * underflow(ba.u_out) + 2 * underflow(ba.u_in)
        if y is None:  # a function kcgate does not know: f' = g / dy, and its slope's
            fp = (g[0] / dy).nan_to_num(0.0, 0.0, 0.0)
            mag = fp.abs() + (1 + x.abs()) * _slope(x, fp)
            return (8 * u_c * dy.abs() * mag + (2 * u_c + ba.u_out) * g[0].abs() + tiny,)
        # the jump at a kink, itself rounded (to the gradient's dtype, through the product's steps)
        d = 8 * u_c * _dterms(name, cfg, x, y) + (1 + 4 * u_c) * _kink(name, cfg, x, u_c)
        return (dy.abs() * d + (2 * u_c + ba.u_out) * g[0].abs() + tiny,)

    return grad


def _pw_oracle(cfg: Pointwise) -> Callable[..., torch.Tensor]:
    def oracle(x: torch.Tensor, **_: Any) -> torch.Tensor:
        if not cfg.fn:
            raise ValueError('op "pointwise" needs params.fn or a reference (docs/ops.md#pointwise)')
        return _apply(cfg.fn, cfg, x)

    return oracle


def _pw_mistakes(cfg: Pointwise) -> tuple[tuple[str, OpFamily], ...]:
    """A slope or alpha off by ten (0.1 for 0.01, the commonest leaky_relu slip)."""
    if cfg.fn == "leaky_relu":
        s = cfg.negative_slope
        return tuple(
            (f"negative_slope = {a:g} instead of {s:g}", build_pointwise(replace(cfg, negative_slope=a)))
            for a in (s * 10, s / 10)
        )
    if cfg.fn == "elu":
        a = cfg.alpha
        return ((f"alpha = 1 instead of {a:g}", build_pointwise(replace(cfg, alpha=1.0))),) if a != 1 else ()
    return ()


def configure_pointwise(params: dict[str, Any]) -> OpFamily:
    return build_pointwise(
        Pointwise(
            fn=str(params.get("fn", "")),
            negative_slope=float(params.get("negative_slope", 0.01)),
            alpha=float(params.get("alpha", 1.0)),
        )
    )


def build_pointwise(cfg: Pointwise) -> OpFamily:
    oracle = _pw_oracle(cfg)
    return replace(
        POINTWISE_FAMILY,
        oracle=oracle,
        bound=_pw_bound(cfg),
        grad_bound=_pw_grad(cfg),
        # torch's own function in the case dtype; none named (a reference): the reference on the
        # low-precision inputs (OpFamily.composite's None)
        composite=oracle if cfg.fn else None,
        mistakes=(lambda: _pw_mistakes(cfg)) if cfg.fn in ("leaky_relu", "elu") else None,
    )


_DEFAULT = Pointwise()
POINTWISE_FAMILY = OpFamily(
    name="pointwise",
    make_inputs=_inputs,
    oracle=_pw_oracle(_DEFAULT),
    bound=_pw_bound(_DEFAULT),
    grad_bound=_pw_grad(_DEFAULT),
    reduction_len=lambda s: 1,
    input_names=("x",),
    configure=configure_pointwise,
)
