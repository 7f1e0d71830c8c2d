"""Drive a run: execute planned cases, stream results to disk atomically, resume an interrupted run."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from kcgate import __version__
from kcgate.errors import UsageError
from kcgate.execution.plan import Case
from kcgate.results.model import CaseResult, Fingerprint, RunResult, load_run, write_run

FLUSH_INTERVAL_S = 0.2


class Executor(Protocol):
    def run(self, case: Case, timeout: float, kernel: str | None = None) -> CaseResult: ...

    def close(self) -> None: ...


def resume_from(path: Path, fingerprint: Fingerprint, runner: str) -> dict[str, CaseResult]:
    """Results already on disk for this runner and fingerprint; anything else is refused, not mixed."""
    if not path.exists():
        return {}
    prior = load_run(path)
    if prior.runner != runner or prior.fingerprint.key() != fingerprint.key():
        raise UsageError(
            f"{path}: cannot resume: it was written by runner {prior.runner!r} with fingerprint "
            f"{prior.fingerprint.key()}, this is {runner!r} with {fingerprint.key()}; "
            "remove the file or write to another --out"
        )
    return {c.case_id: c for c in prior.cases}


def execute_plan(
    cases: list[Case],
    executor: Executor,
    run: RunResult,
    out: Path | None,
    timeouts: Callable[[Case], float],
    done: dict[str, CaseResult] | None = None,
    progress: Callable[[int, int, CaseResult], None] | None = None,
) -> RunResult:
    """Run every case not already done; the results file is valid after every case (kill -9 safe)."""
    results = dict(done or {})
    todo = [c for c in cases if c.case_id not in results]
    last_flush = 0.0
    try:
        for i, case in enumerate(todo, start=1):
            results[case.case_id] = executor.run(case, timeouts(case))
            if progress:
                progress(i, len(todo), results[case.case_id])
            if out and time.monotonic() - last_flush >= FLUSH_INTERVAL_S:
                write_run(out, _ordered(run, cases, results, complete=False))
                last_flush = time.monotonic()
    finally:
        executor.close()
    final = _ordered(run, cases, results, complete=True)
    if out:
        write_run(out, final)
    return final


def _ordered(run: RunResult, cases: list[Case], results: dict[str, CaseResult], complete: bool) -> RunResult:
    order = [results[c.case_id] for c in cases if c.case_id in results]
    return run.with_cases(tuple(order), complete=complete and len(order) == len(cases))


def new_run(
    runner: str, fingerprint: Fingerprint, contracts_file: str, shard: str | None = None
) -> RunResult:
    """An empty run; each case records its own seed (plan.base_seed_for gives the --seed that reruns it)."""
    meta = [("started", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))]
    if shard:
        meta.append(("shard", shard))  # lets the report see a missing shard of a runner
    return RunResult(
        runner=runner,
        fingerprint=fingerprint,
        cases=(),
        contracts_file=contracts_file,
        complete=False,
        kcgate_version=__version__,
        meta=tuple(sorted(meta)),
    )
