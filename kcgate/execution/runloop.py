"""Drive a run: execute planned cases, journal each as it finishes, compact the journal into the results file
(an atomic rewrite) at the end and on SIGINT/SIGTERM, and resume an interrupted run without repeating a case."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kcgate.errors import ExitCode, RunInterrupted, UsageError
from kcgate.execution.executors import Executor
from kcgate.plan import Case
from kcgate.results.journal import Journal, Journaled, RunLock, case_digest, plan_key, read_journal
from kcgate.results.model import CaseResult, Fingerprint, RunResult, load_run, write_run
from kcgate.vocab.version import __version__


@dataclass(frozen=True)
class Resumed:
    """What ``--resume`` keeps (``done``) and how many finished cases it could not verify (they run again)."""

    done: dict[str, CaseResult]
    unverified: int = 0

    def notice(self) -> str:
        if not self.unverified:
            return ""
        return (
            f"resume: {self.unverified} finished result(s) (journal rows or results-file cases) do not verify "
            "against the run's signed journal and plan (the contract, its kernel's or reference's source or "
            "kcgate changed since, or something else wrote them): those cases run again"
        )


def resume_from(path: Path, run: RunResult, cases: list[Case]) -> Resumed:
    """Results already on disk for this runner and fingerprint (the results file and the journal beside
    it); anything else is refused, not mixed. A case is kept only when the signed journal vouches for it
    (``results.journal``): a results-file case whose digest its header holds, or a row whose MAC verifies;
    only cases of this plan (``cases``) count."""
    plans = plan_keys(cases)
    prior: Sequence[CaseResult] = ()
    if path.exists():
        loaded = load_run(path)
        if loaded.runner != run.runner or loaded.fingerprint.key() != run.fingerprint.key():
            raise UsageError(
                f"{path}: cannot resume: it was written by runner {loaded.runner!r} with fingerprint "
                f"{loaded.fingerprint.key()}, this is {run.runner!r} with {run.fingerprint.key()}; "
                "remove the file or write to another --results"
            )
        prior = loaded.cases
    journaled = read_journal(path, run, plans) or Journaled()
    done = dict(journaled.cases)
    unverified = journaled.rejected
    for case in prior:
        if case.case_id in done or case.case_id not in plans:
            continue  # a later row of the journal, or not in this plan
        if journaled.compacted.get(case.case_id) == case_digest(case, plans[case.case_id]):
            done[case.case_id] = case
        else:
            unverified += 1
    return Resumed(done, unverified)


def plan_keys(cases: Sequence[Case]) -> dict[str, str]:
    """Case id -> the key of what it runs under (``journal.plan_key``). Not its seed: without --seed each run
    draws a new base seed, and a finished case's draw is as good as the next one's (its seed is recorded)."""
    return {c.case_id: plan_key({k: v for k, v in c.to_json().items() if k != "seed"}) for c in cases}


def execute_plan(
    cases: list[Case],
    executor: Executor,
    run: RunResult,
    out: Path | None,
    done: dict[str, CaseResult] | None = None,
    progress: Callable[[int, int, CaseResult], None] | None = None,
) -> RunResult:
    """Run every case not already done. Each finished case is appended to the journal at once; the results
    file is written atomically before the first case, on SIGINT/SIGTERM and at the end (the journal
    compacted into it), so neither kill -9 nor a signal loses a finished case and ``--resume`` never
    repeats one. The caller owns the executor and closes it."""
    results = dict(done or {})
    todo = [c for c in cases if c.case_id not in results]
    store = Store(out, run, cases) if out else None
    if store:
        store.compact(results)  # before any case: --results is writable, and a stale file is replaced
    try:
        with signals_raise():
            for i, result in enumerate(executor.run_many(todo), start=1):
                results[result.case_id] = result
                if store:
                    store.add(result)
                if progress:
                    progress(i, len(todo), result)
    except Interrupted as exc:
        _save(store, results)
        raise _interrupted(exc.signum, len(results), len(cases), out) from None
    except BaseException:
        _save(store, results)
        raise
    final = _ordered(run, cases, results, complete=True)
    if store:
        store.finish(results)
    return final


class Store:
    """The results file and its journal for one run."""

    def __init__(self, out: Path, run: RunResult, cases: list[Case]) -> None:
        self.out, self.run, self.cases = out, run, cases
        self.lock = RunLock(out)  # before anything is written: a second run on --results stops here (exit 3)
        self.journal: Journal | None = None

    def add(self, case: CaseResult) -> None:
        """Journal a finished case: one appended line (the results file is rewritten only by compact)."""
        assert self.journal is not None
        self.journal.append(case)

    def compact(self, results: dict[str, CaseResult]) -> None:
        """Write every finished case into the results file (atomically), then start the journal afresh."""
        written = _ordered(self.run, self.cases, results, complete=False)
        write_run(self.out, written)
        if self.journal is None:
            self.journal = Journal(self.out, self.run, plan_keys(self.cases), written.cases)
        else:
            self.journal.restart(written.cases)

    def finish(self, results: dict[str, CaseResult]) -> None:
        write_run(self.out, _ordered(self.run, self.cases, results, complete=True))
        if self.journal is not None:
            self.journal.remove()
        self.lock.close()


def _save(store: Store | None, results: dict[str, CaseResult]) -> None:
    """On the way out after a signal or a failure: save what finished; if even that fails (the disk is
    full), the journal still holds it for --resume, and the first error is the one reported."""
    if store is None:
        return
    try:
        store.compact(results)
    except Exception:  # noqa: BLE001
        pass
    if store.journal is not None:
        store.journal.close()
    store.lock.close()


def _interrupted(signum: int, finished: int, total: int, out: Path | None) -> RunInterrupted:
    name = signal.Signals(signum).name
    where = f" and saved in {out}; `kcgate run --resume` with the same --results runs the rest" if out else ""
    code = ExitCode.TERMINATED if signum == signal.SIGTERM else ExitCode.INTERRUPTED
    return RunInterrupted(f"interrupted by {name}: {finished} of {total} cases finished{where}", code)


class Interrupted(BaseException):
    """SIGTERM (or SIGHUP) arrived mid-run; raised in the main thread like KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Interrupted (SIGINT already raises KeyboardInterrupt) for the run's
    duration, so the finished cases are saved before the process exits."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _ordered(run: RunResult, cases: list[Case], results: dict[str, CaseResult], complete: bool) -> RunResult:
    order = [results[c.case_id] for c in cases if c.case_id in results]
    return run.with_cases(tuple(order), complete=complete and len(order) == len(cases))


def new_run(
    runner: str,
    fingerprint: Fingerprint,
    contracts_file: str,
    shard: str | None = None,
    overrides: tuple[tuple[str, str], ...] = (),
) -> RunResult:
    """An empty run; each case records its own seed (plan.base_seed_for gives the --seed that reruns it).

    ``overrides``: (meta key, value) of each command-line flag that replaced the contracts' own value
    (``records.OVERRIDES``), so the results say which value was used."""
    meta = [("started", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())), *overrides]
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
