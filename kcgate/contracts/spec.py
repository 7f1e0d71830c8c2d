"""contracts.toml → frozen ``Project`` / ``Contract`` records, validated with every problem reported at once.

Each problem names the file, the line, the contract id and the key path, and suggests a fix.
Torch-free: kernels are located statically (module file + top-level name), never imported here.
"""

from __future__ import annotations

import ast
import contextlib
import datetime as dt
import functools
import gc
import importlib.util
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcgate.contracts import shape_class
from kcgate.contracts.field_checks import Collector, given, read, unknown_keys, value, with_defaults
from kcgate.contracts.fields import (
    CONTRACT_FIELD,
    EXCESS_FACTOR,
    FILE_FIELDS,
    FREIVALDS_VECTORS,
    ID_PATTERN,
    IMPORT_PATTERN,
    POLICY_FIELDS,
    PROJECT_FIELDS,
    RELATIVE_FACTOR,
)
from kcgate.contracts.policy import DriftRule, Policy, Waiver
from kcgate.errors import ContractsError, Problem
from kcgate.util import bounded, tomlsrc
from kcgate.util.frozen_json import decode, encode, freeze
from kcgate.vocab import dtypes
from kcgate.vocab.catalogue import CATALOGUE, MATMUL_LIKE
from kcgate.vocab.classes import CLASSES, ParamSpec, refusal_fix, suggest

# The allowed values, as the field table defines them (kcgate.contracts.fields), under their old names.
OPS = CONTRACT_FIELD["op"].choices
DEVICES = CONTRACT_FIELD["devices"].choices
POSTCONDITIONS = CONTRACT_FIELD["postcondition"].choices
TOLERANCES = CONTRACT_FIELD["tolerance"].field("method").choices
ORACLES = CONTRACT_FIELD["oracle"].choices
DISTRIBUTIONS = CONTRACT_FIELD["distribution"].choices
LAYOUTS = CONTRACT_FIELD["layout"].choices
CALLS = CONTRACT_FIELD["call"].choices
DIRECTIONS = CONTRACT_FIELD["direction"].choices
BACKWARD_CLASSES = tuple(k for k, c in CLASSES.items() if c.backward)  # classes.ContractClass.backward
# Families with a backward contract (kcgate.numerics.ops.OPS[op].grad_bound is not None; a test checks it).
BACKWARD_OPS = tuple(n for n, op in CATALOGUE.items() if op.backward)
# Each family's natural tolerance when neither the contract nor its class says otherwise.
OP_TOLERANCE = {n: op.tolerance for n, op in CATALOGUE.items() if op.tolerance != "error-bound"}
# Each family's shape form (the names of the case-shape dimensions; `call` and `init` read them as
# "{name}" placeholders) and its inputs' names (placeholders too, and how gradients are reported).
# None: any number of dimensions ({n} is the last). All read from kcgate.vocab.catalogue.
OP_SHAPES: dict[str, tuple[str, ...] | None] = {n: op.dims for n, op in CATALOGUE.items()}
# Where each "{name}" size placeholder is read from: (input index, axis) of the trial's own inputs, so a
# swept or held-out shape gets its own sizes. Families with any arity read "{n}", the last dimension.
OP_DIMS: dict[str, dict[str, tuple[int, int]]] = {n: op.dim_sources for n, op in CATALOGUE.items()}
OP_INPUTS: dict[str, tuple[str, ...]] = {n: op.inputs for n, op in CATALOGUE.items()}
# Each family's own parameters, accepted in a contract's ``params`` next to its class's (docs/ops.md).
OP_PARAMS: dict[str, dict[str, ParamSpec]] = {n: op.params for n, op in CATALOGUE.items() if op.params}
_ID = re.compile(ID_PATTERN)
_IMPORT = re.compile(IMPORT_PATTERN)

