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
import difflib
import hashlib
import json
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kcgate.calibration.advice import advise
from kcgate.contracts.locate import python_source
from kcgate.contracts.records import Contract, Project
from kcgate.execution.executors import InProcessExecutor
from kcgate.plan import Case, make_plan
from kcgate.results.model import CaseResult, Status
from kcgate.vocab.mutation_rules import RULES, Rule, Where

BASE_SEED = 0  # like calibrate: a proof about the contract, reproducible by default
ROUNDING = 2.0  # a surviving mutant whose error is at most this times the original's differs within rounding
CACHE_FILE = "mutate.json"
CACHE_VERSION = 1
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


def generate(
    source: str,
    name: str,
    contract_id: str = "",
    rules: tuple[Rule, ...] = RULES,
    key_salt: str = "",
    label: str = "kernel.py",
) -> list[Mutant]:
    """Every mutant of the definition ``name`` (and what it reaches) in ``source``: one rule, one site,
    one variant each; mutants whose text repeats an earlier one are left out."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    seen, keys = {source}, set()
    out = []
    for node, where in walk(scope(tree, name)):
        for rule in rules:
            for k, (new, change) in enumerate(rule.transform(node, where)):
                text = splice(source, node, new)
                if text in seen:
                    continue
                try:
                    ast.parse(text)
                except SyntaxError:
                    continue
                seen.add(text)
                line, col = node.lineno, node.col_offset  # type: ignore[attr-defined]
                # the span, not only its start: `a + b + c` holds two sums that start at one column
                site = f"L{line}C{col}-L{node.end_lineno}C{node.end_col_offset}#{k}"  # type: ignore[attr-defined]
                key = hashlib.sha256(f"{key_salt}|{contract_id}|{rule.name}|{site}".encode()).hexdigest()[:16]
                if key in keys:
                    continue  # the same rule at the same span twice would be the same mutant
                keys.add(key)
                diff = "".join(
                    difflib.unified_diff(
                        lines, text.splitlines(keepends=True), f"a/{label}", f"b/{label}", n=1
                    )
                )
                out.append(Mutant(contract_id, rule.name, rule.family, site, line, change, diff, key, text))
    return out


# ---- running ----------------------------------------------------------------------------------------


@dataclass
class _Target:
    """A contract to mutate, with what its runs need (mutable: filled in as its mutants are run)."""

    project: Project
    contract: Contract
    report: ContractReport
    mutants: list[Mutant]
    salt: str = ""  # source hash + contract hash + seed: what every cache key of this contract starts from
    cases: list[Case] | None = None
    original: list[CaseResult] | None = None

    @property
    def original_key(self) -> str:
        return hashlib.sha256(f"{self.salt}|original".encode()).hexdigest()[:16]


def prepare(
    project: Project, c: Contract, rules: tuple[Rule, ...], seed: int, installed: bool = False
) -> _Target:
    """The contract's kernel module, located statically, and its mutants (none, with why, when the kernel
    is not Python source, or, unless ``installed``, a module outside the project)."""
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
    try:
        text = path.read_text(encoding="utf-8")
        ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        return _Target(project, c, replace(base, module_path=str(path), skipped=f"cannot read: {exc}"), [])
    norm = absolute_imports(text, module, path.name == "__init__.py")
    h = source_hash(norm)
    salt = f"{CACHE_VERSION}|{h}|{contract_hash(c)}|{seed}"
    mutants = generate(norm, name, c.id, rules, salt, path.name)
    skipped = ""
    if not mutants:
        defined = any(name in _defines(s) for s in ast.parse(norm).body)
        skipped = (
            f"no rule applies to {name!r} in {path.name}"
            if defined
            else f"{name!r} is not defined in {path.name}"
        )
    report = replace(base, module_path=str(path), source_hash=h, skipped=skipped)
    return _Target(project, c, report, mutants, salt)


class Cache:
    """Mutant outcomes by key, in one JSON file; written once at the end of a run."""

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / CACHE_FILE if directory else None
        self.entries: dict[str, dict[str, Any]] = {}
        if self.path and self.path.is_file():
            try:
                doc = json.loads(self.path.read_text(encoding="utf-8"))
                if doc.get("version") == CACHE_VERSION:
                    self.entries = dict(doc.get("entries", {}))
            except (OSError, ValueError, AttributeError):
                self.entries = {}  # a damaged cache is a cold cache

    def get(self, key: str) -> MutantResult | None:
        d = self.entries.get(key)
        try:
            return replace(MutantResult.from_json(d), cached=True) if d else None
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, r: MutantResult) -> None:
        if r.outcome != NOT_RUN:  # a cached one too: the advice measured this run is kept
            self.entries[r.mutant.key] = replace(r, cached=False).to_json()

    def original(self, key: str) -> tuple[int, int] | None:
        """(cases, false alarms) of an unmutated kernel, when cached."""
        d = self.entries.get(key)
        return (int(d["cases"]), int(d["false_alarms"])) if isinstance(d, dict) and "cases" in d else None

    def put_original(self, key: str, cases: int, false_alarms: int) -> None:
        self.entries[key] = {"cases": cases, "false_alarms": false_alarms}

    def save(self) -> None:
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"version": CACHE_VERSION, "entries": self.entries}, sort_keys=True))
            tmp.replace(self.path)


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
        results, todo = _pending(targets, cache, here)
        random.Random(seed).shuffle(todo)
        ran, sampled = _run_sample(todo, make, seed, deadline, max_mutants, clock)
        results.update(ran)
        if advice:
            results = _advise_survivors(targets, results, seed, device, deadline, clock, advise_all)
        reports = tuple(_report(t, results, cache) for t in targets)
        for r in results.values():
            cache.put(r)
        cache.save()
    return MutationReport(reports, seed, budget_s, clock() - t0, sampled)


def _pending(
    targets: list[_Target], cache: Cache, here: Path
) -> tuple[dict[str, MutantResult], list[tuple[_Target, Mutant]]]:
    """The cached results, and the mutants still to run, each written to ``here`` now: before any worker
    imports from that directory, so the import system's cached listing of it holds every one."""
    results: dict[str, MutantResult] = {}
    todo = []
    for t in targets:
        for m in t.mutants:
            hit = cache.get(m.key)
            if hit is not None:
                results[m.key] = hit
            else:
                todo.append((t, m))
                (here / f"{m.module}.py").write_text(m.source, encoding="utf-8")
    return results, todo


