"""A contract's op family with the user's functions called in the reference's sandbox child (the judge's side).

``remote(name)`` is one of the child's functions (kcgate.sandbox.reference) as a ``RemoteKernel``: called with
tensors and data, it returns tensors and data, and its backward is the child's (a node of the judge's autograd
graph, as the kernel's is). The oracle carries ``remote``, so that the searches over the reference's mutants
(kcgate.engine.explain, kcgate.engine.placement) ask the child for their findings instead of running them here.
A contract's ``tolerance.baseline`` (the sensitivity gate's and the relative tolerance's baseline) is the
family's ``baseline``, remote too: the judge never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import Any

import torch

from kcgate.engine.case import op_for
from kcgate.numerics.ops.base import BoundArgs, Tensors
from kcgate.numerics.ops.custom import custom_family


def remote_op(contract: Any, paths: Any, remote: Callable[[str], Any], names: tuple[str, ...]) -> Any:
    """The family of ``contract`` (which names a reference or a ``tolerance.baseline``) with its reference,
    generator, derived bounds and baseline remote."""
    family = (
        _with_reference(contract, paths, remote, names)
        if contract.reference
        else op_for(contract, paths, with_reference=False)  # the family's own oracle: kcgate's code
    )
    if contract.tolerance.baseline:
        family = replace(family, baseline=remote("baseline"))
    return family


def _with_reference(contract: Any, paths: Any, remote: Callable[[str], Any], names: tuple[str, ...]) -> Any:
    oracle = remote("oracle")
    setattr(oracle, "remote", remote)  # noqa: B010
    if contract.op != "custom":
        return replace(op_for(contract, paths, with_reference=False), oracle=oracle)
    raw = remote("raw")
    setattr(raw, "remote", remote)  # noqa: B010
    setattr(oracle, "__wrapped__", raw)  # noqa: B010  # inspect.unwrap: the reference as written (its outputs' dtypes on meta)
    bound, grad_bound = remote("bound"), remote("grad_bound")

    def make(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
        xs, state = remote("inputs")(list(shape), dtype, gen.get_state(), str(gen.device))
        gen.set_state(state)
        return tuple(xs) if isinstance(xs, (list, tuple)) else (xs,)

    def bound_of(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        return bound(list(x), y, _args(ba))

    def grad_bound_of(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[Any, ...]:
        got = grad_bound(list(x), dy, list(g), _args(ba))
        return tuple(got) if isinstance(got, (list, tuple)) else (got,)

    return custom_family(make, oracle, bound_of, grad_bound_of, names)


def _args(ba: BoundArgs) -> dict[str, Any]:
    """BoundArgs as data (its errors' tensors cross through the arena)."""
    d = {f.name: getattr(ba, f.name) for f in fields(ba) if f.name != "errors"}
    return {**d, "errors": None if ba.errors is None else list(ba.errors)}