# The keys of each table, one row each in kcgate.contracts.fields.
_TOL = CONTRACT_FIELD["tolerance"]
_PROTO = CONTRACT_FIELD["protocol"]
_SHAPE_CLASS = CONTRACT_FIELD["shape_class"]
_WAIVER = CONTRACT_FIELD["waiver"]
_PROJECT = {f.key: f for f in PROJECT_FIELDS}
_POLICY = {f.key: f for f in POLICY_FIELDS}
CONTRACT_KEYS = set(CONTRACT_FIELD)
SHAPE_CLASS_KEYS = _SHAPE_CLASS.keys
TOLERANCE_KEYS = _TOL.keys
CALL_KEYS = CONTRACT_FIELD["call"].keys
PROTOCOL_KEYS = _PROTO.keys
WAIVER_KEYS = _WAIVER.keys
TOP_KEYS = frozenset(f.key for f in FILE_FIELDS)
PROJECT_KEYS = frozenset(_PROJECT)
POLICY_KEYS = frozenset(_POLICY)
DRIFT_KEYS = _POLICY["budget_drift"].keys
_PLACEHOLDER = re.compile(r"^\{(\w+)\}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_CONTRACTS_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Tolerance:
    method: str = _TOL.field("method").default
    lam: float = _TOL.field(
        "lambda"
    ).default  # λ of the probabilistic bound (FACTS.md: a practical gate uses 8)
    ulp: float = _TOL.field("ulp").default
    rtol: float = _TOL.field("rtol").default
    atol: float = _TOL.field("atol").default
    factor: float = RELATIVE_FACTOR  # method "relative": allowed error / the baseline's error
    baseline: str = ""  # method "relative" (and the sensitivity gate's reference): "" = the composite
    excess: float = EXCESS_FACTOR  # the sensitivity gate's factor; 0 = off (excess = false)
    excess_reference: str = "composite"  # the gate's floor: the composite's error, or "sequential"'s model


@dataclass(frozen=True)
class Protocol:
    seeds: int = 2  # the class's, when the contract does not say (kcgate.vocab.classes)
    trials: int = 2
    poison: bool = _PROTO.field("poison").default
    guard: int = _PROTO.field("guard").default
    timeout_s: float = _PROTO.field("timeout_s").default
    k_sweep: tuple[int, ...] = ()
    freivalds_vectors: int = FREIVALDS_VECTORS  # random vectors per Freivalds check (docs/freivalds.md)


@dataclass(frozen=True)
class Contract:
    """The paper's eight parts, with class defaults already applied."""

    id: str  # 1 identifier
    klass: str
    kernel: str  # 2 scope
    op: str
    description: str = ""
    devices: tuple[str, ...] = DEVICES
    dtypes: tuple[str, ...] = ("float32",)  # 3 precondition
    accumulate: str = "float32"
    out_dtype: str = ""  # "" = same as the input dtype
    shapes: tuple[tuple[int, ...], ...] = ()
    distribution: str = "normal"
    layout: str = "contiguous"
    postcondition: str = "within-bound"  # 4
    tolerance: Tolerance = field(default_factory=Tolerance)  # 5
    oracle: str = "fp64"  # 6
    reference: str = ""
    inputs: str = ""
    protocol: Protocol = field(default_factory=Protocol)  # 7
    signature: tuple[str, ...] = ()  # 8 (causes to test for; () = the class's)
    params: tuple[tuple[str, Any], ...] = ()
    call: str = "return"
    good: str = ""
    bad: str = ""
    baseline: str = ""
    direction: str = "forward"  # forward | backward (every input gradient) | both
    # (dim index, constraint) pairs every drawn shape respects (grammar: kcgate.contracts.shape_class)
    shape_constraints: tuple[tuple[int, str], ...] = ()
    shape_class: tuple[tuple[int, str], ...] = ()  # C-CMP-03: the class held-out shapes are drawn from
    max_elements: int = 0  # C-CMP-03: cap on a held-out shape's product of dims (0: shape_class.MAX_ELEMENTS)
    # call = { args, kwargs }: the kernel's signature in terms of the family's inputs ("x", "w") and the
    # trial's sizes ("{n}"); None = the family's positional convention. Lists are stored as tuples.
    call_args: tuple[Any, ...] | None = None
    call_kwargs: tuple[tuple[str, Any], ...] = ()
    init: tuple[tuple[str, Any], ...] = ()  # constructor kwargs when the kernel is an nn.Module class
    env: tuple[tuple[str, str], ...] = ()  # set in the worker before the kernel is imported
    line: int | None = None
    # the file the contract is declared in, relative to the contracts file's directory, when it is not the
    # contracts file itself (a @kcgate.contract in a .py, found through [project].discover); line is that file's
    source: str = ""

    @property
    def forward(self) -> bool:
        return self.direction in ("forward", "both")

    @property
    def backward(self) -> bool:
        return self.direction in ("backward", "both")

    def param(self, name: str) -> Any:
        values = dict(self.params)
        if name in values:
            return values[name]
        spec = CLASSES[self.klass].params.get(name) or OP_PARAMS.get(self.op, {})[name]
        return spec.default

    def op_params(self) -> dict[str, Any]:
        """The values of the family's own parameters given in ``params`` (the rest take their defaults)."""
        own = OP_PARAMS.get(self.op, {})
        return {k: v for k, v in self.params if k in own}

    def to_json(self) -> dict[str, Any]:
        return encode(self)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Contract:
        return decode(cls, d)


@dataclass(frozen=True)
class Project:
    path: Path
    name: str
    contracts: tuple[Contract, ...]
    policy: Policy
    paths: tuple[Path, ...] = ()
    baselines_dir: Path | None = None
    results_dir: Path = Path("results")
    warnings: tuple[Problem, ...] = ()  # valid, but worth saying (e.g. a kernel the static lookup cannot see)

    def contract(self, contract_id: str) -> Contract:
        """The contract with this id (a KeyError names an unknown one)."""
        return self._by_id[contract_id]

    @functools.cached_property
    def _by_id(self) -> dict[str, Contract]:
        """Contracts by id, built on first lookup (a run looks one up per case, in parent and worker)."""
        return {c.id: c for c in self.contracts}

    def to_json(self) -> dict[str, Any]:
        """Every field, nested records included (``kcgate.util.frozen_json``): the worker process rebuilds the
        project from this instead of parsing contracts.toml again."""
        return encode(self)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Project:
        return decode(cls, d)


# ---- loading ------------------------------------------------------------------------------------


def load_project(path: Path | str, *, locate_kernels: bool = True) -> Project:
    """Load and validate; raise ContractsError listing every problem.

    ``locate_kernels=False`` is for the reporting path (diff, report), which runs where the kernels are
    not installed and must never look at repository code: import strings are then checked for syntax only.
    """
    path = Path(path)
    if not path.exists():
        raise ContractsError(f"{path}: no such file; create it or pass --contracts PATH")
    try:
        text = bounded.read_capped(path, MAX_CONTRACTS_BYTES).decode("utf-8")
    except bounded.Refused as exc:
        raise ContractsError(f"{path}: {exc}; pass your contracts.toml") from None
    except UnicodeDecodeError as exc:
        raise ContractsError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None
    with _no_cyclic_gc():
        data, lines = _parse(path, text)
        col = Collector(str(path), lines)
        col.locate = locate_kernels
        project = _project(path, data, col)
    if col.problems:
        n = len(col.problems)
        raise ContractsError(f"{path}: {n} problem{'s' * (n != 1)} found", tuple(col.problems))
    return project


def _parse(path: Path, text: str) -> tuple[dict[str, Any], tomlsrc.LineMap]:
    try:
        return tomlsrc.parse(text)
    except tomlsrc.TomlSyntaxError as exc:
        prob = Problem(
            str(path), exc.line, "", f"TOML syntax error: {exc}", "fix the TOML syntax at that line"
        )
        raise ContractsError(f"{path} is not valid TOML", (prob,)) from None


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Parsing and validating 10,000 contracts makes about 10^6 small objects, none in a cycle: the cyclic
    collector's passes over them cost about 15% of the time and free nothing (reference counting still
    frees them)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _project(path: Path, data: dict[str, Any], col: Collector) -> Project:
    unknown_keys(data, TOP_KEYS, (), "", col)
    proj = _table(data, "project", (), col)
    unknown_keys(proj, PROJECT_KEYS, ("project",), "project", col)
    root = path.parent
    paths = tuple(root / p for p in _project_key(proj, "paths", col) or [])
    raw = data.get("contract", [])
    if not isinstance(raw, list) or not raw and not proj.get("discover"):
        col.add((), "", "no [[contract]] entries", "add at least one [[contract]] table (see README)")
        raw = []
    contracts = [_contract(i, c, col, (root, *paths)) for i, c in enumerate(raw) if isinstance(c, dict)]
    _duplicates(contracts, col)
    contracts += _discovered(proj, contracts, col, (root, *paths))
    valid = tuple(c for c in contracts if c is not None)
    return Project(
        warnings=tuple(col.warnings),
        path=path,
        name=_project_key(proj, "name", col) or root.resolve().name,
        contracts=valid,
        policy=_policy(data, valid, col),
        paths=paths,
        baselines_dir=root / proj["baselines"] if isinstance(proj.get("baselines"), str) else None,
        results_dir=root / proj["results"] if isinstance(proj.get("results"), str) else Path("results"),
    )


