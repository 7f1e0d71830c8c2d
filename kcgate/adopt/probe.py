"""The worker side of ``kcgate init``: import packages, find kernel callables and place each in an op family.

Run as ``python -m kcgate.adopt.probe PACKAGE...``; prints one JSON line per kernel found: a placement
(``op``, accepted ``dtypes``, ``out_dtype``, ``backward``, ``init``, ``note``) or ``unplaced`` with the
reason. A kernel is a public top-level function, ``torch.autograd.Function`` subclass or ``nn.Module``
subclass defined in the package. Its family comes from its name when the name says it (then the call is
probed to find the dtypes it accepts), otherwise from calling it with every family's small inputs and
keeping the family whose fp64 oracle it matches.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import pkgutil
import re
import sys
import traceback
from collections.abc import Iterator
from typing import Any

import torch

from kcgate.contracts.records import Contract
from kcgate.numerics.ops import OPS
from kcgate.vocab.catalogue import CATALOGUE, dims_of

# Name fragments that say the family: (fragment, family), most specific first. Short fragments match
# whole words of the snake_case or CamelCase name; long ones match anywhere in it.
NAMES: tuple[tuple[str, str], ...] = (
    ("rmsnorm", "rmsnorm"),
    ("rms_norm", "rmsnorm"),
    ("layernorm", "layernorm"),
    ("layer_norm", "layernorm"),
    ("logsumexp", "logsumexp"),
    ("softmax", "softmax"),
    ("index_select", "index_select"),
    ("rope", "rope"),
    ("rotary", "rope"),
    ("embedding", "embedding"),
    ("gather", "gather"),
    ("attention", "sdpa"),
    ("sdpa", "sdpa"),
    ("attn", "sdpa"),
    ("swiglu", "swiglu"),
    ("geglu", "geglu"),
    ("cross_entropy", "cross_entropy"),
    ("bmm", "bmm"),
    ("matmul", "matmul"),
    ("gemm", "matmul"),
    ("mm", "matmul"),
    ("linear", "linear"),
    ("gelu", "gelu"),
    ("silu", "silu"),
    ("swish", "silu"),
    ("sum", "sum"),
    ("mean", "mean"),
)
SHORT = 6  # fragments shorter than this must be whole words

# Small shapes per family, for the probe and for the contracts file (a quick first run).
SHAPES: dict[str, list[int]] = {
    "matmul": [32, 512, 32],
    "bmm": [2, 16, 256, 16],
    "linear": [16, 256, 32],
    "sdpa": [1, 2, 64, 32],
    "gather": [16, 64, 8],
    "index_select": [16, 64, 8],
    "embedding": [100, 32, 16],
}
ROWS_N = [16, 512]
DTYPES = ("float32", "bfloat16", "float16")
CLOSE = 0.05  # relative error to the fp64 oracle that counts as "computes this family" (any dtype)
# Constructor parameters of a module kernel that mean "the size of the last dimension".
SIZE_WORDS = ("dim", "hidden", "size", "features", "d_model", "embed", "width", "channels")


def words(name: str) -> list[str]:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    return [w for w in re.split(r"[^a-z0-9]+", snake) if w]


def family_by_name(name: str) -> str | None:
    ws = words(name)
    joined = "_".join(ws)
    for fragment, op in NAMES:
        hit = (
            fragment in ws
            if len(fragment) < SHORT
            else fragment in joined or fragment.replace("_", "") in "".join(ws)
        )
        if hit:
            return op
    return None


def shape_for(op: str) -> list[int]:
    if op in SHAPES:
        return SHAPES[op]
    family = OPS[op]
    if len(family.default_shapes[0]) == 2:
        return ROWS_N
    return [min(n, 32) for n in family.default_shapes[0]]


def kernels(packages: list[str]) -> Iterator[tuple[str, Any]]:
    """(import string, object) of each public kernel callable defined in the packages."""
    seen = set()
    for package in packages:
        root = importlib.import_module(package)
        modules = [root]
        if hasattr(root, "__path__"):
            for info in pkgutil.walk_packages(root.__path__, prefix=package + "."):
                modules.append(importlib.import_module(info.name))
        for module in modules:
            for name, obj in vars(module).items():
                if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                    continue
                if kind(obj) and (module.__name__, name) not in seen:
                    seen.add((module.__name__, name))
                    yield f"{module.__name__}:{name}", obj


def kind(obj: Any) -> str:
    if inspect.isclass(obj):
        if issubclass(obj, torch.autograd.Function) and obj is not torch.autograd.Function:
            return "autograd.Function"
        if issubclass(obj, torch.nn.Module):
            return "nn.Module"
        return ""
    return "function" if inspect.isfunction(obj) else ""


def module_init(obj: type, op: str) -> dict[str, str] | None:
    """``init`` for a module kernel: each required constructor parameter that names a size takes the
    case's last dimension; None when a required parameter cannot be guessed."""
    dims = _dim_names(op)
    init = {}
    for p in inspect.signature(obj).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        if not any(w in p.name.lower() for w in SIZE_WORDS) or not dims:
            return None
        init[p.name] = "{" + dims[-1] + "}"
    return init


