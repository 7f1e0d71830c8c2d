"""The reference's precision placement as part of a custom op's contract: a passing low-precision case whose
kernel carries the error pattern of one cast mutant of the reference (an upcast dropped, a downcast moved
earlier), run in the case's dtype, where the reference as written does not, fails, named by that change and its
line. The pattern, not bit-equality (kcgate.numerics.pattern): a kernel that makes the mutant's rounding
mistake but reduces in its own order (blocks, a tree, an online pass) is named too."""

from __future__ import annotations

import ast
import inspect
import itertools
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from kcgate.engine.diagnosis import sig
from kcgate.engine.explain import _helpers, _rebind, _replaced, _source
from kcgate.engine.multi import OUTPUT
from kcgate.numerics.derived import tensors
from kcgate.numerics.outputs import raw
from kcgate.numerics.pattern import Deviation, Pattern
from kcgate.results.model import Signature
from kcgate.vocab.mutation_rules import FP32, Where, upcast_dropped

MAX_MUTANTS = 64  # cast mutants tried at most per case: a count, never a clock, as the verdict rests on it
# the kernel's output differs from the reference as written (run in the dtype) in at least this share of the
# output on every trial, and this many elements over the trials, before any mutant is tried (one rounding
# moved changes about a third of a 16-bit output; a correct kernel that rounds as the reference does, in
# another order, about 1e-4 of it) ...
MIN_SHARE = 0.05
MIN_ELEMENTS = 32
# ... and a mutant's error pattern is the kernel's where, on every trial, the kernel's deviation from the
# reference, fitted to the mutant's with the reference's own error held fixed (kcgate.numerics.pattern),
# carries between a quarter and four times the mutant's (the coefficient: 1 for the mutant itself, 0.45-0.67
# for rms_norm's variance in the dtype summed in blocks of 64, 0 ± 0.02 for a correct kernel that rounds
# elsewhere), and the mutant's deviation explains at least RHO² = 1/16 of the kernel's (the partial
# correlation: 0.38-0.63 for those two, 0 ± 0.02 for that correct kernel)
BETA = 0.25
RHO = 0.25
# a rounding whose value is only ever a matmul operand is one the derived bound allows (operands in the input
# dtype, as tensor cores take them: FlashAttention's P): such a mutant names nothing
MATMULS = frozenset(
    {"matmul", "mm", "bmm", "einsum", "linear", "addmm", "baddbmm", "__matmul__", "__rmatmul__", "tensordot",
     "scaled_dot_product_attention"}
)  # fmt: skip
# views and casts pass a rounded value on to whatever consumes them
PASSING = frozenset(
    {"view", "reshape", "transpose", "permute", "t", "contiguous", "expand", "expand_as", "unsqueeze",
     "squeeze", "__getitem__", "__get__", "flatten", "to", "float", "half", "bfloat16", "type_as", "clone",
     "narrow", "select", "chunk", "split", "unbind", "detach"}
)  # fmt: skip
LOW = "__kcgate_low__"  # the name a mutant calls to round a value to the case's dtype


@dataclass(frozen=True)
class Placement:
    """One row: a way a kernel places the reference's roundings wrong, and how the reference is mutated."""

    name: str
    change: str  # the words of the failure: "matches the reference with <change>, at line N"
    applies: str


PLACEMENTS: tuple[Placement, ...] = (
    Placement("upcast-dropped", "{cast} dropped", "each x.float() / x.to(torch.float32) of the reference"),
    Placement(
        "downcast-inserted",
        "{name} rounded to {dtype}",
        "each assignment, where the reference casts down somewhere (x.to(x_dtype), .type_as, .half())",
    ),
    Placement(
        "downcast-moved-up",
        "the downcast moved up to {name}: {dtype} from there on",
        "each assignment with an upcast after it: rounded there, and the upcasts after it dropped",
    ),
)
BY_NAME = {p.name: p for p in PLACEMENTS}


@dataclass(frozen=True)
class CastMutant:
    row: str
    change: str
    line: int
    fn: Callable[..., Any]
    lowering: _Lowering | None = None


