"""Elementwise activations (gelu, silu): checked in ULPs of the output dtype by default."""

from __future__ import annotations

import torch

from kcgate.numerics.ops.base import ERF_CANCEL, Bound, BoundArgs, OpFamily, Tensors


def _inputs(shape, dtype, gen, dist):  # type: ignore[no-untyped-def]
    from kcgate.numerics.ops.base import draw

    return (draw(shape, dtype, gen, dist),)


def _pointwise_bound(cancel: float) -> Bound:
    def bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
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
        default_shapes=((256, 1024),),
        tolerance=tolerance,
        composite=oracle,
    )


GELU = _family("gelu", lambda x: torch.nn.functional.gelu(x), "error-bound", ERF_CANCEL)
SILU = _family("silu", lambda x: torch.nn.functional.silu(x), "ulp")
