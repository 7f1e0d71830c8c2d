"""The user's reference and input generator as a sandbox child hosts them (beside the kernel, never in the judge).

A case whose contract names a ``reference`` (a custom op's, or a family's oracle replaced), an ``inputs``
generator or a ``tolerance.baseline`` gets a second child, forked fresh for the case by the judge's reference sandbox
(``kcgate.sandbox.process``), apart from the kernel's child: the kernel cannot reach the reference either. Its
``begin`` resolves their import strings here (their modules' import-time code runs here) and builds the
functions the judge calls by name (``FUNCTIONS``), each taking and returning tensors and data:

- ``oracle``: the reference in fp64 (a custom op's, its own casts kept in fp64) or as written (a family's
  oracle replaced); ``raw``: the reference as written (its outputs' dtypes on meta tensors);
- ``inputs``: the generator's tensors for (shape, dtype, the judge's generator state), and the state after;
- ``bound`` and ``grad_bound``: a custom op's derived bounds (``kcgate.numerics.derived`` traces the reference's
  operations, so it runs where the reference runs; the judge receives the bound tensors);
- ``placement`` and ``explain``: the searches over the reference's mutants (its source, changed and run), with
  their findings as data;
- ``baseline``: the contract's ``tolerance.baseline`` (the sensitivity gate's and the relative tolerance's
  baseline, called on the judge's inputs), the one function where a contract names only a baseline.
- ``accumulated``: the reference with its traced reductions summed at fp16, bf16 and fp32
  (``kcgate.numerics.reductions``), for the judge's accumulator fit of a custom op.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from kcgate.engine.explain import search
from kcgate.numerics.ops.base import BoundArgs
from kcgate.util.resolve import resolve


def functions(contract: Any, paths: Any) -> tuple[dict[str, Callable[..., Any]], list[str]]:
    """The functions of this contract's user code, by name, and the inputs' names (the generator's, else the
    reference's parameters; [] for a family, whose names are its own)."""
    table, names = _reference_functions(contract, paths) if contract.reference else ({}, [])
    if contract.tolerance.baseline:  # the sensitivity gate's and the relative tolerance's baseline
        table["baseline"] = resolve(contract.tolerance.baseline, paths)
    return table, names


def _reference_functions(contract: Any, paths: Any) -> tuple[dict[str, Callable[..., Any]], list[str]]:
    from kcgate.numerics.derived import in_fp64
    from kcgate.numerics.ops.custom import derived_bound, derived_grad_bound, generator_names, signature_names

    reference = resolve(contract.reference, paths)
    table: dict[str, Callable[..., Any]] = {
        "raw": reference,
        "placement": lambda runs, dtype: _placement(reference, runs, dtype),
        "explain": lambda *a: _explain(reference, *a),
        "range_ops": lambda sample, dtype: _range_ops(reference, sample, dtype),
        "accumulated": lambda up, name, outputs, dy=None, index=None: _accumulated(
            reference, up, name, outputs, dy, index
        ),
    }
    if contract.op != "custom":
        return {**table, "oracle": reference}, []
    inputs = resolve(contract.inputs, paths)
    shape = contract.shapes[0] if contract.shapes else None
    bound, grad_bound = derived_bound(reference), derived_grad_bound(reference)
    table.update(
        oracle=lambda *x: in_fp64(reference, x),
        inputs=lambda shape, dtype, state, device: _inputs(inputs, shape, dtype, state, device),
        bound=lambda x, y, ba: bound(tuple(x), y, _bound_args(ba)),
        grad_bound=lambda x, dy, g, ba: grad_bound(tuple(x), dy, tuple(g), _bound_args(ba)),
    )
    return table, list(generator_names(inputs, shape) or signature_names(reference))


def _range_ops(reference: Callable[..., Any], sample: Any, dtype: torch.dtype) -> list[list[str]] | None:
    """``kcgate.numerics.domains.trace_ops`` of the reference, as data: [ops, kinds]."""
    from kcgate.numerics.domains import trace_ops

    got = trace_ops(reference, tuple(sample), dtype)
    return None if got is None else [sorted(got[0]), sorted(got[1])]


def _accumulated(
    reference: Callable[..., Any], up: Any, name: str, outputs: Any, dy: Any, index: Any
) -> dict[str, Any] | None:
    """``kcgate.numerics.reductions.accumulated`` of the reference on the judge's worst trial: its deciding
    output (or, given ``dy`` and ``index``, the deciding input's gradient) with the traced reductions summed
    at each width and interval, as data."""
    from kcgate.numerics.reductions import accumulated, picker

    at = int(index) if isinstance(index, int) else None
    dy = dy if isinstance(dy, torch.Tensor) else None
    return accumulated(inspect.unwrap(reference), tuple(up), picker(str(name), list(outputs)), dy, at)


def _inputs(
    inputs: Callable[..., Any], shape: Any, dtype: torch.dtype, state: torch.Tensor, device: str
) -> Any:
    """The generator's tensors drawn from the judge's generator state (on ``device``), and the state it
    leaves."""
    from kcgate.numerics.ops.custom import generated

    gen = torch.Generator(device=device)
    gen.set_state(state)
    xs = generated(inputs(tuple(shape), dtype, gen))[0]
    return list(xs), gen.get_state()


def _bound_args(ba: dict[str, Any]) -> BoundArgs:
    errors = ba.get("errors")
    return BoundArgs(
        u_acc=float(ba["u_acc"]),
        u_out=float(ba["u_out"]),
        lam=float(ba["lam"]),
        u_in=float(ba["u_in"]),
        seed=int(ba["seed"]),
        errors=None if errors is None else tuple(errors),
        floor=float(ba["floor"]),
    )


def _placement(reference: Callable[..., Any], runs: list[Any], dtype: torch.dtype) -> dict[str, Any] | None:
    """``kcgate.engine.placement.misplaced`` on the judge's runs, its finding as data."""
    from kcgate.engine.placement import Run, misplaced

    got = misplaced(reference, [Run(tuple(i), tuple(o), tuple(r)) for i, o, r in runs], dtype)
    if got is None:
        return None
    return {"row": got.mutant.row, "change": got.mutant.change, "where": got.where,
            "differ_mutant": got.differ_mutant, "differ_reference": got.differ_reference,
            "elements": got.elements, "err_ratio": got.err_ratio, "beta": got.beta, "rho": got.rho}  # fmt: skip


def _explain(
    reference: Callable[..., Any], up: Any, out: Any, ref: Any, allowed: Any, name: str, outputs: Any
) -> dict[str, Any] | None:
    """``kcgate.engine.explain.search`` on the judge's worst trial, its finding as data."""
    got = search(inspect.unwrap(reference), tuple(up), out, ref, allowed, name, tuple(outputs))
    if got is None:
        return None
    m = got.found
    found = None if m is None else {"rule": m.rule, "change": m.change, "where": m.where}
    return {
        "found": found,
        "ratio": got.ratio,
        "share": got.share,
        "tried": got.tried,
        "stopped": got.stopped,
    }