def _run_sample(
    todo: list[tuple[_Target, Mutant]],
    make: Factory,
    seed: int,
    deadline: float | None,
    max_mutants: int | None,
    clock: Callable[[], float],
) -> tuple[dict[str, MutantResult], bool]:
    """Run ``todo`` in its order until the deadline or ``max_mutants``; one executor per project, started
    when its first mutant comes up. Returns the results and whether some were left ``not-run``."""
    results: dict[str, MutantResult] = {}
    executors: dict[int, Any] = {}
    sampled, ran = False, 0
    try:
        for t, m in todo:
            if (deadline is not None and clock() >= deadline) or (
                max_mutants is not None and ran >= max_mutants
            ):
                sampled = True
                results[m.key] = MutantResult(m, NOT_RUN)
                continue
            executor = executors.get(id(t.project))
            if executor is None:
                executor = executors[id(t.project)] = make(t.project)
            results[m.key] = run_mutant(t, m, executor, seed)
            ran += 1
    finally:
        for e in executors.values():
            e.close()
    return results, sampled


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
    mutants = tuple(results[m.key] for m in t.mutants)
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
        for m in t.mutants:
            r = out[m.key]
            wanted = (SURVIVED, ROUNDED, EQUIVALENT) if advise_all else (SURVIVED,)
            if r.outcome not in wanted or r.advice or r.advice_note:
                continue
            if deadline is not None and clock() >= deadline:
                out[m.key] = replace(r, advice_note="advice not measured: the budget was spent")
                continue
            name = t.contract.kernel.partition(":")[2]
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
