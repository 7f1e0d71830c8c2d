"""Mutation calibration (``kcgate mutate``): how many realistic bugs in a repository's *own* kernels would its
contracts catch?

For each contract whose kernel is Python source, the kernel's module is found statically (as the contract
loader finds it) and mutated by the rules of ``kcgate.vocab.mutation_rules``, one rule application at
one site per mutant, on the kernel's definition and what it calls in its module. Each mutant is written as a
module of its own into a directory put first on the project's paths, and the contract's cases run on it in
the same isolated workers as ``kcgate run`` (``make_executor``): a mutant that crashes or hangs costs one
case. A mutant is killed when a case the unmutated kernel passes does not pass. The unmutated kernel runs
first over the same seeds: its failing cases are the false alarms, and they kill nothing.

A mutant whose every case measures exactly as the original's (status and every metric) is *equivalent* and
left out of the kill rate; one that passes with errors at most ``ROUNDING`` times the original's on every case
*survives within rounding* and is reported apart. Results are cached by the module's source hash, the
contract, the rule and the site. Torch-free: the kernels run in the workers (advice runs in process).
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import hashlib
import hmac
import importlib
import json
import os
import random
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kcgate.calibration.advice import advise
from kcgate.contracts.locate import python_source
from kcgate.contracts.records import Contract, Project
from kcgate.errors import IOFault
from kcgate.execution.executors import InProcessExecutor
from kcgate.plan import Case, make_plan
from kcgate.results.journal import cache_home, read_key, write_key
from kcgate.results.model import CaseResult, Status
from kcgate.util import bounded
from kcgate.util.pysource import decode_source, source_encoding
from kcgate.vocab.mutation_rules import RULES, Rule, Where

BASE_SEED = 0  # like calibrate: a proof about the contract, reproducible by default
ROUNDING = 2.0  # a surviving mutant whose error is at most this times the original's differs within rounding
CACHE_FILE = "mutate.json"
CACHE_VERSION = 2  # 2: signed, outcomes only (a diff is always made from the module as it is now)
MAX_CACHE_BYTES = 64 << 20  # read capped while reading
MAX_MODULE_BYTES = 1 << 20  # a kernel module larger than this is not mutated (the report says so)
_CACHE_DOMAIN = b"kcgate-mutate-cache\0"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
PREFIX = "kcgate_mutant_"  # the synthetic modules' names: never a real module's

# a mutant's outcome
KILLED, SURVIVED, ROUNDED, EQUIVALENT, NOT_RUN = (
    "killed",
    "survived",
    "within-rounding",
    "equivalent",
    "not-run",
)
OUTCOMES = (KILLED, SURVIVED, ROUNDED, EQUIVALENT, NOT_RUN)


# ---- the records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    """One rule applied at one site of one contract's kernel module."""

    contract_id: str
    rule: str
    family: str
    site: str  # "L<line>C<col>-L<end line>C<end col>#<variant>" in the kernel's module
    line: int
    change: str  # what changed, in words
    diff: str  # unified diff against the unmutated module
    key: str  # cache key: source hash + contract + rule + site (+ seed)
    source: str = field(default="", repr=False, compare=False)  # the mutated module (not in the report)

    @property
    def module(self) -> str:
        return PREFIX + self.key


