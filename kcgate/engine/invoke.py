"""How a kernel is called as it ships: a function, a ``torch.autograd.Function`` subclass (``.apply``) or
an ``nn.Module`` class (built from ``init``, its parameters bound to the op's inputs), with ``call``
mapping the family's inputs and the trial's sizes onto its signature.

``adapt`` turns any of them into ``kernel(*inputs, **extra)``, the harness's calling convention.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kcgate.contracts.records import Contract
from kcgate.vocab.catalogue import CATALOGUE

# A module parameter takes its values from the op input of this name (exact names match too).
PARAM_INPUTS = {"weight": "w", "bias": "b"}
# With a `call` table the mapping is the whole signature: of the harness's own keyword arguments only
# these pass through (the family's, e.g. cross_entropy's reduction=, are the contract's to map).
PASS_THROUGH = ("out", "config")
Sizes = Callable[[tuple[torch.Tensor, ...]], dict[str, int]]  # inputs -> the "{size}" placeholders
NONE = "{none}"  # TOML has no null: this placeholder passes None (an optional weight, a default mask)


class KernelSetupError(Exception):
    """The kernel cannot be called as the contract says (an unmappable parameter, a placeholder)."""


def adapt(
    obj: Any, contract: Contract, device: str, dtype: torch.dtype, op: Any = None
) -> Callable[..., Any]:
    """The callable the harness runs, ``kernel(*inputs, **extra)``. ``op`` is the configured family
    (kcgate.numerics.ops.base.OpFamily): its input names and sizes are the placeholders of ``call`` (varlen attention
    adds ``cu_seqlens_q`` and ``cu_seqlens_k``); without it, the catalogue's."""
    names = (op.input_names if op is not None else ()) or (
        CATALOGUE[contract.op].inputs if contract.op in CATALOGUE else ()
    )
    sizes = op.sizes if op is not None and op.sizes is not None else _catalogue_sizes(contract.op)
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        return _module_kernel(obj, contract, names, sizes, device, dtype)
    fn = obj.apply if isinstance(obj, type) and issubclass(obj, torch.autograd.Function) else obj
    if contract.call_args is None and not contract.call_kwargs:
        return fn  # type: ignore[no-any-return]
    return _mapped(fn, contract, names, sizes, range(_arity(contract, names)))


def _arity(contract: Contract, names: tuple[str, ...]) -> int:
    return len(names) if names else 64  # custom ops: as many inputs as the generator makes


def _mapped(
    fn: Callable[..., Any], contract: Contract, names: tuple[str, ...], sizes: Sizes, positional: Any
) -> Callable[..., Any]:
    args, kwargs = contract.call_args, dict(contract.call_kwargs)

    def kernel(*inputs: torch.Tensor, **extra: Any) -> Any:
        env = _bindings(names, sizes, inputs)
        a = [inputs[i] for i in positional if i < len(inputs)] if args is None else _fill(args, env)
        return fn(*a, **_fill(kwargs, env), **_passed(extra))

    return kernel


def _bindings(names: tuple[str, ...], sizes: Sizes, inputs: tuple[torch.Tensor, ...]) -> dict[str, Any]:
    """Placeholder values for this call: each input by name, each "{size}" from the inputs."""
    env: dict[str, Any] = {n: t for n, t in zip(names, inputs)}
    env.update({f"input{i}": t for i, t in enumerate(inputs)})
    env.update({"{" + dim + "}": n for dim, n in sizes(inputs).items()})
    return env


def _catalogue_sizes(op: str) -> Sizes:
    """Each size read from the input and axis the catalogue's dim_sources name."""
    sources = CATALOGUE[op].dim_sources if op in CATALOGUE else {}

    def sizes(inputs: tuple[torch.Tensor, ...]) -> dict[str, int]:
        return {
            dim: int(inputs[i].shape[axis])
            for dim, (i, axis) in sources.items()
            if i < len(inputs) and axis < inputs[i].dim()
        }

    return sizes


def _passed(extra: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in extra.items() if k in PASS_THROUGH}


def _fill(v: Any, env: dict[str, Any]) -> Any:
    """The template with placeholders replaced (tuples become lists, as kernels expect of shapes)."""
    if isinstance(v, tuple):
        return [_fill(x, env) for x in v]
    if isinstance(v, dict):
        return {k: _fill(x, env) for k, x in v.items()}
    if v == NONE:
        return None
    if isinstance(v, str) and v in env:
        return env[v]
    if isinstance(v, str) and v.startswith("{") and v.endswith("}"):
        raise KernelSetupError(f"placeholder {v!r} has no value in this call (sizes: {', '.join(env)})")
    return v


def _module_kernel(
    cls: type[torch.nn.Module],
    contract: Contract,
    names: tuple[str, ...],
    sizes: Sizes,
    device: str,
    dtype: torch.dtype,
) -> Callable[..., Any]:
    """Build the module once per distinct ``init`` (sizes differ across swept shapes), on the device and
    in the case dtype; call it with its parameters replaced by the op's inputs (so their gradients are
    the inputs' gradients, and their values are drawn from the contract's distribution)."""
    modules: dict[str, tuple[torch.nn.Module, dict[str, int]]] = {}
    init = dict(contract.init)

    def kernel(*inputs: torch.Tensor, **extra: Any) -> Any:
        env = _bindings(names, sizes, inputs)
        kwargs = _fill(init, env)
        key = repr(sorted(kwargs.items()))
        if key not in modules:
            module = cls(**kwargs).to(device=device, dtype=dtype)
            modules[key] = (module, _parameter_inputs(module, names, contract))
            # results name a parameter's gradient as the module does (grad = "weight", not "w")
            kernel.param_names.update({names[i]: p for p, i in modules[key][1].items()})  # type: ignore[attr-defined]
        module, bound = modules[key]
        params = {p: inputs[i] for p, i in bound.items()}
        taken = set(bound.values())
        rest = [i for i in range(len(inputs)) if i not in taken]
        args = [inputs[i] for i in rest] if contract.call_args is None else _fill(contract.call_args, env)
        call_kw = _fill(dict(contract.call_kwargs), env)
        passed = _passed(extra) if contract.call_args is not None or contract.call_kwargs else extra
        return torch.func.functional_call(module, params, tuple(args), {**call_kw, **passed})

    kernel.param_names = {}  # type: ignore[attr-defined]
    return kernel


def _parameter_inputs(module: torch.nn.Module, names: tuple[str, ...], contract: Contract) -> dict[str, int]:
    """Each parameter's op input: by its own name, or weight -> w and bias -> b."""
    bound = {}
    for pname, _ in module.named_parameters():
        leaf = pname.rsplit(".", 1)[-1]
        want = leaf if leaf in names else PARAM_INPUTS.get(leaf, "")
        if want not in names:
            raise KernelSetupError(
                f"{type(module).__name__} parameter {pname!r} has no input of op {contract.op!r} to take its "
                f"values from (inputs: {', '.join(names) or 'none'}); a module kernel's parameters must be "
                "the op's weight/bias inputs (w, b) so their values follow the contract's distribution"
            )
        bound[pname] = names.index(want)
    return bound