@dataclass(frozen=True)
class Run:
    """One forward trial: the inputs as the kernel got them, its float outputs, and the fp64 oracle's."""

    inputs: tuple[Any, ...]
    outs: tuple[torch.Tensor, ...]
    refs64: tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class Found:
    mutant: CastMutant
    where: str  # "line 12 of ref.py (in gemma_norm)"
    differ_mutant: int
    differ_reference: int
    elements: int
    err_ratio: float  # the mutant's rms error against fp64 over the reference-as-written's
    beta: float  # the error pattern's fit (kcgate.numerics.pattern), its least over the trials
    rho: float


def low_dtype(dtype: torch.dtype) -> bool:
    """Whether a case's dtype is below fp32: only there can a rounding be misplaced (fp32 and fp64: no-op)."""
    return dtype.is_floating_point and torch.finfo(dtype).eps > torch.finfo(torch.float32).eps


class _Uses(TorchFunctionMode):
    """Which ops consume the values a mutant rounded (through views and casts): ``matmul`` once a matmul
    does, ``other`` once anything else does."""

    def __init__(self) -> None:
        super().__init__()
        self.marked: dict[int, torch.Tensor] = {}  # kept alive, so that no id is reused
        self.matmul = self.other = False

    def mark(self, v: Any) -> None:
        for t in tensors(v):
            self.marked[id(t)] = t

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if any(id(t) in self.marked for t in tensors((args, kwargs or {}))):
            name = getattr(func, "__name__", "")
            if name in PASSING:
                self.mark(out)
            elif name in MATMULS:
                self.matmul = True
            else:
                self.other = True
        return out


