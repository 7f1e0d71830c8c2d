"""Explanations by mutating the reference: for a failed case no row of the diagnosis table names, each rule of
``kcgate mutate`` (kcgate.vocab.mutation_rules) is applied once to the reference (a custom op's, or the family's
oracle) and to the module-level functions it calls; a mutant whose output the kernel's matches within the
case's allowance explains the failure: "matches the reference with <= -> <, at line 12 of ref.py".

The search is bounded (``MAX_MUTANTS`` evaluations, ``MAX_SECONDS``), runs in fp64 on the worst trial's
inputs, and only ever adds words to a failure: a verdict never depends on it.
"""

from __future__ import annotations

import ast
import copy
import inspect
import math
import textwrap
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from kcgate.numerics.ops.base import upcast
from kcgate.numerics.outputs import reference_parts
from kcgate.vocab.mutation_rules import RULES, Where

MAX_MUTANTS = 200  # mutants evaluated at most per failed case
MAX_SECONDS = 10.0  # wall time spent on them at most
MAX_HELPERS = 4  # module-level functions the reference calls that are mutated too
# a mutant explains the output where the kernel's rms error against it is at most this share of its error
# against the reference (or every element is within the allowance): a custom op's generic allowance is
# tighter than a correct low-precision kernel's error, so the share is the test that carries across dtypes
MATCH_SHARE = 0.01


@dataclass(frozen=True)
class Mutant:
    rule: str
    change: str  # what changed, in words
    where: str  # "line 12 of attention.py (in _attn)"
    fn: Callable[..., Any]


def _source(fn: Callable[..., Any]) -> tuple[ast.FunctionDef, str, int] | None:
    """The function's definition (dedented and parsed), its file and first line; None for a lambda, a builtin
    or a function without source."""
    try:
        lines, start = inspect.getsourcelines(fn)
        path = inspect.getsourcefile(fn) or "?"
    except (OSError, TypeError):
        return None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, start - 1)  # the file's own line numbers, in the summary and any traceback
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef) or node.name != getattr(fn, "__name__", ""):
        return None
    return node, path, start


def _walk(node: ast.AST, where: Where) -> Iterator[tuple[ast.AST, Where]]:
    """Every node with where it sits (the parts of ``Where`` the rules read: function, test, call argument)."""
    yield node, where
    if isinstance(node, ast.FunctionDef):
        where = Where((*where.functions, node.name))
    for name, value in ast.iter_fields(node):
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.AST):
                test = isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)) and name == "test"
                arg = isinstance(node, ast.Call) and name in ("args", "keywords")
                yield from _walk(
                    child,
                    replace(
                        where,
                        in_test=where.in_test or test,
                        call_arg=arg and not isinstance(child, ast.keyword),
                    ),
                )


def _mutants_of(fn: Callable[..., Any], root: Callable[..., Any]) -> Iterator[Mutant]:
    """Each single rule application to ``fn``'s body, compiled into a version of ``root`` that uses it."""
    found = _source(fn)
    if found is None:
        return
    node, path, start = found
    if any(isinstance(n, ast.While) for n in ast.walk(node)):
        return  # a constant changed in a while loop's test may never end: the search must not hang a case
    space = dict(getattr(fn, "__globals__", {}))
    try:
        space.update(inspect.getclosurevars(fn).nonlocals)
    except (TypeError, ValueError):
        return
    for target, where in _walk(node, Where()):
        if target is node:
            continue
        for rule in RULES:
            for new, change in rule.transform(target, where):
                tree = _replaced(node, target, new)
                try:
                    code = compile(ast.fix_missing_locations(ast.Module([tree], [])), path, "exec")
                    ns = dict(space)
                    exec(code, ns)  # the reference's own source, one rule applied
                except Exception:  # a mutant that does not compile explains nothing
                    continue
                line = getattr(target, "lineno", start)
                here = f"line {line} of {path.rsplit('/', 1)[-1]} (in {node.name})"
                yield Mutant(rule.name, change, here, _rebind(root, fn, ns[node.name]))


def _replaced(node: ast.FunctionDef, target: ast.AST, new: ast.AST) -> ast.FunctionDef:
    """A deep copy of ``node`` with ``target`` replaced by ``new``."""
    memo: dict[int, Any] = {}
    out = copy.deepcopy(node, memo)
    mark = memo[id(target)]

    class Swap(ast.NodeTransformer):
        def visit(self, n: ast.AST) -> Any:
            return copy.deepcopy(new) if n is mark else self.generic_visit(n)

    result = Swap().visit(out)
    assert isinstance(result, ast.FunctionDef)
    return result


def _rebind(
    root: Callable[..., Any], fn: Callable[..., Any], mutated: Callable[..., Any]
) -> Callable[..., Any]:
    """``root`` with ``fn`` replaced by ``mutated``: itself where fn is root, else root seeing the mutant."""
    if fn is root:
        return mutated
    space = dict(root.__globals__)
    space[fn.__name__] = mutated
    return types.FunctionType(root.__code__, space, root.__name__, root.__defaults__, root.__closure__)