def _project_key(proj: dict[str, Any], key: str, col: Collector) -> Any:
    return value(proj, _PROJECT[key], ("project",), "project", col)


def _discovered(
    proj: dict[str, Any], contracts: list[Contract | None], col: Collector, roots: tuple[Path, ...]
) -> list[Contract | None]:
    """Contracts declared with ``@kcgate.contract(...)`` in the modules of ``[project].discover``, read
    statically from their source (nothing is imported); their problems name the .py file and line."""
    modules = _project_key(proj, "discover", col)
    if not modules:
        return []
    from kcgate.contracts.discover import discover

    taken = {c.id for c in contracts if c is not None}
    found, problems, missing = discover(modules, roots, taken, len(contracts), col.locate)
    for module in missing:
        col.add(
            ("project", "discover"),
            "project.discover",
            f"cannot find module {module!r}",
            "check the spelling, or add its directory to [project].paths, or install the package",
        )
    col.problems += problems
    return list(found)


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
    p = ("contract", i)
    cid = d.get("id")
    where = f"contract {cid!r}" if isinstance(cid, str) else f"contract #{i + 1}"
    before = len(col.problems)
    unknown_keys(d, CONTRACT_KEYS, p, where, col)
    if not isinstance(cid, str) or not _ID.match(cid):
        col.add(
            p + ("id",),
            where + ".id",
            "missing or invalid id",
            "set id = \"a-stable-name\" (letters, digits, '.', '_', '-'; baselines are keyed on it)",
        )
    klass = _key(d, "class", p, where, col)
    op = _key(d, "op", p, where, col)
    kernel = _import_string(d, "kernel", p, where, col, roots, required=True)
    cls = CLASSES.get(klass or "")
    if cls and op and op not in cls.ops:
        col.add(
            p + ("op",),
            where + ".op",
            f"class {klass} does not apply to op {op!r}",
            refusal_fix(cls.id, op),
        )
    sc = _table(d, "shape_class", p, col, where)
    contract = Contract(
        id=cid if isinstance(cid, str) else f"#{i + 1}",
        klass=klass or "",
        kernel=kernel,
        op=op or "",
        description=_read(d, "description", p, where, col),
        devices=tuple(_read(d, "devices", p, where, col)) or DEVICES,
        dtypes=_read(d, "dtypes", p, where, col),
        accumulate=_read(d, "accumulate", p, where, col),
        out_dtype=_key(d, "out_dtype", p, where, col) or "",
        shapes=_key(d, "shapes", p, where, col) or (),
        distribution=_read(d, "distribution", p, where, col),
        layout=_read(d, "layout", p, where, col),
        postcondition=_key(d, "postcondition", p, where, col) or (cls.postcondition if cls else ""),
        tolerance=_tolerance(d, p, where, col, _default_tolerance(cls, op), roots),
        oracle=_key(d, "oracle", p, where, col) or (cls.oracle if cls else "fp64"),
        reference=_import_string(d, "reference", p, where, col, roots),
        inputs=_import_string(d, "inputs", p, where, col, roots),
        protocol=_protocol(d, p, where, col, cls),
        signature=tuple(_key(d, "signature", p, where, col) or ()),
        params=_params(d, p, where, col, cls, op or ""),
        call=_call_style(d, p, where, col),
        good=_import_string(d, "good", p, where, col, roots),
        bad=_import_string(d, "bad", p, where, col, roots),
        baseline=_import_string(d, "baseline", p, where, col, roots),
        direction=_read(d, "direction", p, where, col),
        shape_constraints=_constraints(d, "shape_constraints", p, where, col, op),
        shape_class=_constraints(sc, "dims", p + ("shape_class",), where + ".shape_class", col, op),
        max_elements=_max_elements(d, sc, p, where, col),
        **_call_table(d, op or "", p, where, col),
        init=_mapping(d, "init", op or "", p, where, col),
        env=_env(d, p, where, col),
        line=col.lines.find(*p),
    )
    _cross_checks(contract, d, p, where, col)
    return contract if len(col.problems) == before else None


