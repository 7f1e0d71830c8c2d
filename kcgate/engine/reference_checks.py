"""The contract's own functions, checked before they judge a kernel (a contract that cannot fail is a defect):
a user reference must be a deterministic function of its inputs (run twice on the same inputs), return
float tensors with some finite value, and a custom op's input generator must draw from the generator it is
given. Each problem is a ``ReferenceFault``: the case's error, naming the function and the fix, never the
kernel's failure and never a pass."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from kcgate.numerics.ops.base import upcast
from kcgate.numerics.outputs import raw

# Two runs of a deterministic fp64 reference agree bit for bit on the CPU; this much (relative to the
# output's largest magnitude) is left for a device's fp64 atomics. Dropout or a 2% random draw is 1e10 above.
NONDETERMINISM_RTOL = 1e-6
SALT = "contract-functions"


class ReferenceFault(Exception):
    """The contract's reference or input generator cannot judge a kernel: the case is an error naming it."""


def check_contract_functions(ctx: Any) -> None:
    """Before the trials of a contract with a user reference (a custom op, or a family's oracle replaced):
    the generator (a custom op's) draws from its seed, the reference returns float tensors, some finite,
    and the same outputs twice on the same inputs. Raises ``ReferenceFault``."""
    c = ctx.contract
    if not c.reference:
        return
    shape = tuple(ctx.case.shape)
    try:
        inputs = ctx.inputs(shape, (SALT, 0))
        if c.op == "custom":
            again, other = ctx.inputs(shape, (SALT, 0)), ctx.inputs(shape, (SALT, 1))
        up = upcast(inputs)
        with torch.no_grad():
            first, second = ctx.op.oracle(*up), ctx.op.oracle(*up)
    except Exception:  # noqa: BLE001 — a generator or reference that raises: the trials report it as ever
        return
    if c.op == "custom":
        _generator_uses_its_seed(c.inputs, inputs, again, other)
    parts = reference_tensors(c.reference, first)
    _deterministic(c.reference, parts, reference_tensors(c.reference, second))
    if all(bool(t.isfinite().all()) for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()):
        _some_finite(c.reference, parts)


def reference_tensors(name: str, result: Any) -> list[tuple[str, torch.Tensor]]:
    """The reference's outputs, each a tensor; a single output a floating one. Anything else (None, a float,
    an integer tensor alone) is the reference's fault, said so with what it returned."""
    items = [(n or f"output {i}", v) for i, (n, v) in enumerate(raw(result))]
    if not items:
        raise ReferenceFault(f"{_who(name)} returned an empty {type(result).__name__}, not a tensor; {_FIX}")
    for n, v in items:
        if not isinstance(v, torch.Tensor):
            what = "" if len(items) == 1 else f" (as {n!r})"
            raise ReferenceFault(f"{_who(name)} returned {_kind(v)}{what}, not a tensor; {_FIX}")
    if len(items) == 1 and not (items[0][1].is_floating_point() or items[0][1].is_complex()):
        raise ReferenceFault(
            f"{_who(name)} returned a {str(items[0][1].dtype).removeprefix('torch.')} tensor: a reference's "
            "only output must be floating point (its values are what the kernel's are measured against; an "
            "integer output is compared for equality beside a float one, see docs/custom-op.md#several-outputs); "
            "fix: return the op's float output, e.g. without a final .long() or .round()"
        )
    return items


def _deterministic(
    name: str, a: Sequence[tuple[str, torch.Tensor]], b: Sequence[tuple[str, torch.Tensor]]
) -> None:
    for (n, x), (_, y) in zip(a, b):
        if x.shape != y.shape:
            raise ReferenceFault(_nondeterministic(name, f"shape {tuple(x.shape)}, then {tuple(y.shape)}"))
        differ = _differ(x, y)
        if differ:
            where = "" if len(a) == 1 else f" in {n!r}"
            raise ReferenceFault(
                _nondeterministic(name, f"{differ} of {x.numel()} elements differ{where} between two runs")
            )