def _helpers(fn: Callable[..., Any]) -> list[types.FunctionType]:
    """Module-level Python functions of the reference's own file that it calls by name."""
    found = _source(fn)
    if found is None:
        return []
    node, path, _ = found
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            g = fn.__globals__.get(n.func.id)
            if isinstance(g, types.FunctionType) and inspect.getsourcefile(g) == path and g not in out:
                out.append(g)
    return out[:MAX_HELPERS]


@dataclass(frozen=True)
class Search:
    """What the bounded search found: the mutant that matches (with its worst element's ratio), or None, and
    how many mutants it tried (and whether it stopped at its bound)."""

    found: Mutant | None
    ratio: float
    share: float  # rms error against the mutant over rms error against the reference
    tried: int
    stopped: bool


def explain(ctx: Any, trial: Any) -> Search | None:
    """The first mutant of the reference whose output the trial's deciding output matches within the
    allowance; None where no search applies (a gradient decides, or the reference has no source). A reference
    in a sandbox (``remote``) is searched there, and its finding comes back as data."""
    root = inspect.unwrap(ctx.op.oracle)  # a custom op's oracle wraps its reference (run in fp64)
    if trial.grad or trial.out is None or trial.cmp is None:
        return None  # a gradient would need the mutant's autograd: the forward only
    out = trial.out.detach().to("cpu", torch.float64)
    ref, allowed = trial.cmp.ref.to(torch.float64), trial.cmp.allowed.to(torch.float64)
    name, outputs = getattr(trial, "output", ""), list(ctx.contract.outputs)
    remote = getattr(root, "remote", None)
    if remote is not None:
        return remote_search(remote("explain")(upcast(trial.inputs), out, ref, allowed, name, outputs))
    return search(root, upcast(trial.inputs), out, ref, allowed, name, outputs)


def search(
    root: Any, up: Any, out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor, name: str, outputs: Any
) -> Search | None:
    """The bounded search of ``explain`` over the mutants of ``root`` (a function with source), on the fp64
    inputs ``up``: the kernel's fp64 output ``out`` (``ref``: the reference's) against each mutant's, within
    ``allowed``; ``name``: the output of several that decides (``outputs``: the contract's names)."""
    if not isinstance(root, types.FunctionType) or _source(root) is None:
        return None
    own = _rms(out - ref)
    pick = (lambda r: dict(reference_parts(r, tuple(outputs)))[name]) if name else (lambda r: r)
    deadline, tried = time.monotonic() + MAX_SECONDS, 0
    fns: list[types.FunctionType] = [root, *_helpers(root)]
    for fn in fns:
        for m in _mutants_of(fn, root):
            if tried >= MAX_MUTANTS or time.monotonic() > deadline:
                return Search(None, math.inf, math.inf, tried, True)
            tried += 1
            ratio, err = _against(m, up, out, allowed, pick)
            share = err / own if own > 0 else math.inf
            if ratio <= 1 or share <= MATCH_SHARE:
                return Search(m, ratio, share, tried, False)
    return Search(None, math.inf, math.inf, tried, False)


def remote_search(got: Any) -> Search | None:
    """A search's finding as a sandbox sent it (kcgate.sandbox.reference), checked as data."""
    if not isinstance(got, dict):
        return None
    m = got.get("found")
    found = (
        Mutant(
            str(m.get("rule"))[:100], str(m.get("change"))[:300], str(m.get("where"))[:300], lambda *a: None
        )
        if isinstance(m, dict)
        else None
    )
    return Search(found, _num(got.get("ratio")), _num(got.get("share")), int(_num(got.get("tried"), 0)),
                  bool(got.get("stopped")))  # fmt: skip


def _num(v: Any, default: float = math.inf) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _against(
    m: Mutant, up: Any, out: torch.Tensor, allowed: torch.Tensor, pick: Callable[[Any], Any]
) -> tuple[float, float]:
    """(the worst element's error over its allowance, the rms error) of the output against the mutant's."""
    try:
        with torch.no_grad():
            alt = torch.as_tensor(pick(m.fn(*up))).to(torch.float64)
    except Exception:  # a mutant that raises on these inputs explains nothing
        return math.inf, math.inf
    if alt.shape != out.shape or not bool(alt.isfinite().all()) or not out.numel():
        return math.inf, math.inf
    r = ((out - alt).abs() / allowed.expand_as(out).clamp_min(1e-300)).nan_to_num(nan=math.inf)
    return float(r.max()), _rms(out - alt)


def _rms(e: torch.Tensor) -> float:
    return float(e.pow(2).mean().sqrt()) if e.numel() and bool(e.isfinite().all()) else math.inf
