"""User-defined ops: the contract names ``inputs(shape, dtype, generator)`` and ``reference(*inputs)``; the
bound is derived from the reference's own operations (kcgate.numerics.derived)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kcgate.numerics.derived import Derived, Precision, as_drawn, derive, in_fp64
from kcgate.numerics.ops.base import BoundArgs, OpFamily, Tensors
from kcgate.numerics.outputs import differentiable, multiple, raw


def derived_bound(
    reference: Callable[..., Any],
) -> Callable[[Tensors, torch.Tensor, BoundArgs], torch.Tensor]:
    """The reference's derived per-element bound on its output; for several outputs (kcgate.numerics.outputs)
    each one's bound, flattened in their order (an integer output's is zero: it must be equal)."""

    def bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        prec = Precision(ba.u_in or ba.u_acc, ba.u_acc, ba.u_out)
        drawn = as_drawn(x, _dtype_of(ba.u_in))
        with torch.no_grad():
            got = derive(
                lambda: _listed(reference(*drawn)),
                drawn,
                prec,
                (ba.u_out,),
                seed=ba.seed,
                errors=ba.errors,
                floor=ba.floor,
            )
        if len(got.refs) == 1:
            return got.bounds[0].reshape(y.shape).to(y.device)
        parts = [b.reshape(-1) if r.is_floating_point() else torch.zeros(r.numel(), dtype=torch.float64)
                 for b, r in zip(got.bounds, got.refs)]  # fmt: skip
        return torch.cat(parts).reshape(y.shape).to(y.device)

    return bound


def derived_grad_bound(reference: Callable[..., Any]) -> Callable[..., tuple[torch.Tensor | None, ...]]:
    """Each float input's gradient bound: the reference's forward and fp64 autograd backward, both perturbed
    (a correct backward rounds at every operation of its own too), each gradient rounded to its input dtype."""
    derived = derived_grads(reference)

    def grad_bound(
        x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs
    ) -> tuple[torch.Tensor | None, ...]:
        got = iter(derived(x, dy, ba).bounds)
        return tuple(next(got) if t.is_floating_point() else None for t in x)

    return grad_bound


def derived_grads(reference: Callable[..., Any]) -> Callable[[Tensors, torch.Tensor, BoundArgs], Derived]:
    """The derivation behind ``derived_grad_bound``: the float inputs' fp64 gradients, their bounds and the
    samples' spread (kcgate.engine.derived_excess reads it), in the float inputs' order."""

    def derived(x: Tensors, dy: torch.Tensor, ba: BoundArgs) -> Derived:
        leaves = [t.detach().requires_grad_() if t.is_floating_point() else t for t in x]
        diff = [t for t in leaves if t.is_floating_point()]

        def run() -> Any:
            with torch.enable_grad():
                out = reference(*leaves)
                if multiple(out):  # every output, each with its share of the flat cotangent
                    outs, dys = differentiable(tuple(("", t) for _, t in raw(out)), dy)
                    gs = torch.autograd.grad(outs, diff, dys, allow_unused=True)
                else:
                    out = out[0] if isinstance(out, (tuple, list)) else out
                    gs = torch.autograd.grad(out, diff, dy.expand_as(out), allow_unused=True)
            return tuple(torch.zeros_like(t) if gi is None else gi for gi, t in zip(gs, diff))

        prec = Precision(ba.u_in or ba.u_acc, ba.u_acc, ba.u_out)
        return derive(run, x, prec, (ba.u_out,), seed=ba.seed, errors=ba.errors, floor=ba.floor)

    return derived


def _listed(result: Any) -> Any:
    """Several outputs as a list in kcgate's order (dict keys sorted); one as it is."""
    return [t for _, t in raw(result)] if multiple(result) else result


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


def generated(out: Any) -> tuple[Tensors, tuple[str, ...]]:
    """An input generator's result as the kernel's positional inputs and the names it carries: a dict's keys
    (in its order: the order the kernel takes them), a named tuple's fields, else none."""
    if isinstance(out, dict):
        return tuple(out.values()), tuple(map(str, out))
    fields = getattr(out, "_fields", None)
    if isinstance(out, tuple) and fields:
        return tuple(out), tuple(map(str, fields))
    return (tuple(out) if isinstance(out, (tuple, list)) else (out,)), ()


def generator_names(inputs: Callable[..., Any], shape: Sequence[int] | None) -> tuple[str, ...]:
    """The names the input generator gives its inputs, read from one call at the contract's first shape
    (none where it names none, or cannot be called there)."""
    if shape is None:
        return ()
    try:
        return generated(inputs(tuple(shape), torch.float32, torch.Generator().manual_seed(0)))[1]
    except Exception:  # noqa: BLE001 — the case itself reports a generator that fails
        return ()


def custom_op(
    inputs: Callable[..., Any], reference: Callable[..., Any], shape: Sequence[int] | None = None
) -> OpFamily:
    """A user op: ``inputs(shape, dtype, generator)`` draws the inputs (a tuple, a named tuple or a dict),
    ``reference(*inputs)`` is the oracle run in fp64. Inputs are named by the generator (dict keys, named
    tuple fields, probed at ``shape``), else by the reference's parameters."""

    def make(shape, dtype, gen, dist):  # type: ignore[no-untyped-def]
        return generated(inputs(tuple(shape), dtype, gen))[0]

    return custom_family(
        make,
        functools.wraps(reference)(lambda *x: in_fp64(reference, x)),  # unwrapped by explain
        derived_bound(reference),
        derived_grad_bound(reference),
        generator_names(inputs, shape) or signature_names(reference),
    )


def custom_family(
    make: Callable[..., Tensors],
    oracle: Callable[..., Any],
    bound: Any,
    grad_bound: Any,
    names: tuple[str, ...],
) -> OpFamily:
    """A user op's family from its functions: here (``custom_op``), or in the reference's sandbox
    (kcgate.sandbox.remote_op)."""
    return OpFamily(
        name="custom",
        make_inputs=make,
        oracle=oracle,
        bound=bound,
        reduction_len=lambda s: s[-1] if s else 1,
        tolerance="error-bound",
        grad_bound=grad_bound,
        input_names=names,
    )
