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
import hashlib
import importlib
import json
import os
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kcgate.calibration.advice import Executors, advise
from kcgate.calibration.mutants import (
    CACHE_VERSION,
    EQUIVALENT,
    KILLED,
    NOT_RUN,
    PREFIX,
    ROUNDED,
    SURVIVED,
    ContractReport,
    Mutant,
    MutantResult,
    MutationReport,
)
from kcgate.calibration.mutate_cache import Cache, write_fresh
from kcgate.calibration.mutate_sites import (
    Site,
    absolute_imports,
    defines,
    materialize,
    sites,
    source_hash,
)
from kcgate.contracts.locate import python_source
from kcgate.contracts.records import Contract, Project
from kcgate.plan import Case, make_plan
from kcgate.results.model import CaseResult, Status
from kcgate.util import bounded
from kcgate.util.pysource import decode_source, source_encoding
from kcgate.vocab.mutation_rules import RULES, Rule

BASE_SEED = 0  # like calibrate: a proof about the contract, reproducible by default
ROUNDING = 2.0  # a surviving mutant whose error is at most this times the original's differs within rounding
MAX_MODULE_BYTES = 1 << 20  # a kernel module larger than this is not mutated (the report says so)


def _owned(path: Path, project: Project) -> bool:
    """The module is the project's own: under its contracts file's directory or one of [project].paths.
    An installed package (torch's own functions) is not mutated."""
    roots = [project.path.parent, *project.paths]
    here = path.resolve()
    return any(here.is_relative_to(r.resolve()) for r in roots)


def contract_hash(c: Contract) -> str:
    return hashlib.sha256(json.dumps(c.to_json(), sort_keys=True, default=str).encode()).hexdigest()[:16]


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
        defined = any(name in defines(s) for s in ast.parse(norm).body)
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
            results = _advise_survivors(targets, results, seed, make, deadline, clock, advise_all, sample)
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
        write_fresh(self.here / f"{m.module}.py", m.source.encode(encoding))
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
    make: Factory,
    deadline: float | None,
    clock: Callable[[], float],
    advise_all: bool = False,
    sample: _Sample | None = None,
) -> dict[str, MutantResult]:
    """Measured advice (``kcgate.calibration.advice``): a remedy that rejects the mutant and still accepts
    the unmutated kernel, for each survivor; with ``advise_all`` for each mutant within rounding and each
    equivalent one too. Such a mutant is equal (or within rounding) on the contract's own inputs but may
    differ on a remedy's (a held-out shape with a tail block, an overflow probe): when a remedy tells it
    apart the contract let a real bug through, and it is reported as a survivor. Runs in ``make``'s
    executors (worker processes under ``--isolation process``), one per remedy, like calibrate's advice."""

    memo: dict[tuple[str, str], list[Any]] = {}
    executors = Executors(make)

    def run(variant: Project, kernel: str) -> list[Any]:
        """The variant's cases on ``kernel``; the unmutated kernel's are run once per variant (every mutant
        of a contract is checked against the same remedies)."""
        key = (json.dumps([c.to_json() for c in variant.contracts], sort_keys=True, default=str), kernel)
        if key in memo:
            return memo[key]
        executor = executors(variant)
        plan = make_plan(variant, seed, executor.default_shapes(), boundary=True)
        results = list(executor.run_many(plan, kernel=kernel))
        if not kernel.startswith(PREFIX):
            memo[key] = results
        return results

    out = dict(results)
    try:
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
    finally:
        executors.close()
    return out
