"""User-defined ops: the contract names ``inputs(shape, dtype, generator)`` and ``reference(*inputs)``; the
bound is derived from the reference's own operations (kcgate.numerics.derived)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from kcgate.numerics.derived import Precision, as_drawn, derive, in_fp64
from kcgate.numerics.ops.base import BoundArgs, OpFamily, Tensors


def derived_bound(
    reference: Callable[..., Any],
) -> Callable[[Tensors, torch.Tensor, BoundArgs], torch.Tensor]:
    """The reference's derived per-element bound on its (first) output."""

    def bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        prec = Precision(ba.u_in or ba.u_acc, ba.u_acc, ba.u_out)
        drawn = as_drawn(x, _dtype_of(ba.u_in))
        with torch.no_grad():
            got = derive(lambda: reference(*drawn), drawn, prec, (ba.u_out,), seed=ba.seed)
        return got.bounds[0].reshape(y.shape).to(y.device)

    return bound


def derived_grad_bound(reference: Callable[..., Any]) -> Callable[..., tuple[torch.Tensor | None, ...]]:
    """Each float input's gradient bound: the reference's forward and fp64 autograd backward, both perturbed
    (a correct backward rounds at every operation of its own too), each gradient rounded to its input dtype."""

    def grad_bound(
        x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs
    ) -> tuple[torch.Tensor | None, ...]:
        leaves = [t.detach().requires_grad_() if t.is_floating_point() else t for t in x]
        diff = [t for t in leaves if t.is_floating_point()]

        def run() -> Any:
            with torch.enable_grad():
                out = reference(*leaves)
                out = out[0] if isinstance(out, (tuple, list)) else out
                gs = torch.autograd.grad(out, diff, dy.expand_as(out), allow_unused=True)
            return tuple(torch.zeros_like(t) if gi is None else gi for gi, t in zip(gs, diff))

        prec = Precision(ba.u_in or ba.u_acc, ba.u_acc, ba.u_out)
        got = iter(derive(run, x, prec, (ba.u_out,), seed=ba.seed).bounds)
        return tuple(next(got) if t.is_floating_point() else None for t in x)

    return grad_bound


def _dtype_of(u: float) -> torch.dtype:
    """The float dtype whose unit roundoff is ``u`` (fp64 where none is)."""
    fmts = (torch.float16, torch.bfloat16, torch.float32)
    return next((d for d in fmts if float(torch.finfo(d).eps) / 2 == u), torch.float64)


def signature_names(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The positional parameter names of ``fn`` (a reference's, naming the inputs); () when it has none."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in params if p.kind in kinds)


def custom_op(inputs: Callable[..., Any], reference: Callable[..., Any]) -> OpFamily:
    def make(shape, dtype, gen, dist):  # type: ignore[no-untyped-def]
        out = inputs(tuple(shape), dtype, gen)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    return OpFamily(
        name="custom",
        make_inputs=make,
        oracle=functools.wraps(reference)(lambda *x: in_fp64(reference, x)),  # unwrapped by explain
        bound=derived_bound(reference),
        reduction_len=lambda s: s[-1] if s else 1,
        tolerance="error-bound",
        grad_bound=derived_grad_bound(reference),
        input_names=signature_names(reference),
    )