def _key(d: dict[str, Any], key: str, p: tuple[Any, ...], where: str, col: Collector) -> Any:
    """A contract key checked as its row says (kcgate.contracts.fields); None when absent or wrong."""
    f = CONTRACT_FIELD[key]
    return value(d, f, p, where, col) if key in d or f.required else None


def _read(d: dict[str, Any], key: str, p: tuple[Any, ...], where: str, col: Collector) -> Any:
    """A contract key checked as its row says; the row's default when absent or wrong."""
    return read(d, CONTRACT_FIELD[key], p, where, col) if key in d else CONTRACT_FIELD[key].default


def _call_style(d: dict[str, Any], p: tuple[Any, ...], where: str, col: Collector) -> str:
    """``call = "return" | "out"``; a table is the argument mapping (its output is returned)."""
    if isinstance(d.get("call"), dict):
        return "return"
    return _read(d, "call", p, where, col)  # type: ignore[no-any-return]


def _call_table(d: dict[str, Any], op: str, p: tuple[Any, ...], where: str, col: Collector) -> dict[str, Any]:
    t = d.get("call")
    if not isinstance(t, dict):
        return {}
    tp, tw = p + ("call",), where + ".call"
    unknown_keys(t, CALL_KEYS, tp, tw, col)
    args = t.get("args")
    if args is not None and not isinstance(args, list):
        col.add(tp + ("args",), tw + ".args", "must be a list", 'args = ["x", ["{n}"], "w", "b"]')
        args = None
    if args is not None:
        for j, a in enumerate(args):
            _check_value(a, op, tp + ("args",), f"{tw}.args[{j}]", col)
    return {
        "call_args": None if args is None else freeze(args),
        "call_kwargs": _mapping(t, "kwargs", op, tp, tw, col),
    }


def _mapping(
    d: dict[str, Any], key: str, op: str, p: tuple[Any, ...], where: str, col: Collector
) -> tuple[tuple[str, Any], ...]:
    """A table of keyword arguments (``call.kwargs``, ``init``), values checked for placeholders."""
    t = _table(d, key, p, col, where)
    for k, v in t.items():
        _check_value(v, op, p + (key, k), f"{where}.{key}.{k}", col)
    return tuple(sorted((k, freeze(v)) for k, v in t.items()))


def _check_value(v: Any, op: str, path: tuple[Any, ...], where: str, col: Collector) -> None:
    """A "{size}" placeholder must name one of the family's dimensions."""
    if isinstance(v, list):
        for x in v:
            _check_value(x, op, path, where, col)
    elif isinstance(v, dict):
        col.add(path, where, "a table is not an argument value", "use a string, number, boolean or list")
    elif isinstance(v, str) and (m := _PLACEHOLDER.match(v)) and op in OP_DIMS:
        if m.group(1) not in OP_DIMS[op] and m.group(1) != "none":
            dims = ", ".join("{" + n + "}" for n in (*OP_DIMS[op], "none"))
            col.add(path, where, f"{v!r} is not a size of op {op!r}", f"use one of: {dims}")