# Signature parameters whose default is a family parameter's value, by that parameter: a kernel that
# ships ``eps=1e-6`` (LlamaRMSNorm(hidden_size, eps=1e-6), rms_norm(x, w, eps=1e-6)) gets params.eps = 1e-6.
PARAM_WORDS: dict[str, tuple[str, ...]] = {
    "eps": ("eps", "epsilon", "variance_epsilon", "norm_eps", "layer_norm_eps", "rms_norm_eps"),
}


def defaults(obj: Any, op: str) -> dict[str, Any]:
    """The family parameters the kernel's signature sets by default (a module's constructor, an
    autograd.Function's forward, a function itself), for the contract's ``params``."""
    own = CATALOGUE[op].params if op in CATALOGUE else {}
    target = (
        obj.__init__ if kind(obj) == "nn.Module" else obj.forward if kind(obj) == "autograd.Function" else obj
    )
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return {}
    out: dict[str, Any] = {}
    for p in params:
        v = p.default
        if v is p.empty or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        for key, words in PARAM_WORDS.items():
            if key in own and p.name.lower() in words:
                out[key] = own[key].type(v)
    return out


# A function's parameter naming the axis it reduces: kcgate reduces the last one, so a kernel whose axis has
# no default, or another default, is called with it set to -1 (``call = { kwargs = { dim = -1 } }``).
AXIS_WORDS = ("dim", "axis")


def row_axis(obj: Any, op: str) -> dict[str, int]:
    """``{"dim": -1}`` for a function kernel of a row family (softmax, the norms, ...) whose ``dim``/``axis``
    parameter has no default or a default other than -1 (None: the whole tensor, or a module's own choice)."""
    entry = CATALOGUE.get(op)
    if kind(obj) != "function" or entry is None or not entry.dims or entry.dims[0] != "rows":
        return {}
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return {}
    for p in params:
        if p.name.lower() in AXIS_WORDS and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            if p.default is p.empty or (isinstance(p.default, int) and p.default != -1):
                return {p.name: -1}
    return {}


def _dim_names(op: str) -> tuple[str, ...]:
    return dims_of(op) or ("n",)


def callable_for(
    obj: Any, op: str, init: dict[str, str], dtype: torch.dtype, call: dict[str, Any] | None = None
) -> Any:
    """The kernel as the harness calls it (kcgate.engine.invoke.adapt where this kcgate has it)."""
    try:
        from kcgate.engine.invoke import adapt
    except ImportError:
        if kind(obj) != "function":
            raise NotImplementedError(
                f"{kind(obj)} kernels need kcgate's kernel resolution (kcgate.engine.invoke), missing here"
            ) from None
        return obj
    fields = {f.name for f in dataclasses.fields(Contract)}
    extra: dict[str, Any] = {"init": tuple(init.items())} if "init" in fields else {}
    if call and "call_kwargs" in fields:
        extra["call_kwargs"] = tuple(call.items())
    contract = Contract(id="probe", klass="C-PRC-01", kernel="probe:probe", op=op, **extra)
    return adapt(obj, contract, "cpu", dtype)


