"""Validation of one contract table and of the [policy] table against the field table
(``kcgate.contracts.fields``): class defaults applied, cross-checks, each problem with line, key and fix.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

from kcgate.contracts import shape_class
from kcgate.contracts.field_checks import At, Collector, given, read, unknown_keys, value, with_defaults
from kcgate.contracts.fields import (
    CONTRACT_FIELD,
    ID_PATTERN,
    IMPORT_PATTERN,
    POLICY_FIELD,
)
from kcgate.contracts.locate import _UNSEEN, ABSENT, _located
from kcgate.contracts.policy import DriftRule, Policy, Waiver
from kcgate.contracts.records import Contract, Protocol, Tolerance
from kcgate.errors import Problem
from kcgate.util import tomlsrc
from kcgate.util.frozen_json import freeze
from kcgate.vocab import dtypes
from kcgate.vocab.catalogue import CATALOGUE, MATMUL_LIKE, dims_of, families, has, params_of
from kcgate.vocab.classes import CLASSES, backward_classes, refusal_fix, suggest

_ID = re.compile(ID_PATTERN)
_IMPORT = re.compile(IMPORT_PATTERN)
_PLACEHOLDER = re.compile(r"^\{(\w+)\}$")


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def validate_contract(
    d: dict[str, Any],
    *,
    file: str = "",
    lines: tomlsrc.LineMap | None = None,
    roots: tuple[Path, ...] = (),
    index: int = 0,
    locate: bool = True,
) -> tuple[Contract | None, tuple[Problem, ...]]:
    """One contract table (``d``: its TOML keys) validated by the same code as contracts.toml; the
    Python API and ``@kcgate.contract`` discovery use it. ``lines`` maps ("contract", index, key...) to
    lines of ``file``."""
    col = Collector(file, lines or tomlsrc.LineMap())
    col.locate = locate
    contract = _contract(index, d, col, roots)
    return contract, tuple(col.problems)


def _contract(i: int, d: dict[str, Any], col: Collector, roots: tuple[Path, ...]) -> Contract | None:
    cid = d.get("id")
    at = At(("contract", i), f"contract {cid!r}" if isinstance(cid, str) else f"contract #{i + 1}", col)
    before = len(col.problems)
    unknown_keys(d, CONTRACT_FIELD.keys(), at)
    if not isinstance(cid, str) or not _ID.match(cid):
        at.key("id").add(
            "missing or invalid id",
            "set id = \"a-stable-name\" (letters, digits, '.', '_', '-'; baselines are keyed on it)",
        )
    klass = _key(d, "class", at)
    op = _key(d, "op", at)
    kernel = _import_string(d, "kernel", at, roots, required=True)
    cls = CLASSES.get(klass or "")
    if cls and op and op not in cls.ops:
        at.key("op").add(
            f"class {klass} does not apply to op {op!r}",
            refusal_fix(cls.id, op),
        )
    sc = _table(d, "shape_class", at)
    contract = Contract(
        id=cid if isinstance(cid, str) else f"#{i + 1}",
        klass=klass or "",
        kernel=kernel,
        op=op or "",
        description=_read(d, "description", at),
        devices=_devices(d, at),
        dtypes=_read(d, "dtypes", at),
        accumulate=_read(d, "accumulate", at),
        out_dtype=_key(d, "out_dtype", at) or "",
        shapes=_key(d, "shapes", at) or (),
        distribution=_read(d, "distribution", at),
        layout=_read(d, "layout", at),
        postcondition=_key(d, "postcondition", at) or (cls.postcondition if cls else ""),
        tolerance=_tolerance(d, at, _default_tolerance(cls, op, d), roots),
        oracle=_key(d, "oracle", at) or (cls.oracle if cls else "fp64"),
        reference=_import_string(d, "reference", at, roots),
        inputs=_import_string(d, "inputs", at, roots),
        protocol=_protocol(d, at, cls),
        signature=tuple(_key(d, "signature", at) or ()),
        params=_params(d, at, cls, op or ""),
        call=_call_style(d, at),
        good=_import_string(d, "good", at, roots),
        bad=_import_string(d, "bad", at, roots),
        baseline=_import_string(d, "baseline", at, roots),
        direction=_read(d, "direction", at),
        shape_constraints=_constraints(d, "shape_constraints", at, op),
        shape_class=_constraints(sc, "dims", at.key("shape_class"), op),
        max_elements=_max_elements(d, sc, at),
        **_call_table(d, op or "", at),
        init=_mapping(d, "init", op or "", at),
        env=_env(d, at),
        mutates=_names(d, "mutates", op or "", at, "name the inputs the kernel overwrites"),
        no_grad=_names(d, "no_grad", op or "", at, "name the inputs that take no gradient"),
        outputs=_outputs(d, op or "", at),
        stability=_stability(d, op or "", at),
        line=at.line,
    )
    _cross_checks(contract, d, at)
    return contract if len(col.problems) == before else None


def _devices(d: dict[str, Any], at: At) -> tuple[str, ...]:
    """The device kinds, every one when the key is absent; ``devices = []`` selects no case, as
    ``dtypes = []`` does (it meant every device before #54, the opposite of what it says)."""
    if d.get("devices") == []:
        at.key("devices").add(
            "devices = [] selects no device", "remove the key for every device, or name the device kinds"
        )
    return tuple(_read(d, "devices", at)) or CONTRACT_FIELD["devices"].choices


def _key(d: dict[str, Any], key: str, at: At) -> Any:
    """A contract key checked as its row says (kcgate.contracts.fields); None when absent or wrong."""
    f = CONTRACT_FIELD[key]
    return value(d, f, at) if key in d or f.required else None


def _read(d: dict[str, Any], key: str, at: At) -> Any:
    """A contract key checked as its row says; the row's default when absent or wrong."""
    return read(d, CONTRACT_FIELD[key], at) if key in d else CONTRACT_FIELD[key].default


def _call_style(d: dict[str, Any], at: At) -> str:
    """``call = "return" | "out"``; a table is the argument mapping (its output is returned)."""
    if isinstance(d.get("call"), dict):
        return "return"
    return _read(d, "call", at)  # type: ignore[no-any-return]


def _call_table(d: dict[str, Any], op: str, at: At) -> dict[str, Any]:
    t = d.get("call")
    if not isinstance(t, dict):
        return {}
    tat = at.key("call")
    unknown_keys(t, CONTRACT_FIELD["call"].keys, tat)
    args = t.get("args")
    if args is not None and not isinstance(args, list):
        tat.key("args").add("must be a list", 'args = ["x", ["{n}"], "w", "b"]')
        args = None
    if args is not None:
        for j, a in enumerate(args):
            _check_value(a, op, tat.key("args", index=j))
    return {
        "call_args": None if args is None else freeze(args),
        "call_kwargs": _mapping(t, "kwargs", op, tat),
    }


def _mapping(d: dict[str, Any], key: str, op: str, at: At) -> tuple[tuple[str, Any], ...]:
    """A table of keyword arguments (``call.kwargs``, ``init``), values checked for placeholders."""
    t = _table(d, key, at)
    for k, v in t.items():
        _check_value(v, op, at.key(key).key(k))
    return tuple(sorted((k, freeze(v)) for k, v in t.items()))


def _check_value(v: Any, op: str, at: At) -> None:
    """A "{size}" placeholder must name one of the family's dimensions."""
    if isinstance(v, list):
        for x in v:
            _check_value(x, op, at)
    elif isinstance(v, dict):
        at.add("a table is not an argument value", "use a string, number, boolean or list")
    elif isinstance(v, str) and (m := _PLACEHOLDER.match(v)) and op in CATALOGUE:
        if m.group(1) not in CATALOGUE[op].dim_sources and m.group(1) != "none":
            dims = ", ".join("{" + n + "}" for n in (*CATALOGUE[op].dim_sources, "none"))
            at.add(f"{v!r} is not a size of op {op!r}", f"use one of: {dims}")


def _stability(d: dict[str, Any], op: str, at: At) -> tuple[tuple[str, tuple[tuple[str, float], ...]], ...]:
    """``stability = { x = { offset = 1e4 } }``: a custom op's probes per input (the names are its
    reference's, checked when it runs); each probe's magnitude checked as its row says."""
    t = _table(d, "stability", at)
    if t and op != "custom":
        at.key("stability").add(
            f"stability applies to custom ops; op {op!r} has its family's probes",
            "remove stability, or use protocol.probes = false to turn the family's probes off",
        )
        return ()
    f, out = CONTRACT_FIELD["stability"], []
    for name, probes in t.items():
        pat = at.key("stability").key(name)
        if not isinstance(probes, dict):
            pat.add("must be a table of probes", f"{name} = {{ offset = 1e4 }} (or {name} = {{}}: none)")
            continue
        unknown_keys(probes, f.keys, pat)
        got = given(probes, f, pat)
        out.append((name, tuple(sorted((k, v) for k, v in got.items() if v is not None))))
    return tuple(out)


def _names(d: dict[str, Any], key: str, op: str, at: At, fix: str) -> tuple[str, ...]:
    """``mutates`` and ``no_grad``: names of the op's inputs, each once (a custom op's are its generator's,
    checked when it runs: kcgate.engine.backward.differentiated for ``no_grad``)."""
    declared = _key(d, key, at)
    names = tuple(declared or ())
    if declared is not None and not names:
        at.key(key).add(f"{key} = [] declares no input", f"remove the key, or {fix}")
    known = CATALOGUE[op].inputs if op in CATALOGUE and op != "custom" else None
    for j, name in enumerate(names):
        if name in names[:j]:
            at.key(key, index=j).add(f"{name!r} is listed twice", "list each input once")
        elif known is not None and name not in known:
            at.key(key, index=j).add(
                f"{name!r} is not an input of op {op!r}", f"use one of: {', '.join(known)}"
            )
    return names


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _outputs(d: dict[str, Any], op: str, at: At) -> tuple[str, ...]:
    """``outputs``: one identifier per returned tensor, each once, on a custom op (a family compares its one
    output); their count is checked when the reference runs: kcgate.numerics.outputs.reference_parts."""
    names = tuple(_key(d, "outputs", at) or ())
    if names and op and op != "custom":
        at.key("outputs").add(f'op {op!r} has one output; outputs applies to op = "custom"', "remove the key")
        return ()
    if "outputs" in d and not names:
        at.key("outputs").add(
            "outputs = [] names no output", 'remove the key, or name each output: ["out", ...]'
        )
    for j, name in enumerate(names):
        if not _NAME.match(name):
            at.key("outputs", index=j).add(
                f"{name!r} is not a name", "use letters, digits and '_', starting with a letter"
            )
        elif name in names[:j]:
            at.key("outputs", index=j).add(f"{name!r} is listed twice", "give each output its own name")
    return names


# Linux refuses an exec whose one NAME=value string passes 128 KiB (MAX_ARG_STRLEN) or whose whole environment
# and argv pass ARG_MAX: the worker would not start ("Argument list too long"). Caps well inside both.
MAX_ENV_VALUE_BYTES = 32 * 1024
MAX_ENV_TOTAL_BYTES = 128 * 1024


def _env(d: dict[str, Any], at: At) -> tuple[tuple[str, str], ...]:
    t = _table(d, "env", at)
    out = []
    for k, v in t.items():
        if not _ENV_NAME.match(k) or not isinstance(v, str):
            at.key("env").key(k).add(
                'environment variables are NAME = "string"',
                'env = { TRITON_INTERPRET = "1" }',
            )
        elif _env_value_problem(k, v):
            at.key("env").key(k).add(*_env_value_problem(k, v))
        else:
            out.append((k, v))
    total = sum(len(k) + 2 + len(v.encode("utf-8", "surrogatepass")) for k, v in out)
    if total > MAX_ENV_TOTAL_BYTES:
        at.key("env").add(
            f"the env's variables come to {total} bytes, over the {MAX_ENV_TOTAL_BYTES}-byte cap (the worker "
            "could not be started: the operating system caps a process's environment)",
            "pass large data through a file the kernel reads, and name the file in env",
        )
    return tuple(sorted(out))


def _env_value_problem(name: str, value: str) -> tuple[str, str] | tuple[()]:
    """(message, fix) for a value no process environment can hold, else ()."""
    if "\0" in value:
        return (
            f"the value of {name} holds a NUL byte, which no environment variable can hold",
            "remove the \\u0000 from the value",
        )
    size = len(name) + 1 + len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_ENV_VALUE_BYTES:
        return (
            f"{name}=... is {size} bytes, over the {MAX_ENV_VALUE_BYTES}-byte cap on one variable (the worker "
            "could not be started: the operating system caps each environment string)",
            "pass large data through a file the kernel reads, and name the file in env",
        )
    return ()


def _default_tolerance(cls: Any, op: str | None, d: dict[str, Any]) -> str:
    """The class's method, except that 'error-bound' defers to the op family's natural method. A custom op's
    is the bound derived from its reference, unless rtol or atol are written (then they are the tolerance)."""
    method = cls.tolerance if cls else "error-bound"
    t = d.get("tolerance")
    if op == "custom" and isinstance(t, dict) and ("rtol" in t or "atol" in t):
        return "abs-rel"
    return (CATALOGUE[op].tolerance if op in CATALOGUE else method) if method == "error-bound" else method


def _reference_is_not_the_kernel(c: Contract, at: At) -> None:
    """A reference that is the kernel's own import string judges the kernel against itself: every bug it
    has passes (its casts and its order are the bound's too)."""
    if c.reference and c.reference.replace(" ", "") == c.kernel.replace(" ", ""):
        at.key("reference").add(
            f"the reference is the kernel itself ({c.kernel[:100]!r}): the kernel would be judged against its "
            "own code, and pass with every bug it has",
            "name an independent reference (plain PyTorch written for the op)"
            + ("" if c.op == "custom" else ", or remove the key for the op family's fp64 oracle"),
        )


def _cross_checks(c: Contract, d: dict[str, Any], at: At) -> None:
    if c.klass == "C-PRC-04" and c.param("overflow") == "inf":
        outs = (c.out_dtype,) if c.out_dtype else c.dtypes
        finite = [t for t in outs if t in dtypes.FORMATS and not dtypes.FORMATS[t].has_inf]
        if finite:
            at.key("params").key("overflow").add(
                f'overflow = "inf" is impossible for {", ".join(finite)} output: the format has no infinity',
                'declare overflow = "saturate" or "nan", or use a float8_e5m2 output',
            )
    _nan_policy(c, d, at)
    if c.op == "custom" and not (c.reference and c.inputs):
        at.key("op").add(
            "a custom op needs `reference` and `inputs` functions",
            'add reference = "pkg.mod:ref_fn" and inputs = "pkg.mod:make_inputs"',
        )
    if c.op == "pointwise" and not (c.reference or dict(c.params).get("fn")):
        at.key("op").add(
            "op 'pointwise' needs the function: params.fn or a reference",
            'add params = { fn = "sigmoid" } (relu, leaky_relu, sigmoid, tanh, elu, hardswish, mish, softplus) '
            'or reference = "torch:sigmoid"',
        )
    _reference_is_not_the_kernel(c, at)
    if c.oracle == "user" and not c.reference:
        at.key("oracle").add(
            "oracle = 'user' needs a `reference` function",
            'add reference = "pkg.mod:ref_fn"',
        )
    if c.oracle == "freivalds" and c.op not in MATMUL_LIKE:
        at.key("oracle").add(
            f"the Freivalds oracle needs a matmul-shaped op, not {c.op!r}",
            'use oracle = "fp64"',
        )
    if c.backward and c.klass and c.klass not in backward_classes():
        at.key("direction").add(
            f"class {c.klass} measures a forward path only",
            f'use direction = "forward", or a class that applies to backward: {", ".join(backward_classes())}',
        )
    if c.backward and c.op and not has(c.op, "backward"):
        at.key("direction").add(
            f"op {c.op!r} has no backward contract",
            f'use direction = "forward", or one of the ops with a backward: {", ".join(families("backward"))}',
        )
    form = dims_of(c.op)
    for j, shape in enumerate(c.shapes):
        if form is not None and len(shape) != len(form):
            at.key("shapes", index=j).add(
                f"{c.op} shapes have {len(form)} dimensions [{', '.join(form)}], not {len(shape)}: {list(shape)}",
                f"write each shape as [{', '.join(form)}]",
            )
    if "shapes" not in d and c.op == "custom":
        at.absent("shapes").add("a custom op needs `shapes`", "add shapes = [[...], ...]")
    _shapes_in_class(c, d, at)


def _nan_policy(c: Contract, d: dict[str, Any], at: At) -> None:
    """C-EXC-01: nan = "mask" declares its masked value; mask_value means nothing without it."""
    if c.klass != "C-EXC-01":
        return
    declared = "mask_value" in dict(c.params)
    if c.param("nan") == "mask" and not declared:
        at.key("params").key("nan").add(
            'nan = "mask" needs the masked value',
            "add mask_value = 0.0 (or the value the kernel writes where IEEE gives NaN/Inf) to params",
        )
    elif declared and c.param("nan") != "mask":
        at.key("params").key("mask_value").add(
            f'mask_value applies to nan = "mask" only (nan = {c.param("nan")!r})',
            'set nan = "mask", or remove mask_value',
        )


def _constraints(d: dict[str, Any], key: str, at: At, op: str | None) -> tuple[tuple[int, str], ...]:
    """``{ dim = "constraint" }`` (dims by letter of the op's shape form or by index) -> (index, text)."""
    t = _table(d, key, at)
    if not t:
        return ()
    names = dims_of(op or "")
    try:
        parsed = shape_class.parse(t, names, len(names) if names else None)
    except shape_class.ShapeSyntaxError as exc:
        at.key(key).add(
            str(exc),
            'write { dim = "constraint" }, e.g. { 3 = "even" } or { m = "multiple_of(16)", k = "range(16, 8192)" }',
        )
        return ()
    return tuple((i, " and ".join(t.text(names) for t in terms)) for i, terms in sorted(parsed.items()))


def _max_elements(d: dict[str, Any], t: dict[str, Any], at: At) -> int:
    unknown_keys(t, CONTRACT_FIELD["shape_class"].keys, at.key("shape_class"))
    if "shape_class" in d and d.get("class") != "C-CMP-03":
        at.key("shape_class").add(
            "shape_class applies to class C-CMP-03 only",
            'use class = "C-CMP-03", or shape_constraints for the shapes every class draws',
        )
    v = value(
        t,
        CONTRACT_FIELD["shape_class"].field("max_elements"),
        at.key("shape_class"),
    )
    return v or 0


def _shapes_in_class(c: Contract, d: dict[str, Any], at: At) -> None:
    """Every declared shape satisfies the contract's shape constraints and its shape class."""
    names = dims_of(c.op)
    for key, pairs in (("shape_constraints", c.shape_constraints), ("shape_class", c.shape_class)):
        if not pairs:
            continue
        cons = shape_class.parse({str(i): text for i, text in pairs}, names, len(names) if names else None)
        for j, shape in enumerate(c.shapes):
            if max(cons) >= len(shape):
                at.key(key).add(
                    f"dimension {max(cons)} is out of range for shape {list(shape)}",
                    "name a dimension the shapes have (0-based)",
                )
                continue
            broken = shape_class.violations(shape, cons, names)
            if broken:
                at.key("shapes", index=j).add(
                    f"shape {list(shape)} is outside its {key}: {'; '.join(broken)}",
                    f"declare a shape that satisfies {key}, or widen it",
                )


def _duplicates(contracts: list[Contract | None], col: Collector) -> None:
    seen: dict[str, int] = {}
    for i, c in enumerate(contracts):
        if c is None:
            continue
        if c.id in seen:
            At(("contract", i), f"contract {c.id!r}", col).key("id").add(
                f"duplicate id (first defined as contract #{seen[c.id] + 1})",
                "ids must be unique: rename one of them",
            )
        seen.setdefault(c.id, i)


def _tolerance(d: dict[str, Any], at: At, default: str, roots: tuple[Path, ...]) -> Tolerance:
    t = _table(d, "tolerance", at)
    tat = at.key("tolerance")
    unknown_keys(t, CONTRACT_FIELD["tolerance"].keys, tat)
    nums = given(t, CONTRACT_FIELD["tolerance"], tat)
    method = nums.get("method") or default
    if method == "abs-rel" and nums.get("rtol") is None and nums.get("atol") is None:
        tat.add("method 'abs-rel' needs rtol and/or atol", "add rtol = 1e-5 (and atol)")
    for key in ("factor", "baseline"):
        if key in t and method != "relative":
            tat.key(key).add(
                f"`{key}` applies to method 'relative' only",
                f'set method = "relative", or remove {key}',
            )
    got = with_defaults(CONTRACT_FIELD["tolerance"], nums)  # excess = false is 0.0: the sensitivity gate off
    return Tolerance(
        method=method,
        lam=got["lambda"],
        ulp=got["ulp"],
        rtol=got["rtol"],
        atol=got["atol"],
        factor=got["factor"],
        baseline=_import_string(t, "baseline", tat, roots),
        excess=got["excess"],
        excess_reference=got["excess_reference"] or "composite",
    )


def _protocol(d: dict[str, Any], at: At, cls: Any) -> Protocol:
    t = _table(d, "protocol", at)
    tat = at.key("protocol")
    unknown_keys(t, CONTRACT_FIELD["protocol"].keys, tat)
    got = with_defaults(
        CONTRACT_FIELD["protocol"], given(t, CONTRACT_FIELD["protocol"], tat)
    )  # the row keys are Protocol's fields
    seeds, trials = got.pop("seeds"), got.pop("trials")  # no row default: the class's
    return Protocol(
        seeds=seeds or (cls.seeds if cls else 2), trials=trials or (cls.trials if cls else 2), **got
    )


def _params(d: dict[str, Any], at: At, cls: Any, op: str) -> tuple[tuple[str, Any], ...]:
    t = _table(d, "params", at)
    if cls is None:
        return ()
    tat = at.key("params")
    known = {**params_of(op), **cls.params}
    out = []
    for key, v in t.items():
        spec = known.get(key)
        if spec is None:
            fix = suggest(key, list(known)) if known else f"class {cls.id} and op {op!r} take no params"
            tat.key(key).add(f"unknown parameter for {cls.id} and op {op!r}", fix)
        elif not _is_type(v, spec.type) or (spec.choices and v not in spec.choices):
            allowed = ", ".join(map(repr, spec.choices)) if spec.choices else spec.type.__name__
            tat.key(key).add(f"invalid value {v!r}", f"use {allowed}")
        else:
            out.append((key, freeze(v)))  # a list value is a tuple, as in call and init
    return tuple(sorted(out, key=lambda kv: kv[0]))


def _policy(data: dict[str, Any], contracts: tuple[Contract, ...], col: Collector) -> Policy:
    t = _table(data, "policy", At((), "", col))
    at = At(("policy",), "policy", col)
    unknown_keys(t, POLICY_FIELD.keys(), at)
    block_on = value(t, POLICY_FIELD["block_on"], at)
    return Policy(
        block_on=tuple(block_on or ()) if "block_on" in t else Policy().block_on,
        budget_drift=_drift(t, at),
        required_runners=tuple(value(t, POLICY_FIELD["required_runners"], at) or ()),
        acknowledge_removed=tuple(value(t, POLICY_FIELD["acknowledge_removed"], at) or ()),
        waivers=_waivers(data, contracts, col),
    )


_DRIFT_FIX = POLICY_FIELD["budget_drift"].example


def _drift(t: dict[str, Any], policy: At) -> DriftRule:
    """policy.budget_drift: a table with ``ratio`` (and ``floor``) and/or ``absolute``; a bare number is the
    absolute rule (kcgate 0.1's meaning, kept)."""
    v = t.get("budget_drift")
    at = policy.key("budget_drift")
    if v is None:
        return DriftRule()
    row = POLICY_FIELD["budget_drift"]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        amount = value(t, row, policy)
        return DriftRule(ratio=None, absolute=amount) if amount is not None else DriftRule()
    if not isinstance(v, dict):
        at.add(f"must be a table or a number, not {v!r}", _DRIFT_FIX)
        return DriftRule()
    unknown_keys(v, POLICY_FIELD["budget_drift"].keys, at)
    ratio, floor, amount, rounding = (
        value(v, row.field(k), at) for k in ("ratio", "floor", "absolute", "rounding_floor")
    )
    if ratio is None and amount is None and not ({"ratio", "absolute"} & set(v)):
        if {"floor", "rounding_floor"} & set(v) or set(v) - POLICY_FIELD["budget_drift"].keys:
            ratio = DriftRule().ratio  # a floor alone keeps the default ratio (unknown keys: reported above)
        else:
            at.add("names no rule", _DRIFT_FIX)
    default = DriftRule()
    return DriftRule(
        ratio=ratio,
        floor=default.floor if floor is None else floor,
        absolute=amount,
        rounding_floor=default.rounding_floor if rounding is None else rounding,
    )


def _waivers(data: dict[str, Any], contracts: tuple[Contract, ...], col: Collector) -> tuple[Waiver, ...]:
    out = []
    raw = data.get("contract", [])
    for i, c in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(c, dict) or "waiver" not in c:
            continue
        ws = c["waiver"]
        if not isinstance(ws, list):
            At(("contract", i), f"contract {c.get('id')!r}", col).key("waiver").add(
                "must be an array of tables",
                "write each waiver as a [[contract.waiver]] table",
            )
            continue
        out += [wv for j, w in enumerate(ws) if (wv := _waiver(str(c.get("id")), i, j, w, col))]
    return tuple(out)


def _waiver(cid: str, i: int, j: int, w: Any, col: Collector) -> Waiver | None:
    at = At(("contract", i, "waiver", j), f"contract {cid!r}.waiver[{j}]", col)
    if not isinstance(w, dict):
        at.add("must be a table", "use [[contract.waiver]]")
        return None
    unknown_keys(w, CONTRACT_FIELD["waiver"].keys, at)
    until = w.get("until")
    if isinstance(until, str):
        try:
            until = dt.date.fromisoformat(until)
        except ValueError:
            until = None
    if not isinstance(until, dt.date) or isinstance(until, dt.datetime):
        at.key("until").add(
            "needs an expiry date",
            "until = 2027-03-01 (every waiver expires)",
        )
        return None
    runner, reason = w.get("runner"), w.get("reason")
    if not isinstance(runner, str) or not isinstance(reason, str) or not reason.strip():
        at.add(
            "needs `runner` (a pattern) and a non-empty `reason`",
            'runner = "apple-*", reason = "MPS bf16 accumulation, see issue 123"',
        )
        return None
    kinds = CONTRACT_FIELD["waiver"].field("kind").choices
    kind = w.get("kind", kinds[0])
    if kind not in kinds:
        at.key("kind").add(
            f"must be one of: {', '.join(kinds)}",
            'kind = "error" covers cases that cannot run on this stack; omit it for a known violation',
        )
        return None
    return Waiver(cid, runner, until, reason, str(w.get("owner", "")), at.line, kind)


def _table(d: dict[str, Any], key: str, at: At) -> dict[str, Any]:
    v = d.get(key, {})
    if not isinstance(v, dict):
        at.key(key).add(
            "must be a table", f"write [{'contract.' if at.where else ''}{key}] with keys under it"
        )
        return {}
    return v


def _is_type(value: Any, t: type) -> bool:
    if t is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, t) and not (t is int and isinstance(value, bool))


def _import_string(
    d: dict[str, Any],
    key: str,
    at: At,
    roots: tuple[Path, ...],
    required: bool = False,
) -> str:
    v = d.get(key)
    if v is None:
        if required:
            at.absent(key).add(f"missing required key `{key}`", f'add {key} = "package.module:function"')
        return ""
    if not isinstance(v, str) or not _IMPORT.match(v):
        at.key(key).add(
            f"{v!r} is not an import string",
            'write it as "package.module:function"',
        )
        return ""
    problem = _located(v, roots, at.col) if at.col.locate else None
    if problem and (
        problem[0].startswith(_UNSEEN) or (problem[0].startswith(ABSENT) and not at.col.strict_imports)
    ):
        at.key(key).warn(*problem)
    elif problem:
        at.key(key).add(*problem)
    return v