def _env(d: dict[str, Any], p: tuple[Any, ...], where: str, col: Collector) -> tuple[tuple[str, str], ...]:
    t = _table(d, "env", p, col, where)
    out = []
    for k, v in t.items():
        if not _ENV_NAME.match(k) or not isinstance(v, str):
            col.add(
                p + ("env", k),
                f"{where}.env.{k}",
                'environment variables are NAME = "string"',
                'env = { TRITON_INTERPRET = "1" }',
            )
        else:
            out.append((k, v))
    return tuple(sorted(out))


def _default_tolerance(cls: Any, op: str | None) -> str:
    """The class's method, except that 'error-bound' defers to the op family's natural method."""
    method = cls.tolerance if cls else "error-bound"
    return OP_TOLERANCE.get(op or "", method) if method == "error-bound" else method


def _cross_checks(c: Contract, d: dict[str, Any], p: tuple[Any, ...], where: str, col: Collector) -> None:
    if c.klass == "C-PRC-04" and c.param("overflow") == "inf":
        outs = (c.out_dtype,) if c.out_dtype else c.dtypes
        finite = [t for t in outs if t in dtypes.FORMATS and not dtypes.FORMATS[t].has_inf]
        if finite:
            col.add(
                p + ("params", "overflow"),
                where + ".params.overflow",
                f'overflow = "inf" is impossible for {", ".join(finite)} output: the format has no infinity',
                'declare overflow = "saturate" or "nan", or use a float8_e5m2 output',
            )
    _nan_policy(c, d, p, where, col)
    if c.op == "custom" and not (c.reference and c.inputs):
        col.add(
            p + ("op",),
            where + ".op",
            "a custom op needs `reference` and `inputs` functions",
            'add reference = "pkg.mod:ref_fn" and inputs = "pkg.mod:make_inputs"',
        )
    if c.op == "pointwise" and not (c.reference or dict(c.params).get("fn")):
        col.add(
            p + ("op",),
            where + ".op",
            "op 'pointwise' needs the function: params.fn or a reference",
            'add params = { fn = "sigmoid" } (relu, leaky_relu, sigmoid, tanh, elu, hardswish, mish, softplus) '
            'or reference = "torch:sigmoid"',
        )
    if c.oracle == "user" and not c.reference:
        col.add(
            p + ("oracle",),
            where + ".oracle",
            "oracle = 'user' needs a `reference` function",
            'add reference = "pkg.mod:ref_fn"',
        )
    if c.oracle == "freivalds" and c.op not in MATMUL_LIKE:
        col.add(
            p + ("oracle",),
            where + ".oracle",
            f"the Freivalds oracle needs a matmul-shaped op, not {c.op!r}",
            'use oracle = "fp64"',
        )
    if c.backward and c.klass and c.klass not in BACKWARD_CLASSES:
        col.add(
            p + ("direction",),
            where + ".direction",
            f"class {c.klass} measures a forward path only",
            f'use direction = "forward", or a class that applies to backward: {", ".join(BACKWARD_CLASSES)}',
        )
    if c.backward and c.op and c.op not in BACKWARD_OPS:
        col.add(
            p + ("direction",),
            where + ".direction",
            f"op {c.op!r} has no backward contract",
            f'use direction = "forward", or one of the ops with a backward: {", ".join(BACKWARD_OPS)}',
        )
    form = OP_SHAPES.get(c.op)
    for j, shape in enumerate(c.shapes):
        if form is not None and len(shape) != len(form):
            col.add(
                p + ("shapes",),
                f"{where}.shapes[{j}]",
                f"{c.op} shapes have {len(form)} dimensions [{', '.join(form)}], not {len(shape)}: {list(shape)}",
                f"write each shape as [{', '.join(form)}]",
            )
    if "shapes" not in d and c.op == "custom":
        col.add(p, where + ".shapes", "a custom op needs `shapes`", "add shapes = [[...], ...]")
    _shapes_in_class(c, d, p, where, col)


def _nan_policy(c: Contract, d: dict[str, Any], p: tuple[Any, ...], where: str, col: Collector) -> None:
    """C-EXC-01: nan = "mask" declares its masked value; mask_value means nothing without it."""
    if c.klass != "C-EXC-01":
        return
    declared = "mask_value" in dict(c.params)
    if c.param("nan") == "mask" and not declared:
        col.add(
            p + ("params", "nan"),
            where + ".params.nan",
            'nan = "mask" needs the masked value',
            "add mask_value = 0.0 (or the value the kernel writes where IEEE gives NaN/Inf) to params",
        )
    elif declared and c.param("nan") != "mask":
        col.add(
            p + ("params", "mask_value"),
            where + ".params.mask_value",
            f'mask_value applies to nan = "mask" only (nan = {c.param("nan")!r})',
            'set nan = "mask", or remove mask_value',
        )