def try_family(obj: Any, op: str, init: dict[str, str], call: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call the kernel on the family's small inputs in each dtype: what it accepts and how close it is."""
    family = OPS[op]
    accepted, outs, errors, closeness, backward = [], set(), {}, [], False
    for name in DTYPES:
        dtype = getattr(torch, name)
        gen = torch.Generator().manual_seed(0)
        try:
            inputs = family.make_inputs(shape_for(op), dtype, gen, "normal")
            leaves = [
                t.clone().requires_grad_() if i in family.float_inputs else t for i, t in enumerate(inputs)
            ]
            out = callable_for(obj, op, init, dtype, call)(*leaves)
        except Exception as exc:  # noqa: BLE001 — a kernel that refuses a dtype is data
            errors[name] = f"{type(exc).__name__}: {exc}"[:200]
            continue
        if isinstance(out, (tuple, list)) and out and all(isinstance(t, torch.Tensor) for t in out):
            out = torch.cat([t.flatten() for t in out])  # several outputs are checked concatenated
        if not isinstance(out, torch.Tensor):
            errors[name] = f"returned {type(out).__name__}, not a tensor"
            continue
        ref = family.oracle(*(t.detach().to(torch.float64) if t.is_floating_point() else t for t in inputs))
        if out.dim() == 1 and ref.dim() != 1:
            ref = ref.flatten()
        if tuple(out.shape) != tuple(ref.shape):
            errors[name] = f"output shape {list(out.shape)}, the family's is {list(ref.shape)}"
            continue
        accepted.append(name)
        outs.add(str(out.dtype).removeprefix("torch."))
        diff = (out.detach().to(torch.float64) - ref).abs().max() / ref.abs().max().clamp_min(1e-30)
        closeness.append(float(diff))
        backward = backward or _has_backward(family, out)
    return {
        "accepted": accepted,
        "outs": sorted(outs),
        "errors": errors,
        "rel": max(closeness, default=1.0),
        "backward": backward,
    }


def _has_backward(family: Any, out: torch.Tensor) -> bool:
    if family.grad_bound is None or not out.requires_grad:
        return False
    try:
        out.float().sum().backward()
    except Exception:  # noqa: BLE001
        return False
    return True


def place(target: str, obj: Any) -> dict[str, Any]:
    name = target.split(":")[1]
    by_name = family_by_name(name)
    if by_name is not None and by_name not in OPS:
        return {
            "kernel": target,
            "kind": kind(obj),
            "unplaced": f'its name says {by_name!r}, and kcgate has no {by_name} family yet (write a custom op: op = "custom" with inputs and reference)',
        }
    candidates = [by_name] if by_name else list(OPS)
    tried = {}
    for op in candidates:
        init: dict[str, str] = {}
        if kind(obj) == "nn.Module":
            found = module_init(obj, op)
            if found is None:
                tried[op] = (
                    "its constructor needs arguments kcgate cannot guess (pass them with init = {...})"
                )
                continue
            init = found
        call = row_axis(obj, op)
        probe = try_family(obj, op, init, call)
        if probe["accepted"] and (by_name or probe["rel"] < CLOSE):
            return {**_placement(target, obj, op, init, probe, by_name is not None), "call": call}
        tried[op] = (
            _errors(probe["errors"])
            or f"output differs from the {op} oracle (relative error {probe['rel']:.2g})"
        )
    reason = (
        f"its name says {by_name!r} but no call worked: {tried.get(by_name, '')}"
        if by_name
        else "its name names no op family and it matched no family's oracle when called with that family's inputs"
    )
    return {"kernel": target, "kind": kind(obj), "unplaced": reason}


def _errors(errors: dict[str, str]) -> str:
    """Each distinct error once, with the dtypes that raised it."""
    by_text: dict[str, list[str]] = {}
    for dtype, text in errors.items():
        by_text.setdefault(text, []).append(dtype)
    return "; ".join(f"{', '.join(ds)}: {text}" for text, ds in by_text.items())


def _placement(
    target: str, obj: Any, op: str, init: dict[str, str], probe: dict[str, Any], named: bool
) -> dict[str, Any]:
    dtypes = probe["accepted"]
    outs = probe["outs"]
    out_dtype = outs[0] if len(outs) == 1 and any(d != outs[0] for d in dtypes) else ""
    note = (
        ""
        if probe["rel"] < CLOSE
        else f"its output is far from the {op} oracle (relative error {probe['rel']:.2g}): a wrong kernel, or not a {op}"
    )
    return {
        "kernel": target,
        "kind": kind(obj),
        "op": op,
        "by": "name" if named else "probe",
        "dtypes": dtypes,
        "out_dtype": out_dtype,
        "shape": shape_for(op),
        "backward": probe["backward"],
        "init": init,
        "params": defaults(obj, op),
        "refused": probe["errors"],
        "note": note,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("packages", nargs="+")
    ap.add_argument("--path", action="append", default=[])
    args = ap.parse_args()
    for p in reversed(args.path):
        sys.path.insert(0, p)
    torch.manual_seed(0)
    for package in args.packages:
        try:
            found = list(kernels([package]))
        except (Exception, SystemExit) as exc:  # a package that fails to import (or exits) is a finding
            tail = traceback.format_exc(limit=3)[-600:]
            why = (
                f"its import called sys.exit({exc.code!r})"
                if isinstance(exc, SystemExit)
                else f"{type(exc).__name__}: {exc}"
            )
            print(
                json.dumps({"package": package, "error": f"cannot import {package}: {why}", "detail": tail}),
                flush=True,
            )
            continue
        if not found:
            print(
                json.dumps(
                    {
                        "package": package,
                        "error": f"{package} defines no public function, autograd.Function or nn.Module",
                    }
                ),
                flush=True,
            )
        for target, obj in found:
            print(json.dumps(place(target, obj)), flush=True)


if __name__ == "__main__":
    main()