@dataclass(frozen=True)
class MutantResult:
    mutant: Mutant
    outcome: str  # one of OUTCOMES
    cases_run: int = 0
    killed_by: str = ""  # the first case that killed it: "<case id>: <status> <diagnosis or message>"
    budget_used: float | None = None  # the largest over its cases
    advice: tuple[str, ...] = ()
    advice_note: str = ""  # why there is no advice ("not measured: budget", ...)
    cached: bool = False

    def to_json(self) -> dict[str, Any]:
        m = self.mutant
        return {
            "contract_id": m.contract_id,
            "rule": m.rule,
            "family": m.family,
            "site": m.site,
            "line": m.line,
            "change": m.change,
            "diff": m.diff,
            "key": m.key,
            "outcome": self.outcome,
            "cases_run": self.cases_run,
            "killed_by": self.killed_by,
            "budget_used": _finite(self.budget_used),
            "advice": list(self.advice),
            "advice_note": self.advice_note,
            "cached": self.cached,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MutantResult:
        m = Mutant(
            d["contract_id"],
            d["rule"],
            d["family"],
            d["site"],
            int(d["line"]),
            d["change"],
            d["diff"],
            d["key"],
        )
        return cls(
            m,
            d["outcome"],
            int(d.get("cases_run", 0)),
            d.get("killed_by", ""),
            d.get("budget_used"),
            tuple(d.get("advice", ())),
            d.get("advice_note", ""),
            bool(d.get("cached", False)),
        )


@dataclass(frozen=True)
class ContractReport:
    """One contract: its kernel's module, the unmutated kernel's false alarms, and its mutants."""

    contract_id: str
    klass: str
    kernel: str
    module_path: str = ""
    source_hash: str = ""
    cases: int = 0
    false_alarms: int | None = None  # cases the unmutated kernel does not pass (None: not run, all cached)
    mutants: tuple[MutantResult, ...] = ()
    skipped: str = ""  # why this contract has no mutants

    def count(self, outcome: str) -> int:
        return sum(1 for m in self.mutants if m.outcome == outcome)

    def to_json(self) -> dict[str, Any]:
        return {
            "contract_id": self.contract_id,
            "class": self.klass,
            "kernel": self.kernel,
            "module_path": self.module_path,
            "source_hash": self.source_hash,
            "cases": self.cases,
            "false_alarms": self.false_alarms,
            "skipped": self.skipped,
            "counts": {o: self.count(o) for o in OUTCOMES},
            "kill_rate": kill_rate(self.mutants),
            "mutants": [m.to_json() for m in self.mutants],
        }


@dataclass(frozen=True)
class MutationReport:
    contracts: tuple[ContractReport, ...]
    seed: int
    budget_s: float | None
    elapsed_s: float
    sampled: bool  # the budget ran out: the mutants run are a seeded random sample

    @property
    def mutants(self) -> tuple[MutantResult, ...]:
        return tuple(m for c in self.contracts for m in c.mutants)

    def to_json(self) -> dict[str, Any]:
        ms = self.mutants
        by_rule = {
            r.name: {
                "family": r.family,
                "bug": r.bug,
                "counts": {
                    o: sum(1 for m in ms if m.mutant.rule == r.name and m.outcome == o) for o in OUTCOMES
                },
                "kill_rate": kill_rate([m for m in ms if m.mutant.rule == r.name]),
            }
            for r in RULES
        }
        return {
            "kind": "kcgate-mutation",
            "version": CACHE_VERSION,
            "seed": self.seed,
            "budget_s": self.budget_s,
            "elapsed_s": round(self.elapsed_s, 3),
            "sampled": self.sampled,
            "counts": {o: sum(1 for m in ms if m.outcome == o) for o in OUTCOMES},
            "kill_rate": kill_rate(ms),
            "false_alarms": sum(c.false_alarms or 0 for c in self.contracts),
            "rules": by_rule,
            "contracts": [c.to_json() for c in self.contracts],
        }


def kill_rate(results: Any) -> float | None:
    """Killed over killed + survived: equivalent mutants, those within rounding and those not run are out."""
    killed = sum(1 for m in results if m.outcome == KILLED)
    counted = killed + sum(1 for m in results if m.outcome == SURVIVED)
    return round(killed / counted, 4) if counted else None


def _finite(x: float | None) -> float | None:
    return None if x is None or x != x or x in (float("inf"), float("-inf")) else x


# ---- locating and scoping the kernel's source (contracts.locate.python_source finds it) ----------------


def _owned(path: Path, project: Project) -> bool:
    """The module is the project's own: under its contracts file's directory or one of [project].paths.
    An installed package (torch's own functions) is not mutated."""
    roots = [project.path.parent, *project.paths]
    here = path.resolve()
    return any(here.is_relative_to(r.resolve()) for r in roots)


def _defines(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def scope(tree: ast.Module, name: str) -> list[ast.stmt]:
    """The top-level definitions the kernel ``name`` reaches in its module: itself, then every function,
    class or assignment it names (a Triton kernel its launcher calls, an autograd Function it applies)."""
    defs = {n: s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom)) for n in _defines(s)}
    seen: list[ast.stmt] = []
    todo = [name]
    while todo:
        stmt = defs.get(todo.pop())
        if stmt is None or any(stmt is s for s in seen):
            continue
        seen.append(stmt)
        todo += [n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id in defs]
    return sorted(seen, key=lambda s: s.lineno)