def _constraints(
    d: dict[str, Any], key: str, p: tuple[Any, ...], where: str, col: Collector, op: str | None
) -> tuple[tuple[int, str], ...]:
    """``{ dim = "constraint" }`` (dims by letter of the op's shape form or by index) -> (index, text)."""
    t = _table(d, key, p, col, where)
    if not t:
        return ()
    names = OP_SHAPES.get(op or "")
    try:
        parsed = shape_class.parse(t, names, len(names) if names else None)
    except shape_class.ShapeSyntaxError as exc:
        col.add(
            p + (key,),
            f"{where}.{key}",
            str(exc),
            'write { dim = "constraint" }, e.g. { 3 = "even" } or { m = "multiple_of(16)", k = "range(16, 8192)" }',
        )
        return ()
    return tuple((i, " and ".join(t.text(names) for t in terms)) for i, terms in sorted(parsed.items()))


def _max_elements(
    d: dict[str, Any], t: dict[str, Any], p: tuple[Any, ...], where: str, col: Collector
) -> int:
    unknown_keys(t, SHAPE_CLASS_KEYS, p + ("shape_class",), where + ".shape_class", col)
    if "shape_class" in d and d.get("class") != "C-CMP-03":
        col.add(
            p + ("shape_class",),
            where + ".shape_class",
            "shape_class applies to class C-CMP-03 only",
            'use class = "C-CMP-03", or shape_constraints for the shapes every class draws',
        )
    v = value(t, _SHAPE_CLASS.field("max_elements"), p + ("shape_class",), where + ".shape_class", col)
    return v or 0


def _shapes_in_class(c: Contract, d: dict[str, Any], p: tuple[Any, ...], where: str, col: Collector) -> None:
    """Every declared shape satisfies the contract's shape constraints and its shape class."""
    names = OP_SHAPES.get(c.op)
    for key, pairs in (("shape_constraints", c.shape_constraints), ("shape_class", c.shape_class)):
        if not pairs:
            continue
        cons = shape_class.parse({str(i): text for i, text in pairs}, None, None)
        for j, shape in enumerate(c.shapes):
            if max(cons) >= len(shape):
                col.add(
                    p + (key,),
                    f"{where}.{key}",
                    f"dimension {max(cons)} is out of range for shape {list(shape)}",
                    "name a dimension the shapes have (0-based)",
                )
                continue
            broken = shape_class.violations(shape, cons, names)
            if broken:
                col.add(
                    p + ("shapes",),
                    f"{where}.shapes[{j}]",
                    f"shape {list(shape)} is outside its {key}: {'; '.join(broken)}",
                    f"declare a shape that satisfies {key}, or widen it",
                )


def _duplicates(contracts: list[Contract | None], col: Collector) -> None:
    seen: dict[str, int] = {}
    for i, c in enumerate(contracts):
        if c is None:
            continue
        if c.id in seen:
            col.add(
                ("contract", i, "id"),
                f"contract {c.id!r}.id",
                f"duplicate id (first defined as contract #{seen[c.id] + 1})",
                "ids must be unique: rename one of them",
            )
        seen.setdefault(c.id, i)


# ---- parts ------------------------------------------------------------------------------------


def _tolerance(
    d: dict[str, Any], p: tuple[Any, ...], where: str, col: Collector, default: str, roots: tuple[Path, ...]
) -> Tolerance:
    t = _table(d, "tolerance", p, col, where)
    tp, tw = p + ("tolerance",), where + ".tolerance"
    unknown_keys(t, TOLERANCE_KEYS, tp, tw, col)
    nums = given(t, _TOL, tp, tw, col)
    method = nums.get("method") or default
    if method == "abs-rel" and nums.get("rtol") is None and nums.get("atol") is None:
        col.add(tp, tw, "method 'abs-rel' needs rtol and/or atol", "add rtol = 1e-5 (and atol)")
    for key in ("factor", "baseline"):
        if key in t and method != "relative":
            col.add(
                tp + (key,),
                f"{tw}.{key}",
                f"`{key}` applies to method 'relative' only",
                f'set method = "relative", or remove {key}',
            )
    got = with_defaults(_TOL, nums)  # excess = false is 0.0: the sensitivity gate off
    return Tolerance(
        method=method,
        lam=got["lambda"],
        ulp=got["ulp"],
        rtol=got["rtol"],
        atol=got["atol"],
        factor=got["factor"],
        baseline=_import_string(t, "baseline", tp, tw, col, roots),
        excess=got["excess"],
        excess_reference=got["excess_reference"] or "composite",
    )


def _protocol(d: dict[str, Any], p: tuple[Any, ...], where: str, col: Collector, cls: Any) -> Protocol:
    t = _table(d, "protocol", p, col, where)
    tp, tw = p + ("protocol",), where + ".protocol"
    unknown_keys(t, PROTOCOL_KEYS, tp, tw, col)
    got = with_defaults(_PROTO, given(t, _PROTO, tp, tw, col))  # the row keys are Protocol's fields
    seeds, trials = got.pop("seeds"), got.pop("trials")  # no row default: the class's
    return Protocol(
        seeds=seeds or (cls.seeds if cls else 2), trials=trials or (cls.trials if cls else 2), **got
    )