class _Lowering:
    """The function a mutant calls to round a value to the case's dtype (wider floats only), telling
    ``uses`` what it rounded where one watches."""

    def __init__(self, low: torch.dtype) -> None:
        self.low = low
        self.uses: _Uses | None = None

    def __call__(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dtype != self.low:
            if torch.finfo(v.dtype).eps < torch.finfo(self.low).eps:
                v = v.to(self.low)
                if self.uses is not None:
                    self.uses.mark(v)
            return v
        if isinstance(v, tuple):
            return tuple(self(t) for t in v)
        return v


def _is_downcast(node: ast.AST) -> bool:
    """``x.to(orig)``, ``x.to(x.dtype)``, ``x.type_as(y)``, ``x.half()``, ``x.bfloat16()``: a cast whose target
    is not fp32 (the reference places a rounding to its inputs' precision somewhere)."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    attr = node.func.attr
    if attr in ("half", "bfloat16", "type_as"):
        return True
    if attr != "to" or len(node.args) + len(node.keywords) != 1:
        return False
    arg = node.args[0] if node.args else node.keywords[0].value
    last = arg.attr if isinstance(arg, ast.Attribute) else arg.id if isinstance(arg, ast.Name) else ""
    return bool(last) and last not in FP32 and "device" not in last  # x.to(y.device) moves, not casts


def has_casts(fn: Callable[..., Any]) -> bool:
    """Whether the reference (or a helper it calls) casts at all: without one there is nothing to place."""
    fns: list[Callable[..., Any]] = [fn, *_helpers(fn)]
    for f in fns:
        found = _source(f)
        if found and any(upcast_dropped(n, Where()) or _is_downcast(n) for n in ast.walk(found[0])):
            return True
    return False


def mutants(root: Callable[..., Any], low: torch.dtype) -> Iterator[tuple[CastMutant, str]]:
    """Each cast mutant of the reference and the module-level helpers it calls, with where it is."""
    fns: list[Callable[..., Any]] = [root, *_helpers(root)]
    for fn in fns:
        found = _source(fn)
        if found is None:
            continue
        node, path, _ = found
        space = dict(getattr(fn, "__globals__", {}))
        try:
            space.update(inspect.getclosurevars(fn).nonlocals)
        except (TypeError, ValueError):
            continue
        space[LOW] = lowering = _Lowering(low)
        ups = [n for n in ast.walk(node) if upcast_dropped(n, Where())]
        downs = any(_is_downcast(n) for n in ast.walk(node))
        where = f"of {path.rsplit('/', 1)[-1]} (in {node.name})"
        for target, new, row, words, line in _edits(node, ups, downs, low):
            tree = _replaced(node, target, new)
            try:
                ns = dict(space)
                exec(compile(ast.fix_missing_locations(ast.Module([tree], [])), path, "exec"), ns)
            except Exception:  # noqa: BLE001 — a mutant that does not compile places nothing
                continue
            mutated = ns[node.name]
            yield CastMutant(row, words, line, _rebind(root, fn, mutated), lowering), f"line {line} {where}"


def _edits(
    node: ast.FunctionDef, ups: list[ast.AST], downs: bool, low: torch.dtype
) -> Iterator[tuple[ast.AST, ast.AST, str, str, int]]:
    """(the node replaced, its replacement, the row, the change in words, its line) for each cast mutant of
    one function; a downcast moved up replaces the whole function in one go."""
    dt = str(low).removeprefix("torch.")
    for up in ups:
        (new, said), *_ = upcast_dropped(up, Where())
        what = BY_NAME["upcast-dropped"].change.format(cast=said.removesuffix(" dropped"))
        yield up, new, "upcast-dropped", what, getattr(up, "lineno", 0)
    if not downs:
        return
    for a in (n for n in ast.walk(node) if isinstance(n, ast.Assign) and n is not node):
        name = ast.unparse(a.targets[0]) if len(a.targets) == 1 else ""
        if not name:
            continue
        rounded = ast.Assign(a.targets, ast.Call(ast.Name(LOW, ast.Load()), [a.value], []))
        ast.copy_location(rounded, a)
        what = BY_NAME["downcast-inserted"].change.format(name=name, dtype=dt)
        yield a, rounded, "downcast-inserted", what, a.lineno
        later = [u for u in ups if getattr(u, "lineno", 0) > (a.end_lineno or a.lineno)]
        if later:
            body = _replaced(node, a, rounded)
            what = BY_NAME["downcast-moved-up"].change.format(name=name, dtype=dt)
            yield node, _dropped(body, later), "downcast-moved-up", what, a.lineno


def _dropped(fn: ast.FunctionDef, ups: list[ast.AST]) -> ast.FunctionDef:
    """``fn`` with every upcast at the given nodes' positions replaced by its receiver."""
    spots = {(u.lineno, u.col_offset, u.end_col_offset) for u in ups}  # type: ignore[attr-defined]

    class Drop(ast.NodeTransformer):
        def visit_Call(self, n: ast.Call) -> Any:
            self.generic_visit(n)
            at = (getattr(n, "lineno", 0), getattr(n, "col_offset", 0), getattr(n, "end_col_offset", 0))
            if at in spots and (got := upcast_dropped(n, Where())):
                return got[0][0]
            return n

    out = Drop().visit(fn)
    assert isinstance(out, ast.FunctionDef)
    return out


def floats(result: Any) -> list[torch.Tensor]:
    """A result's float outputs, in kcgate's order (kcgate.numerics.outputs.raw)."""
    return [t for _, t in raw(result) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _count(outs: Sequence[torch.Tensor], other: Sequence[torch.Tensor]) -> tuple[int, int] | None:
    """(elements where ``other``, cast to each output's dtype, differs from the kernel's output bit for bit,
    finite elements counted), or None where the outputs do not line up."""
    if len(outs) != len(other):
        return None
    differ = n = 0
    for o, r in zip(outs, other):
        if tuple(o.shape) != tuple(r.shape):
            return None
        r = r.detach().to(o.device, o.dtype)
        ok = o.isfinite() & r.isfinite()  # no boolean indexing: it costs 20x the comparison on a CPU
        differ += int(((o != r) & ok).sum())
        n += int(ok.sum())
    return differ, n


def _fresh(inputs: Sequence[Any]) -> list[Any]:
    """Copies of the trial's inputs: a reference that writes into its inputs must not change the trial's."""
    return [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]


def _rms_err(xs: Sequence[torch.Tensor], refs: Sequence[torch.Tensor]) -> float:
    se = n = 0.0
    for x, r in zip(xs, refs):
        e = x.detach().to(r.device, torch.float64) - r.to(torch.float64).reshape(x.shape)
        ok = e.isfinite()
        se, n = se + float(torch.where(ok, e, 0.0).pow(2).sum()), n + int(ok.sum())
    return (se / n) ** 0.5 if n else 0.0


def misplaced(reference: Callable[..., Any], runs: Sequence[Run], low: torch.dtype) -> Found | None:
    """The cast mutant of ``reference`` whose error pattern the kernel carries on every run, or None. The
    reference as written runs first, in the dtype: where the kernel equals it (nearly) bit for bit on some run,
    or is no less accurate than it against fp64, no mutant is tried (every mutant rounds more than the
    reference; a kernel written like its reference costs one run of it per trial)."""
    if not runs or not low_dtype(low) or not isinstance(reference, types.FunctionType):
        return None
    as_written = []
    for r in runs:
        try:
            with torch.no_grad():
                ref = floats(reference(*_fresh(r.inputs)))
        except Exception:  # noqa: BLE001 — a reference that cannot run in the dtype places nothing
            return None
        c = _count(r.outs, ref)
        if c is None or c[0] < max(1, MIN_SHARE * c[1]):
            return None
        own = _rms_err(ref, r.refs64)
        if not _rms_err(r.outs, r.refs64) > own:
            return None  # a kernel no less accurate than the reference rounds no more than it does
        as_written.append(Written(ref, c, own, Deviation(r.outs, ref, r.refs64)))
    if sum(w.count[0] for w in as_written) < MIN_ELEMENTS or not has_casts(reference):
        return None
    found = [f for m, where in _listed(reference, low) if (f := _reproduces(m, where, runs, as_written))]
    return max(found, key=lambda f: f.rho, default=None)  # the first listed of equals


@dataclass(frozen=True)
class Written:
    """The reference as written on one trial: its float outputs, (elements where the kernel differs from them,
    elements counted), its rms error against fp64, and the kernel's deviation from it."""

    ref: list[torch.Tensor]
    count: tuple[int, int]
    rms: float
    deviation: Deviation


_CACHE: dict[tuple[Callable[..., Any], torch.dtype], list[tuple[CastMutant, str]]] = {}


def _listed(reference: Callable[..., Any], low: torch.dtype) -> list[tuple[CastMutant, str]]:
    """The first ``MAX_MUTANTS`` cast mutants, compiled once per reference and dtype in a worker (every case
    of a contract shares them: parsing and compiling is most of a small case's cost)."""
    key = (reference, low)
    if key not in _CACHE:
        if len(_CACHE) >= 64:
            _CACHE.clear()
        _CACHE[key] = list(itertools.islice(mutants(reference, low), MAX_MUTANTS))
    return _CACHE[key]


def _reproduces(
    m: CastMutant, where: str, runs: Sequence[Run], as_written: Sequence[Written]
) -> Found | None:
    """``m`` held to every run (the first one that it does not reproduce ends it): less accurate than the
    reference against the fp64 oracle, and its error pattern carried by the kernel (``carries``)."""
    dm = dr = n = 0
    ratio, beta, rho = 0.0, float("inf"), float("inf")
    for r, w in zip(runs, as_written):
        try:
            with torch.no_grad():
                alt = floats(m.fn(*_fresh(r.inputs)))
        except Exception:  # noqa: BLE001 — a mutant that raises on these inputs reproduces nothing
            return None
        c = _count(r.outs, alt)
        if c is None:
            return None
        theirs = _rms_err(alt, r.refs64)
        if not theirs > w.rms:
            return None  # a mutant no less accurate than the reference: the kernel is not worse than it
        fit = w.deviation.against(alt)
        if not carries(fit, c[0], w.count[0]):
            return None
        ratio = max(ratio, theirs / w.rms if w.rms > 0 else float("inf"))
        beta, rho = min(beta, fit.beta), min(rho, fit.rho)
        dm, dr, n = dm + c[0], dr + w.count[0], n + w.count[1]
    if m.lowering is not None and _operand_only(m, runs[0]):
        return None
    return Found(m, where, dm, dr, n, ratio, beta, rho)


def carries(fit: Pattern, differ_mutant: int, differ_reference: int) -> bool:
    """Whether the kernel carries the mutant's error pattern on a trial: between ``BETA`` and ``1 / BETA`` of
    the mutant's deviation, explaining at least ``RHO``² of the kernel's, and nearer the mutant than the
    reference as written (fewer elements differ)."""
    return BETA <= fit.beta <= 1 / BETA and fit.rho >= RHO and differ_mutant < differ_reference


def _operand_only(m: CastMutant, run: Run) -> bool:
    """Whether every value the mutant rounds is consumed only by matmuls (an operand in the input dtype)."""
    assert m.lowering is not None
    uses = _Uses()
    m.lowering.uses = uses
    try:
        with torch.no_grad(), uses:
            m.fn(*_fresh(run.inputs))
    finally:
        m.lowering.uses = None
    return uses.matmul and not uses.other  # a rounded value returned as it is is no operand


def placement_signature(ctx: Any, ts: Sequence[Any]) -> Signature | None:
    """A passing case of a custom op with a derived bound, in a 16-bit dtype, whose forward output carries the
    error pattern of a cast mutant of the reference on every trial (``misplaced``): "matches the reference with
    the downcast moved up to h: bfloat16 from there on, at line 113 of norms.py (in gemma_norm)". Built-in
    families have their own (kcgate.engine.mistakes.reproduced); fp32 and fp64 cases, and a written
    tolerance, are left alone."""
    if getattr(ctx.op, "name", "") != "custom" or ctx.contract.tolerance.method != "error-bound":
        return None
    if not low_dtype(ctx.dtype):
        return None
    runs = [r for t in ts if (r := _run(t)) is not None]
    if len(runs) != len(ts) or not runs:
        return None
    root = inspect.unwrap(ctx.op.oracle)
    remote = getattr(root, "remote", None)  # a reference in a sandbox: searched there, found as data
    found = (
        remote_found(remote("placement")([[r.inputs, r.outs, r.refs64] for r in runs], ctx.dtype))
        if remote is not None
        else misplaced(root, runs, ctx.dtype)
    )
    if found is None:
        return None
    dt = str(ctx.dtype).removeprefix("torch.")
    return sig(
        "wrong-semantics",
        f"matches the reference with {found.mutant.change}, at {found.where}: run in {dt}, its error pattern "
        f"is the kernel's (over {len(runs)} trials, in ulps, at least: the kernel carries {found.beta:.2f} of "
        f"its deviation from the reference as written, which explains {found.rho**2:.0%} of the kernel's); it "
        f"differs from the kernel's output in {found.differ_mutant} of {found.elements} elements, the reference "
        f"as written in {found.differ_reference}, and its rms error is {found.err_ratio:.3g}x the reference's "
        "(within the bound, but the reference's casts place that rounding elsewhere); fix: the kernel, or, if a "
        "correct kernel may round there, write that rounding into the reference",
        mistake=f"{found.mutant.change}, at {found.where}",
        placement=found.mutant.row,
        differ_mistake=float(found.differ_mutant),
        differ_contract=float(found.differ_reference),
        pattern_coefficient=round(found.beta, 4),
        pattern_correlation=round(found.rho, 4),
    )


def remote_found(got: Any) -> Found | None:
    """A placement finding as a sandbox sent it (kcgate.sandbox.reference), checked as data."""
    if not isinstance(got, dict) or got.get("row") not in BY_NAME:
        return None
    try:
        m = CastMutant(str(got["row"]), str(got["change"])[:300], 0, lambda *a: None)
        return Found(m, str(got["where"])[:300], int(got["differ_mutant"]), int(got["differ_reference"]),
                     int(got["elements"]), float(got["err_ratio"]), float(got["beta"]), float(got["rho"]))  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


def _run(t: Any) -> Run | None:
    """A trial's inputs, its forward float outputs and their fp64 oracle's (a backward trial has both)."""
    if not t.inputs:
        return None
    if t.parts:
        names = [n for n, o in t.parts.items() if o.is_floating_point()]
        cmps = [t.cmps.get(OUTPUT + n) for n in names]
        outs = [t.parts[n] for n in names]
    else:
        one = t.tensors.get("out") if t.tensors else (t.out if not t.grad else None)
        cmps = [t.cmps.get("out") if t.cmps else (t.cmp if not t.grad else None)]
        outs = [one] if isinstance(one, torch.Tensor) and one.is_floating_point() else []
    if not outs or any(c is None for c in cmps):
        return None
    return Run(tuple(t.inputs), tuple(o.detach() for o in outs), tuple(c.ref for c in cmps))