def _rescales(fn: ast.AST) -> frozenset[str]:
    """Names a function assigns from ``exp(a - b)`` / ``exp2(a - b)``: an online softmax's rescale factors."""
    out = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            v = n.value
            if isinstance(v, ast.Call) and getattr(v.func, "attr", getattr(v.func, "id", "")) in (
                "exp",
                "exp2",
            ):
                if v.args and isinstance(v.args[0], ast.BinOp) and isinstance(v.args[0].op, ast.Sub):
                    out.add(n.targets[0].id)
    return frozenset(out)


def walk(stmts: list[ast.stmt]) -> Iterator[tuple[ast.AST, Where]]:
    """Every node under ``stmts`` in source order, with where it sits."""

    def visit(node: ast.AST, where: Where) -> Iterator[tuple[ast.AST, Where]]:
        yield node, where
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            where = Where((*where.functions, node.name), rescales=_rescales(node))
        for name, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            for child in children:
                if not isinstance(child, ast.AST):
                    continue
                test = isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)) and name == "test"
                arg = (
                    isinstance(node, ast.Call)
                    and name in ("args", "keywords")
                    or isinstance(node, ast.keyword)
                )
                yield from visit(
                    child,
                    replace(
                        where,
                        in_test=where.in_test or test,
                        call_arg=arg and not isinstance(child, ast.keyword),
                    ),
                )

    for stmt in stmts:
        yield from visit(stmt, Where())


# ---- generating mutants -----------------------------------------------------------------------------

# binding strength of an expression (Python's operator precedence, loosest first): a replacement needs
# parentheses only when it binds more loosely than the node it replaces
_BINOP = {ast.Add: 10, ast.Sub: 10, ast.Mult: 11, ast.Div: 11, ast.FloorDiv: 11, ast.Mod: 11, ast.MatMult: 11}
_BINOP.update({ast.BitOr: 6, ast.BitXor: 7, ast.BitAnd: 8, ast.LShift: 9, ast.RShift: 9, ast.Pow: 13})


def _binding(node: ast.AST) -> int:
    if isinstance(node, (ast.Lambda, ast.NamedExpr)):
        return 0
    if isinstance(node, ast.IfExp):
        return 1
    if isinstance(node, ast.BoolOp):
        return 2 if isinstance(node.op, ast.Or) else 3
    if isinstance(node, ast.UnaryOp):
        return 4 if isinstance(node.op, ast.Not) else 12
    if isinstance(node, ast.Compare):
        return 5
    if isinstance(node, ast.BinOp):
        return _BINOP.get(type(node.op), 0)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and node.value < 0:
        return 12  # printed with a unary minus
    return 14  # atoms: names, attributes, calls, subscripts, constants, displays


def _offsets(text: bytes) -> list[int]:
    starts, at = [0], 0
    for line in text.splitlines(keepends=True):
        at += len(line)
        starts.append(at)
    return starts