def _params(
    d: dict[str, Any], p: tuple[Any, ...], where: str, col: Collector, cls: Any, op: str
) -> tuple[tuple[str, Any], ...]:
    t = _table(d, "params", p, col, where)
    if cls is None:
        return ()
    tp, tw = p + ("params",), where + ".params"
    known = {**OP_PARAMS.get(op, {}), **cls.params}
    out = []
    for key, v in t.items():
        spec = known.get(key)
        if spec is None:
            fix = suggest(key, list(known)) if known else f"class {cls.id} and op {op!r} take no params"
            col.add(tp + (key,), f"{tw}.{key}", f"unknown parameter for {cls.id} and op {op!r}", fix)
        elif not _is_type(v, spec.type) or (spec.choices and v not in spec.choices):
            allowed = ", ".join(map(repr, spec.choices)) if spec.choices else spec.type.__name__
            col.add(tp + (key,), f"{tw}.{key}", f"invalid value {v!r}", f"use {allowed}")
        else:
            out.append((key, freeze(v)))  # a list value is a tuple, as in call and init
    return tuple(sorted(out, key=lambda kv: kv[0]))


def _policy(data: dict[str, Any], contracts: tuple[Contract, ...], col: Collector) -> Policy:
    t = _table(data, "policy", (), col)
    unknown_keys(t, POLICY_KEYS, ("policy",), "policy", col)
    block_on = value(t, _POLICY["block_on"], ("policy",), "policy", col)
    return Policy(
        block_on=tuple(block_on or ()) if "block_on" in t else Policy().block_on,
        budget_drift=_drift(t, col),
        required_runners=tuple(value(t, _POLICY["required_runners"], ("policy",), "policy", col) or ()),
        acknowledge_removed=tuple(value(t, _POLICY["acknowledge_removed"], ("policy",), "policy", col) or ()),
        waivers=_waivers(data, contracts, col),
    )


_DRIFT_FIX = _POLICY["budget_drift"].example


def _drift(t: dict[str, Any], col: Collector) -> DriftRule:
    """policy.budget_drift: a table with ``ratio`` (and ``floor``) and/or ``absolute``; a bare number is the
    absolute rule (kcgate 0.1's meaning, kept)."""
    v = t.get("budget_drift")
    p, where = ("policy", "budget_drift"), "policy.budget_drift"
    if v is None:
        return DriftRule()
    row = _POLICY["budget_drift"]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        amount = value(t, row, ("policy",), "policy", col)
        return DriftRule(ratio=None, absolute=amount) if amount is not None else DriftRule()
    if not isinstance(v, dict):
        col.add(p, where, f"must be a table or a number, not {v!r}", _DRIFT_FIX)
        return DriftRule()
    unknown_keys(v, DRIFT_KEYS, p, where, col)
    ratio, floor, amount = (value(v, row.field(k), p, where, col) for k in ("ratio", "floor", "absolute"))
    if ratio is None and amount is None and not ({"ratio", "absolute"} & set(v)):
        if "floor" in v or set(v) - DRIFT_KEYS:
            ratio = DriftRule().ratio  # a floor alone keeps the default ratio (unknown keys: reported above)
        else:
            col.add(p, where, "names no rule", _DRIFT_FIX)
    return DriftRule(ratio=ratio, floor=DriftRule().floor if floor is None else floor, absolute=amount)


def _waivers(data: dict[str, Any], contracts: tuple[Contract, ...], col: Collector) -> tuple[Waiver, ...]:
    out = []
    raw = data.get("contract", [])
    for i, c in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(c, dict) or "waiver" not in c:
            continue
        ws = c["waiver"]
        if not isinstance(ws, list):
            col.add(
                ("contract", i, "waiver"),
                f"contract {c.get('id')!r}.waiver",
                "must be an array of tables",
                "write each waiver as a [[contract.waiver]] table",
            )
            continue
        out += [wv for j, w in enumerate(ws) if (wv := _waiver(str(c.get("id")), i, j, w, col))]
    return tuple(out)


def _waiver(cid: str, i: int, j: int, w: Any, col: Collector) -> Waiver | None:
    p, where = ("contract", i, "waiver", j), f"contract {cid!r}.waiver[{j}]"
    if not isinstance(w, dict):
        col.add(p, where, "must be a table", "use [[contract.waiver]]")
        return None
    unknown_keys(w, WAIVER_KEYS, p, where, col)
    until = w.get("until")
    if isinstance(until, str):
        try:
            until = dt.date.fromisoformat(until)
        except ValueError:
            until = None
    if not isinstance(until, dt.date) or isinstance(until, dt.datetime):
        col.add(
            p + ("until",),
            where + ".until",
            "needs an expiry date",
            "until = 2027-03-01 (every waiver expires)",
        )
        return None
    runner, reason = w.get("runner"), w.get("reason")
    if not isinstance(runner, str) or not isinstance(reason, str) or not reason.strip():
        col.add(
            p,
            where,
            "needs `runner` (a pattern) and a non-empty `reason`",
            'runner = "apple-*", reason = "MPS bf16 accumulation, see issue 123"',
        )
        return None
    kinds = _WAIVER.field("kind").choices
    kind = w.get("kind", kinds[0])
    if kind not in kinds:
        col.add(
            p + ("kind",),
            where + ".kind",
            f"must be one of: {', '.join(kinds)}",
            'kind = "error" covers cases that cannot run on this stack; omit it for a known violation',
        )
        return None
    return Waiver(cid, runner, until, reason, str(w.get("owner", "")), col.lines.find(*p), kind)


