"""User-defined ops: the contract names ``inputs(shape, dtype, generator)`` and ``reference(*inputs)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kcgate.numerics.ops.base import BoundArgs, OpFamily, Tensors


def _generic_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    # Without error analysis for an unknown op, allow a few roundings relative to the output.
    return (8 * ba.u_acc + ba.u_out) * y.abs()


def _generic_grad_bound(
    x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs
) -> tuple[torch.Tensor | None, ...]:
    return tuple(
        (8 * ba.u_acc + ba.u_out) * gi.abs() if t.is_floating_point() else None for t, gi in zip(x, g)
    )


def custom_op(inputs: Callable[..., Any], reference: Callable[..., Any]) -> OpFamily:
    def make(shape, dtype, gen, dist):  # type: ignore[no-untyped-def]
        out = inputs(tuple(shape), dtype, gen)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    return OpFamily(
        name="custom",
        make_inputs=make,
        oracle=reference,
        bound=_generic_bound,
        reduction_len=lambda s: s[-1] if s else 1,
        tolerance="abs-rel",
        grad_bound=_generic_grad_bound,
    )