def splice(source: str, node: ast.AST, new: ast.AST) -> str:
    """``source`` with ``node``'s text replaced by ``new`` (parenthesized when it binds more loosely than
    ``node``); AST offsets are UTF-8 byte offsets, so the splice is done on bytes."""
    raw = source.encode("utf-8")
    lines = _offsets(raw)
    start = lines[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
    end = lines[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
    text = ast.unparse(ast.fix_missing_locations(new))
    if isinstance(new, ast.expr) and _binding(new) < _binding(node):
        text = f"({text})"
    return (raw[:start] + text.encode("utf-8") + raw[end:]).decode("utf-8")


def absolute_imports(source: str, module: str, is_package: bool) -> str:
    """Relative imports made absolute: the mutant is imported under another name, outside its package."""
    tree = ast.parse(source)
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level), key=lambda n: -n.lineno
    ):
        base = package[: len(package) - node.level + 1]
        absolute = ast.ImportFrom(
            module=".".join([*base, *([node.module] if node.module else [])]), names=node.names, level=0
        )
        source = splice(source, node, absolute)
    return source


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def contract_hash(c: Contract) -> str:
    return hashlib.sha256(json.dumps(c.to_json(), sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True, eq=False)
class Site:
    """One rule applied at one node, not yet spliced into the module: listing every site costs a walk of
    the tree; splicing, parsing and diffing are paid only for a mutant that runs (or is reported cached)."""

    contract_id: str
    rule: Rule
    node: ast.AST
    new: ast.AST
    change: str
    site: str
    line: int
    key: str

    def unrun(self) -> Mutant:
        """The mutant as a not-run row names it: no text, no diff."""
        r = self.rule
        return Mutant(self.contract_id, r.name, r.family, self.site, self.line, self.change, "", self.key)


def sites(
    source: str, name: str, contract_id: str = "", rules: tuple[Rule, ...] = RULES, key_salt: str = ""
) -> list[Site]:
    """Every rule application on the definition ``name`` (and what it reaches), one per rule, span and
    variant, without splicing any."""
    out, keys = [], set()
    for node, where in walk(scope(ast.parse(source), name)):
        for rule in rules:
            for k, (new, change) in enumerate(rule.transform(node, where)):
                line, col = node.lineno, node.col_offset  # type: ignore[attr-defined]
                # the span, not only its start: `a + b + c` holds two sums that start at one column
                site = f"L{line}C{col}-L{node.end_lineno}C{node.end_col_offset}#{k}"  # type: ignore[attr-defined]
                key = hashlib.sha256(f"{key_salt}|{contract_id}|{rule.name}|{site}".encode()).hexdigest()[:16]
                if key not in keys:  # the same rule at the same span twice would be the same mutant
                    keys.add(key)
                    out.append(Site(contract_id, rule, node, new, change, site, line, key))
    return out


def materialize(source: str, s: Site, label: str = "kernel.py", check: bool = True) -> Mutant | None:
    """The mutant's module and its diff; None when it does not parse (``check``) or changes nothing."""
    text = splice(source, s.node, s.new)
    if text == source:
        return None
    if check:
        try:
            ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
    diff = "".join(
        difflib.unified_diff(
            source.splitlines(keepends=True), text.splitlines(keepends=True), f"a/{label}", f"b/{label}", n=1
        )
    )
    r = s.rule
    return Mutant(s.contract_id, r.name, r.family, s.site, s.line, s.change, diff, s.key, text)


def generate(
    source: str,
    name: str,
    contract_id: str = "",
    rules: tuple[Rule, ...] = RULES,
    key_salt: str = "",
    label: str = "kernel.py",
) -> list[Mutant]:
    """Every mutant of the definition ``name`` (and what it reaches) in ``source``: one rule, one site,
    one variant each; mutants whose text repeats an earlier one are left out. (Spliced all at once: for
    tests and small modules; ``mutate`` materializes only what it runs.)"""
    seen, out = {source}, []
    for s in sites(source, name, contract_id, rules, key_salt):
        m = materialize(source, s, label)
        if m is not None and m.source not in seen:
            seen.add(m.source)
            out.append(m)
    return out


# ---- running ----------------------------------------------------------------------------------------


@dataclass
class _Target:
    """A contract to mutate, with what its runs need (mutable: filled in as its mutants are run)."""

    project: Project
    contract: Contract
    report: ContractReport
    sites: list[Site]
    salt: str = ""  # source hash + contract hash + seed: what every cache key of this contract starts from
    cases: list[Case] | None = None
    original: list[CaseResult] | None = None
    source: str = ""  # the module, imports made absolute
    label: str = "kernel.py"
    encoding: str = "utf-8"  # the module's own: a mutant is written in it, its coding line kept true
    texts: set[bytes] = field(default_factory=set)  # digests of the mutants made so far (and the module's)
    dropped: set[str] = field(default_factory=set)  # keys of sites that make no new, parseable module

    @property
    def original_key(self) -> str:
        return hashlib.sha256(f"{self.salt}|original".encode()).hexdigest()[:16]

    @property
    def mutants(self) -> list[Mutant]:
        """Every mutant, spliced (``generate``'s answer; ``mutate`` itself never asks for all of them)."""
        return [m for s in self.sites if (m := self.make(s)) is not None]

    def make(self, s: Site, check: bool = True) -> Mutant | None:
        """The mutant of one site, or None (and the site dropped) when its text is not new or does not parse."""
        if s.key in self.dropped:
            return None
        m = materialize(self.source, s, self.label, check)
        digest = hashlib.sha256(m.source.encode()).digest() if m is not None else b""
        if m is None or (check and digest in self.texts):
            self.dropped.add(s.key)
            return None
        self.texts.add(digest)
        return m


def prepare(
    project: Project, c: Contract, rules: tuple[Rule, ...], seed: int, installed: bool = False
) -> _Target:
    """The contract's kernel module, located statically, and its mutation sites (none, with why, when the
    kernel is not Python source, is over ``MAX_MODULE_BYTES``, or, unless ``installed``, a module outside
    the project)."""
    base = ContractReport(c.id, c.klass, c.kernel)
    module, _, name = c.kernel.partition(":")
    path = python_source(module, project.paths)
    if path is None:
        return _Target(project, c, replace(base, skipped=f"cannot find module {module!r}"), [])
    if not installed and not _owned(path, project):
        outside = (
            f"{module} is outside the project's directory and [project].paths (an installed package; "
            "--include-installed mutates it)"
        )
        return _Target(project, c, replace(base, module_path=str(path), skipped=outside), [])
    where = replace(base, module_path=str(path))
    try:
        raw = bounded.read_capped(path, MAX_MODULE_BYTES)
        encoding = source_encoding(raw)
        text = decode_source(raw)
        norm = absolute_imports(text, module, path.name == "__init__.py")
        h = source_hash(norm)
        salt = f"{CACHE_VERSION}|{h}|{contract_hash(c)}|{seed}"
        found = sites(norm, name, c.id, rules, salt)
    except bounded.Refused as exc:
        fix = "move the kernel into a smaller module" if "cap" in str(exc) else "make it a regular file"
        return _Target(project, c, replace(where, skipped=f"not read: {path.name} {exc}; {fix}"), [])
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        return _Target(project, c, replace(where, skipped=f"cannot read: {exc}"), [])
    except (
        RecursionError,
        MemoryError,
    ):  # the parser's and the walk's depth: expressions nested by the thousand
        return _Target(project, c, replace(where, skipped="cannot read: expressions nested too deeply"), [])
    skipped = ""
    if not found:
        defined = any(name in _defines(s) for s in ast.parse(norm).body)
        skipped = (
            f"no rule applies to {name!r} in {path.name}"
            if defined
            else f"{name!r} is not defined in {path.name}"
        )
    report = replace(where, source_hash=h, skipped=skipped)
    texts = {hashlib.sha256(norm.encode()).digest()}
    return _Target(
        project, c, report, found, salt, source=norm, label=path.name, encoding=encoding, texts=texts
    )


class Cache:
    """Mutant outcomes by key, in one JSON file signed with a per-user key kept outside it (in kcgate's
    cache, as the journal's keys are): an edited, forged, damaged or unsigned file is a cold cache, and an
    entry of the wrong types is a miss. Written once at the end of a run, through a fresh file and a rename
    (never through a symlink planted at its path)."""

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / CACHE_FILE if directory else None
        self.key = _cache_key() if directory else None
        self.entries: dict[str, dict[str, Any]] = self._load()

    def _load(self) -> dict[str, dict[str, Any]]:
        if self.path is None or self.key is None or not os.path.lexists(self.path):
            return {}
        try:
            doc = bounded.loads_json(bounded.read_capped(self.path, MAX_CACHE_BYTES))
        except ValueError:  # Refused, invalid JSON or UTF-8: a damaged cache is a cold cache
            return {}
        if not isinstance(doc, dict) or doc.get("version") != CACHE_VERSION:
            return {}
        entries, mac = doc.get("entries"), doc.get("mac")
        if not isinstance(entries, dict) or not isinstance(mac, str):
            return {}
        if not hmac.compare_digest(mac, _sign(self.key, entries)):
            return {}
        return {k: v for k, v in entries.items() if isinstance(v, dict)}

    def get(self, key: str) -> MutantResult | None:
        """The cached outcome of a mutant (its ``mutant`` a placeholder the caller replaces), or None."""
        d = self.entries.get(key)
        try:
            return _outcome(d) if d else None
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, r: MutantResult) -> None:
        if r.outcome != NOT_RUN:  # a cached one too: the advice measured this run is kept
            self.entries[r.mutant.key] = {
                "outcome": r.outcome,
                "cases_run": r.cases_run,
                "killed_by": r.killed_by,
                "budget_used": _finite(r.budget_used),
                "advice": list(r.advice),
                "advice_note": r.advice_note,
            }

    def original(self, key: str) -> tuple[int, int] | None:
        """(cases, false alarms) of an unmutated kernel, when cached."""
        d = self.entries.get(key)
        if not isinstance(d, dict):
            return None
        cases, alarms = d.get("cases"), d.get("false_alarms")
        ok = all(type(v) is int and 0 <= v for v in (cases, alarms))
        return (cases, alarms) if ok and alarms <= cases else None  # type: ignore[operator, return-value]

    def put_original(self, key: str, cases: int, false_alarms: int) -> None:
        self.entries[key] = {"cases": cases, "false_alarms": false_alarms}

    def save(self) -> None:
        if self.path is None:
            return
        doc = {"version": CACHE_VERSION, "entries": self.entries, "mac": _sign(self.key or b"", self.entries)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _write_fresh(self.path, json.dumps(doc, sort_keys=True).encode())
        except OSError as exc:
            raise IOFault(self.path, exc, "make the cache directory writable, or pass --no-cache") from None


def _outcome(d: dict[str, Any]) -> MutantResult:
    """A cached entry, its types checked (a wrong one is a miss, never an error)."""
    outcome, advice, budget = d["outcome"], d.get("advice", []), d.get("budget_used")
    if outcome not in OUTCOMES or outcome == NOT_RUN or not isinstance(advice, list):
        raise ValueError(f"not an outcome: {outcome!r}")
    texts = (d.get("killed_by", ""), d.get("advice_note", ""), *advice)
    if not all(isinstance(t, str) for t in texts) or type(d.get("cases_run", 0)) is not int:
        raise TypeError("a field of the wrong type")
    if budget is not None and type(budget) not in (int, float):
        raise TypeError("budget_used is not a number")
    placeholder = Mutant("", "", "", "", 0, "", "", "")
    return MutantResult(
        placeholder, outcome, d.get("cases_run", 0), texts[0], budget, tuple(advice), texts[1], cached=True
    )


def _cache_key() -> bytes | None:
    """The per-user key the cache is signed with, made on first use; None where it cannot be kept."""
    path = cache_home() / "mutate-cache.key"
    key = read_key(path)
    if key is None:
        with contextlib.suppress(OSError):
            write_key(path, secrets.token_bytes(32))
            key = read_key(path)
    return key


def _sign(key: bytes | None, entries: dict[str, Any]) -> str:
    blob = json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key or b"", _CACHE_DOMAIN + blob, hashlib.sha256).hexdigest() if key else ""