# ---- typed field readers --------------------------------------------------------------------------


def _table(
    d: dict[str, Any], key: str, p: tuple[Any, ...], col: Collector, where: str = ""
) -> dict[str, Any]:
    v = d.get(key, {})
    if not isinstance(v, dict):
        col.add(
            p + (key,),
            f"{where}.{key}" if where else key,
            "must be a table",
            f"write [{'contract.' if where else ''}{key}] with keys under it",
        )
        return {}
    return v


def _is_type(value: Any, t: type) -> bool:
    if t is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, t) and not (t is int and isinstance(value, bool))


# ---- kernels, located without importing --------------------------------------------------------


def _import_string(
    d: dict[str, Any],
    key: str,
    p: tuple[Any, ...],
    where: str,
    col: Collector,
    roots: tuple[Path, ...],
    required: bool = False,
) -> str:
    v = d.get(key)
    if v is None:
        if required:
            col.add(
                p, f"{where}.{key}", f"missing required key `{key}`", f'add {key} = "package.module:function"'
            )
        return ""
    if not isinstance(v, str) or not _IMPORT.match(v):
        col.add(
            p + (key,),
            f"{where}.{key}",
            f"{v!r} is not an import string",
            'write it as "package.module:function"',
        )
        return ""
    problem = _located(v, roots, col) if col.locate else None
    if problem and problem[0].startswith(_UNSEEN):
        col.warn(p + (key,), f"{where}.{key}", problem[0], problem[1])
    elif problem:
        col.add(p + (key,), f"{where}.{key}", problem[0], problem[1])
    return v


_UNSEEN = "the static lookup cannot see"


def _located(target: str, roots: tuple[Path, ...], col: Collector) -> tuple[str, str] | None:
    """``locate``, once per kernel and roots in one load: 10,000 contracts name a few kernels."""
    key = (target, roots)
    if key not in col.located:
        col.located[key] = locate(target, roots)
    return col.located[key]  # type: ignore[no-any-return]


def locate(target: str, roots: tuple[Path, ...]) -> tuple[str, str] | None:
    """Find ``pkg.mod:fn`` statically: the module's source file and a top-level definition of fn."""
    module, name = target.split(":")
    source = _module_source(module, roots)
    if source is None:
        return (
            f"cannot find module {module!r}",
            "check the spelling, or add its directory to [project].paths, or install the package",
        )
    if source.suffix != ".py":
        return None  # compiled extension: cannot check statically; run will import it
    names = _defined_names(source)
    if isinstance(names, Exception):
        return (f"module {module!r} ({source}) cannot be parsed: {names}", "fix the module's syntax")
    if name not in names:
        # re-exports, `import *` and module __getattr__ are invisible without importing: run imports it
        return (
            f"{_UNSEEN} {name!r} in module {module!r} ({source}); `kcgate run` will import it",
            f"check the spelling of {name!r}; nothing to do if it is a re-exported name",
        )
    return None


def _defined_names(source: Path) -> frozenset[str] | Exception:
    """A module file's top-level names, parsed once per file version (10,000 contracts share a few modules)."""
    try:
        stat = source.stat()
    except OSError as exc:
        return exc
    return _parsed_names(source, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _parsed_names(source: Path, mtime_ns: int, size: int) -> frozenset[str] | Exception:
    try:
        return frozenset(_top_level_names(ast.parse(source.read_text(encoding="utf-8"))))
    except (SyntaxError, UnicodeDecodeError, OSError) as exc:
        return exc


_SOURCES: dict[tuple[str, tuple[Path, ...], tuple[str, ...]], Path] = {}


def _module_source(module: str, roots: tuple[Path, ...]) -> Path | None:
    """The module's file, searched in [project].paths, then sys.path, then the import system's finders.
    Found files are remembered (while they exist): contracts share a few kernel modules."""
    sys_path = tuple(sys.path)
    key = (module, roots, sys_path)
    known = _SOURCES.get(key)
    if known is not None and known.is_file():
        return known
    found = _find_source(module, roots, sys_path)
    if found is not None:
        _SOURCES[key] = found
    return found


def _find_source(module: str, roots: tuple[Path, ...], sys_path: tuple[str, ...]) -> Path | None:
    rel = Path(*module.split("."))
    for root in (*roots, *(Path(p) for p in sys_path if p)):
        for cand in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
            if cand.is_file():
                return cand
    return _installed_source(module)


def _installed_source(module: str) -> Path | None:
    """Locate through the import system's finders (editable installs too) without executing the package:
    find_spec on a top-level name runs no code; submodules are then looked up as files below it."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin else None
    for base in spec.submodule_search_locations or []:
        rel = Path(base, *rest)
        for cand in (rel.with_suffix(".py"), rel / "__init__.py"):
            if cand.is_file():
                return cand
    return None


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names
