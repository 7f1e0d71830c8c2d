"""What the history keeps of one run: the commit, its time, the runner, its fingerprint and, per case,
its status, budget used, severity (``kcgate.results.severity``: over 1 exactly when it fails, whichever gate
failed it), error metrics and cause. Built from a results file (``from_run``). No torch."""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass

from kcgate.results.baseline import check_runner_name
from kcgate.results.model import RunResult
from kcgate.results.severity import severities, severity

SHA = re.compile(r"[0-9a-f]{7,64}")
TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
RECORDED = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{6})?Z")
RUN_ID = re.compile(r"[A-Za-z0-9._-]{0,64}")


@dataclass(frozen=True)
class CaseEntry:
    """One case of a recorded run. ``error`` is what the consensus compares (gate.compare: the op's norm
    error when it reports one, else max |error|); ``cause`` the diagnosed cause, ``note`` its summary."""

    case_id: str
    contract_id: str
    status: str
    budget_used: float | None
    max_ulp: float | None
    max_abs_err: float | None
    error: float | None
    cause: str = ""
    note: str = ""
    severity: float | None = (
        None  # kcgate.results.severity; inf: an error, or a failure with no finite number
    )

    def __post_init__(self) -> None:
        # agrees with the status whatever a (possibly old or edited) log says: a log written before
        # severities were kept reads it from the budget; a failure's is over 1, a pass's at most 1
        held = self.budget_used if self.severity is None else self.severity
        object.__setattr__(self, "severity", severity(self.status, held))


@dataclass(frozen=True)
class RunEntry:
    """One runner's results at one commit: the unit the history adds, dedupes (commit, runner) and logs."""

    commit: str
    time: str  # the commit's time, UTC, YYYY-MM-DDTHH:MM:SSZ
    runner: str
    fingerprint: str  # the runner's fingerprint key
    device: str  # backend, device and arch in words
    run_id: str = ""  # the CI run that produced it
    pr: int | None = None  # the pull request merged by this commit, where known
    cases: tuple[CaseEntry, ...] = ()
    complete: bool = True  # every planned case ran (an incomplete run is replaced by a complete one)
    recorded: str = ""  # when ``history add`` recorded it, UTC (the view's order); "" for the store's now


def real_time(text: str, pattern: re.Pattern[str] = TIME) -> bool:
    """``text`` is written as ``pattern`` says and names a moment that exists (no 2026-02-30, no 25:00)."""
    if not isinstance(text, str) or not pattern.fullmatch(text):
        return False
    try:
        dt.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return False
    return True


def from_run(run: RunResult, commit: str, time: str, run_id: str = "", pr: int | None = None) -> RunEntry:
    """The history's record of a (validated) results file, read by column; the runner name must be plain,
    since it names the run's log file."""
    check_runner_name(run.runner)
    t = run.table
    errors = [a if n is None else n for n, a in zip(t.extra("norm_err"), t.metric("max_abs_err"))]
    signatures = t.column("signature")
    cases = tuple(
        CaseEntry(cid, contract, status, _num(b), _num(u), _num(a), _num(e), _cause(s), _note(s, m), v)
        for cid, contract, status, b, u, a, e, s, m, v in zip(
            t.column("case_id"),
            t.column("contract_id"),
            t.column("status"),
            t.metric("budget_used"),
            t.metric("max_ulp"),
            t.metric("max_abs_err"),
            errors,
            signatures,
            t.column("message"),
            severities(t),
        )
    )
    fp = run.fingerprint
    device = " ".join(x for x in (fp.backend, fp.device, fp.arch) if x)
    return RunEntry(commit, time, run.runner, fp.key(), device, run_id, pr, cases, run.complete)


def _num(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) and x >= 0 else None


def _cause(signature: object) -> str:
    return str(getattr(signature, "cause", "") or "")


def _note(signature: object, message: str) -> str:
    return str(getattr(signature, "summary", "") or message or "")[:300]