def _write_fresh(path: Path, data: bytes) -> None:
    """``data`` into a new file beside ``path`` (exclusive create, no symlink followed), renamed over it."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)  # replaces a symlink at path, never its target
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


Factory = Callable[[Project], Any]  # a project (the mutants' directory on its paths) -> an executor


def mutate(
    projects: list[Project],
    make: Factory,
    *,
    keyword: str | None = None,
    rules: tuple[Rule, ...] = RULES,
    seed: int = BASE_SEED,
    budget_s: float | None = None,
    cache_dir: Path | None = None,
    advice: bool = True,
    advise_all: bool = False,
    device: str = "cpu",
    max_mutants: int | None = None,
    installed: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> MutationReport:
    """Mutate every selected contract's kernel and run the contract on each mutant (see the module doc).

    Uncached mutants run in a seeded random order until ``budget_s`` is spent (or ``max_mutants`` have
    run): the rest are ``not-run``, and the report says it is a sample. ``installed``: mutate kernels in
    installed packages too (a third-party library's kernels under its own contracts).
    """
    t0 = clock()
    deadline = t0 + budget_s if budget_s else None
    cache = Cache(cache_dir)
    with tempfile.TemporaryDirectory(prefix="kcgate-mutants-") as tmp:
        here = Path(tmp)
        targets = [
            prepare(p, c, rules, seed, installed)
            for p in projects
            for c in p.contracts
            if _selected(c, keyword)
        ]
        runs = {id(p): replace(p, paths=(here, *p.paths)) for p in projects}  # the mutants' modules first
        for t in targets:
            t.project = runs[id(t.project)]
        order = [(t, site) for t in targets for site in t.sites]
        random.Random(seed).shuffle(order)
        sample = _Sample(here, make, seed, deadline, max_mutants, clock)
        results = sample.run(order, cache)
        if advice:
            results = _advise_survivors(targets, results, seed, device, deadline, clock, advise_all, sample)
        reports = tuple(_report(t, results, cache) for t in targets)
        for r in results.values():
            cache.put(r)
        cache.save()
    return MutationReport(reports, seed, budget_s, clock() - t0, sample.sampled)


class _Sample:
    """Runs mutants in the seeded order until the deadline or ``max_mutants``: each mutant is spliced and
    written only when it comes up to run, so neither bounds only the running (a 1,000-line kernel once
    wrote 2,937 files before its one mutant ran). One executor per project, started at its first mutant."""

    def __init__(
        self,
        here: Path,
        make: Factory,
        seed: int,
        deadline: float | None,
        max_mutants: int | None,
        clock: Callable[[], float],
    ) -> None:
        self.here, self.make, self.seed, self.deadline = here, make, seed, deadline
        self.max_mutants, self.clock = max_mutants, clock
        self.sampled, self.ran, self.tick = False, 0, 0
        self.base_ns = time.time_ns()

    def run(self, order: list[tuple[_Target, Site]], cache: Cache) -> dict[str, MutantResult]:
        results: dict[str, MutantResult] = {}
        executors: dict[int, Any] = {}
        try:
            for t, site in order:
                r = self._one(t, site, cache, executors)
                if r is not None:
                    results[site.key] = r
        finally:
            for e in executors.values():
                e.close()
        return results

    def _one(self, t: _Target, site: Site, cache: Cache, executors: dict[int, Any]) -> MutantResult | None:
        hit = cache.get(site.key)
        if hit is not None:  # the outcome from the cache, the mutant (and its diff) from the module now
            m = t.make(site, check=False)
            return replace(hit, mutant=m) if m is not None else None
        if self._spent():
            self.sampled = True
            return MutantResult(site.unrun(), NOT_RUN)
        m = t.make(site)
        if m is None:
            return None
        self.write(m, t.encoding)
        executor = executors.get(id(t.project))
        if executor is None:
            executor = executors[id(t.project)] = self.make(t.project)
        self.ran += 1
        return run_mutant(t, m, executor, self.seed)

    def _spent(self) -> bool:
        late = self.deadline is not None and self.clock() >= self.deadline
        return late or (self.max_mutants is not None and self.ran >= self.max_mutants)

    def write(self, m: Mutant, encoding: str) -> None:
        """The mutant's module, in the kernel module's encoding. The directory's mtime is then set to a value
        it never had: a worker's import system re-lists a directory only when its mtime changes, and files
        written within one clock tick would otherwise stay unseen."""
        # always afresh (exclusive create, no symlink followed): a file a mutant planted under the next
        # mutant's name (the names are predictable) is replaced, never run or written through
        _write_fresh(self.here / f"{m.module}.py", m.source.encode(encoding))
        self.tick += 1
        stamp = self.base_ns + self.tick * 1_000_000_000
        os.utime(self.here, ns=(stamp, stamp))
        importlib.invalidate_caches()  # this process too (the advice runs here)


def _report(t: _Target, results: dict[str, MutantResult], cache: Cache) -> ContractReport:
    """The contract's report; the unmutated kernel's cases and false alarms as run, else as cached."""
    if t.original is not None:
        cases, alarms = len(t.original), sum(1 for r in t.original if r.status != Status.PASS)
        cache.put_original(t.original_key, cases, alarms)
        counted: tuple[int, int | None] = (cases, alarms)
    else:
        counted = cache.original(t.original_key) or (0, None)
    skipped = t.report.skipped
    if counted[0] and counted[0] == counted[1]:
        skipped = f"the unmutated kernel passes none of its {counted[0]} case(s): no mutant can be judged"
    mutants = tuple(results[s.key] for s in t.sites if s.key in results)  # dropped sites: no row
    return replace(t.report, cases=counted[0], false_alarms=counted[1], mutants=mutants, skipped=skipped)


def _selected(c: Contract, keyword: str | None) -> bool:
    if not keyword:
        return True
    return any(k.strip() and (k.strip() in c.id or k.strip() in c.klass) for k in keyword.split(" or "))


def _single(t: _Target) -> Project:
    return replace(t.project, contracts=(t.contract,))


def _run_original(t: _Target, executor: Any, seed: int) -> list[CaseResult]:
    if t.original is None:
        t.cases = make_plan(_single(t), seed, executor.default_shapes(), boundary=True)
        t.original = [executor.run(case) for case in t.cases]
    return t.original


def run_mutant(t: _Target, m: Mutant, executor: Any, seed: int) -> MutantResult:
    """The contract's cases on the mutant, in plan order, stopping at the first kill."""
    original = _run_original(t, executor, seed)
    cases = t.cases or []
    if not any(r.status == Status.PASS for r in original):
        return MutantResult(m, NOT_RUN, killed_by="the unmutated kernel passes no case: nothing can kill")
    got = []
    for case, before in zip(cases, original):
        r = executor.run(case, f"{m.module}:{t.contract.kernel.partition(':')[2]}")
        got.append(r)
        if before.status == Status.PASS and r.status != Status.PASS:
            return MutantResult(m, KILLED, len(got), _why(r), _worst_budget(got))
    return MutantResult(m, classify(original, got), len(got), "", _worst_budget(got))


def _why(r: CaseResult) -> str:
    s = r.signature
    detail = f"{s.cause}: {s.summary}" if s is not None else (r.message.splitlines() or [""])[0][:200]
    return f"{r.case_id}: {r.status} {detail}".rstrip()


def _worst_budget(results: list[CaseResult]) -> float | None:
    known = [r.metrics.budget_used for r in results if r.metrics.budget_used is not None]
    return max(known, default=None)


def _measured(r: CaseResult) -> tuple[Any, ...]:
    m = r.metrics
    return (
        r.status,
        m.budget_used,
        m.max_abs_err,
        m.max_rel_err,
        m.max_ulp,
        m.mismatches,
        m.worst_index,
        m.extra,
    )


def classify(original: list[CaseResult], mutant: list[CaseResult]) -> str:
    """A mutant no case killed: equivalent (every case measured as the original), within rounding (every
    case's error at most ROUNDING times the original's), or a survivor."""
    if all(_measured(a) == _measured(b) for a, b in zip(original, mutant)):
        return EQUIVALENT
    return ROUNDED if all(_within(a, b) for a, b in zip(original, mutant)) else SURVIVED


def _within(a: CaseResult, b: CaseResult) -> bool:
    for field_name in ("max_abs_err", "budget_used"):
        x, y = getattr(a.metrics, field_name), getattr(b.metrics, field_name)
        if x is not None and y is not None:
            return bool(y <= ROUNDING * x)
    return False  # nothing measured to compare: not shown to be rounding


def _advise_survivors(
    targets: list[_Target],
    results: dict[str, MutantResult],
    seed: int,
    device: str,
    deadline: float | None,
    clock: Callable[[], float],
    advise_all: bool = False,
    sample: _Sample | None = None,
) -> dict[str, MutantResult]:
    """Measured advice (``kcgate.calibration.advice``): a remedy that rejects the mutant and still accepts
    the unmutated kernel, for each survivor; with ``advise_all`` for each mutant within rounding and each
    equivalent one too. Such a mutant is equal (or within rounding) on the contract's own inputs but may
    differ on a remedy's (a held-out shape with a tail block, an overflow probe): when a remedy tells it
    apart the contract let a real bug through, and it is reported as a survivor. Runs in process, like
    calibrate's advice."""

    memo: dict[tuple[str, str], list[Any]] = {}

    def run(variant: Project, kernel: str) -> list[Any]:
        """The variant's cases on ``kernel``; the unmutated kernel's are run once per variant (every mutant
        of a contract is checked against the same remedies)."""
        key = (json.dumps([c.to_json() for c in variant.contracts], sort_keys=True, default=str), kernel)
        if key in memo:
            return memo[key]
        executor = InProcessExecutor(variant, device)
        plan = make_plan(variant, seed, executor.default_shapes(), boundary=True)
        results = list(executor.run_many(plan, kernel=kernel))
        if not kernel.startswith(PREFIX):
            memo[key] = results
        return results

    out = dict(results)
    for t in targets:
        for site in t.sites:
            r = out.get(site.key)
            if r is None:
                continue
            m = r.mutant
            wanted = (SURVIVED, ROUNDED, EQUIVALENT) if advise_all else (SURVIVED,)
            if r.outcome not in wanted or r.advice or r.advice_note:
                continue
            if deadline is not None and clock() >= deadline:
                out[m.key] = replace(r, advice_note="advice not measured: the budget was spent")
                continue
            name = t.contract.kernel.partition(":")[2]
            if sample is not None and m.source:
                sample.write(m, t.encoding)  # a cached survivor's module was never written this run
            try:
                lines = advise(_single(t), t.contract, [f"{m.module}:{name}"], t.contract.kernel, run)
            except Exception as exc:  # noqa: BLE001 — a variant that cannot run is no advice, not the end
                out[m.key] = replace(
                    r, advice_note=f"advice could not be measured: {type(exc).__name__}: {exc}"
                )
                continue
            if r.outcome in (EQUIVALENT, ROUNDED):
                how = "equal" if r.outcome == EQUIVALENT else "within rounding"
                told = f"{how} on the contract's inputs, told apart by a remedy's"
                out[m.key] = (
                    replace(r, outcome=SURVIVED, advice=tuple(lines), advice_note=told)
                    if lines
                    else replace(r, advice_note="no remedy's inputs tell it apart either")
                )
                continue
            note = "" if lines else "no probe or parameter kcgate tried catches it"
            out[m.key] = replace(r, advice=tuple(lines), advice_note=note)
    return out