def _differ(x: torch.Tensor, y: torch.Tensor) -> int:
    """Elements of two runs' outputs that differ beyond a device's fp64 reordering (NaN equals NaN)."""
    if not x.is_floating_point():
        return int((x != y).sum())
    x, y = x.detach().to(torch.float64).cpu(), y.detach().to(torch.float64).cpu()
    both_nan = x.isnan() & y.isnan()
    finite = x[x.isfinite()]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    tol = NONDETERMINISM_RTOL * scale if math.isfinite(scale) else 0.0
    same = both_nan | (x == y) | ((x - y).abs() <= tol)
    return int((~same).sum())


def _nondeterministic(name: str, what: str) -> str:
    return (
        f"{_who(name)} is not deterministic: on the same inputs {what}. A reference that draws random numbers "
        "(dropout left on, an unseeded torch.rand) widens the derived bound until a wrong kernel passes; fix: "
        "make it a function of its inputs alone (dropout(..., training=False), or no random draw)"
    )


def _some_finite(name: str, parts: Sequence[tuple[str, torch.Tensor]]) -> None:
    for n, t in parts:
        if t.is_floating_point() and t.numel() and not bool(t.isfinite().any()):
            where = "" if len(parts) == 1 else f" output {n!r}"
            raise ReferenceFault(
                f"{_who(name)} returned no finite value{where} (all NaN or infinite) on finite inputs: every "
                "element would be compared as NaN against NaN, and a kernel returning NaN would pass; fix the "
                "reference"
            )


def _generator_uses_its_seed(name: str, a: Any, again: Any, other: Any) -> None:
    """Two draws from generators of one seed agree, and of two seeds differ (in some float input)."""
    if not _same(a, again):
        raise ReferenceFault(
            f"the contract's input generator {name!r} returned different inputs for the same seed: it draws "
            "without the generator it is given, so no failure can be reproduced; fix: pass generator=generator "
            "to every torch.rand/randn/randint it calls"
        )
    floats = [t for t in a if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 1]
    if floats and _same(a, other):
        raise ReferenceFault(
            f"the contract's input generator {name!r} returned the same inputs for two different seeds: it "
            "ignores its generator, so every seed and trial tests one input; fix: draw the inputs with "
            "generator=generator"
        )


def _same(a: Any, b: Any) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor) and not (x.shape == y.shape and torch.equal(x, y) or _nan_equal(x, y)):
            return False
    return True


def _nan_equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    if x.shape != y.shape or x.dtype != y.dtype or not x.is_floating_point():
        return False
    return bool(((x == y) | (x.isnan() & y.isnan())).all())


def _who(name: str) -> str:
    return f"the contract's reference {name!r}"


def _kind(v: Any) -> str:
    if v is None:
        return "None"
    return (
        f"a {type(v).__name__} ({str(v)[:40]})"
        if isinstance(v, (int, float, bool, str))
        else f"a {type(v).__name__}"
    )


_FIX = "fix the reference to return the op's output tensor (or a tuple or dict of them)"


def mismatch_detail(ctx: Any, kernel_result: Any, ref: torch.Tensor) -> str:
    """Why a kernel's output and a user reference's disagree in structure, saying what each returned and,
    where the kernel returns several tensors and the reference one, how to name the outputs; "" when the
    contract has no user reference."""
    name = ctx.contract.reference
    if not name:
        return ""
    items = raw(kernel_result) if kernel_result is not None else ()
    if len(items) > 1:
        shapes = ", ".join(
            str(tuple(v.shape)) if isinstance(v, torch.Tensor) else type(v).__name__ for _, v in items
        )
        return (
            f"the kernel returned {len(items)} outputs (shapes {shapes}), {_who(name)} returns one tensor of shape "
            f"{tuple(ref.shape)}; if they are all the op's outputs, return them from the reference too and name "
            'them in the contract: outputs = ["out", "residual"] (docs/custom-op.md#several-outputs)'
        )
    return ""


def shape_detail(ctx: Any, out: torch.Tensor, ref: torch.Tensor) -> str:
    """A kernel's and a user reference's output shapes differ: which one is wrong is not known, so both are
    named; "" when the contract has no user reference."""
    name = ctx.contract.reference
    if not name:
        return ""
    return (
        f"the kernel returned shape {tuple(out.shape)}, {_who(name)} returns shape {tuple(ref.shape)}: the "
        "reference defines the contract's output; if the reference is wrong, fix it"
    )
