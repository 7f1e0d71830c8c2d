"""Cross-vendor comparison: a contract x runner matrix, consensus outliers and error-vs-K curves. No torch.

Pure functions over results; renderers live in ``kcgate.render.compare_formats`` and ``kcgate.render.plot``.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kcgate.results.model import RunResult, Status
from kcgate.results.severity import severities
from kcgate.vocab.catalogue import CATALOGUE

# Worst first is the highest rank: a failure outranks an error, which outranks a refusal.
STATUS_RANK: dict[str, int] = {Status.PASS: 0, Status.REFUSED: 1, Status.ERROR: 2, Status.FAIL: 3}
OUTLIER_FACTOR = 10.0  # a runner's error this many times the consensus (median) is an outlier
MIN_RUNNERS = 3  # consensus needs a majority that can outvote one runner
ERROR_FLOOR = 1e-300  # exact (zero) errors still have a logarithm
# a product's inner length K (matmul, bmm, linear): a norm's, a softmax's or a sum's row length has a k_dim in
# the catalogue (the reduction-order checks read it) but is no K of the error-against-K panel
_HAS_K = frozenset(name for name, op in CATALOGUE.items() if op.k_dim is not None and op.matmul_like)


@dataclass(frozen=True)
class Cell:
    """One contract on one runner: the worst case's verdict, the largest budget used and the severity of
    its worst cases (``kcgate.results.severity``: over 1 exactly when the verdict is fail)."""

    contract_id: str
    runner: str
    verdict: str  # pass | refused | error | fail
    budget_used: float | None
    cases: int
    failing: int
    severity: float | None = None  # inf: an error, or a failure with no finite number (null in JSON)

    def to_json(self) -> dict[str, Any]:
        return {k: _finite(getattr(self, k)) for k in self.__dataclass_fields__}


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


@dataclass(frozen=True)
class Outlier:
    """A runner whose error on one case is far above what the other runners measured."""

    case_id: str
    contract_id: str
    runner: str
    metric: str  # "norm_err" or "max_abs_err"
    error: float
    consensus: float  # median error of the other runners
    ratio: float
    status: str  # the runner's own verdict: an outlier can still be within tolerance

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class KCurve:
    """Worst error at each reduction length K for one contract on one runner."""

    contract_id: str
    runner: str
    points: tuple[tuple[float, float], ...]  # (K, error), K ascending

    def to_json(self) -> dict[str, Any]:
        return {
            "contract_id": self.contract_id,
            "runner": self.runner,
            "points": [list(p) for p in self.points],
        }


@dataclass(frozen=True)
class Comparison:
    """Everything ``kcgate compare`` shows."""

    runners: tuple[str, ...]
    contracts: tuple[str, ...]
    cells: tuple[Cell, ...]
    outliers: tuple[Outlier, ...]
    curves: tuple[KCurve, ...]
    devices: tuple[tuple[str, str], ...]  # runner -> "backend device (fingerprint key)"

    def grid(self) -> dict[tuple[str, str], Cell]:
        return {(c.contract_id, c.runner): c for c in self.cells}

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "kcgate-compare",
            "runners": list(self.runners),
            "contracts": list(self.contracts),
            "devices": dict(self.devices),
            "cells": [c.to_json() for c in self.cells],
            "outliers": [o.to_json() for o in self.outliers],
            "curves": [k.to_json() for k in self.curves],
        }


def compare_runs(runs: Mapping[str, RunResult]) -> Comparison:
    """Build the matrix, the consensus analysis and the K curves from one results file per runner.

    Reads columns of each run's case table, never records: 10^5 cases per report."""
    runners = tuple(sorted(runs))
    cells = tuple(c for r in runners for c in runner_cells(runs[r]))
    measured = {r: _measure(runs[r]) for r in runners}  # each case's error once, for both analyses
    return Comparison(
        runners=runners,
        contracts=tuple(sorted({c.contract_id for c in cells})),
        cells=cells,
        outliers=_outliers(runs, measured),
        curves=tuple(k for r in runners for k in _curves(runs[r], measured[r])),
        devices=tuple((r, _device(runs[r])) for r in runners),
    )


def _measure(run: RunResult) -> list[float | None]:
    """The error each case is compared on: the op's own norm error when it reports one, else max |error|.

    None where that value is missing, negative or not finite (``_metric`` says which one it was)."""
    table = run.table
    values = [a if n is None else n for n, a in zip(table.extra("norm_err"), table.metric("max_abs_err"))]
    return [v if v is not None and 0.0 <= v < math.inf else None for v in values]


def _metric(run: RunResult, row: int) -> str:
    return "max_abs_err" if run.table.extra("norm_err")[row] is None else "norm_err"


def runner_cells(run: RunResult) -> list[Cell]:
    table = run.table
    rows: dict[str, list[int]] = defaultdict(list)
    for row, contract_id in enumerate(table.column("contract_id")):
        rows[contract_id].append(row)
    statuses, budgets, severe = table.column("status"), table.metric("budget_used"), severities(table)
    return [
        _cell(cid, run.runner, [statuses[r] for r in at], [budgets[r] for r in at], [severe[r] for r in at])
        for cid, at in sorted(rows.items())
    ]


def _cell(
    contract_id: str,
    runner: str,
    statuses: list[str],
    budgets: list[float | None],
    severe: list[float | None],
) -> Cell:
    measured = [b for b in budgets if b is not None]
    verdict = max(statuses, key=STATUS_RANK.__getitem__)
    worst = [v for s, v in zip(statuses, severe) if s == verdict and v is not None]  # agrees with the verdict
    return Cell(
        contract_id=contract_id,
        runner=runner,
        verdict=verdict,
        budget_used=max(measured) if measured else None,
        cases=len(statuses),
        failing=statuses.count(Status.FAIL),
        severity=max(worst) if worst else None,
    )


# ---- consensus -----------------------------------------------------------------------------------


def find_outliers(runs: Mapping[str, RunResult]) -> tuple[Outlier, ...]:
    """Flag, per case seen on >= 3 runners, a runner > 10x both the others' median and the overall median."""
    return _outliers(runs, {r: _measure(runs[r]) for r in runs})


_Entry = tuple[float, str, int]  # error, runner, row in its table


def case_outliers(errors: Mapping[str, float]) -> list[tuple[str, float]]:
    """(runner, consensus error) of each runner whose error on one case is an outlier by ``find_outliers``'
    rule: the one consensus rule, shared with the history's runners-diverging view."""
    entries = [(e, r, 0) for r, e in sorted(errors.items())]
    return [(entry[1], 10.0**consensus) for entry, consensus in _case_outliers(entries)]


def _outliers(
    runs: Mapping[str, RunResult], measured: Mapping[str, list[float | None]]
) -> tuple[Outlier, ...]:
    by_case: dict[str, list[_Entry]] = defaultdict(list)
    for runner in sorted(measured):
        ids = runs[runner].table.column("case_id")
        for row, (case_id, error) in enumerate(zip(ids, measured[runner])):
            if error is not None:
                by_case[case_id].append((error, runner, row))
    found = [e for cid in sorted(by_case) for e in _case_outliers(by_case[cid])]
    return tuple(_outlier_record(runs, entry, consensus) for entry, consensus in found)


def _case_outliers(entries: list[_Entry]) -> list[tuple[_Entry, float]]:
    """(entry, consensus log10 error) of each outlier among one case's runners."""
    if len(entries) < MIN_RUNNERS:
        return []
    errors = [max(e[0], ERROR_FLOOR) for e in entries]
    if max(errors) <= OUTLIER_FACTOR * min(errors):
        return []  # no error is 10x the smallest, so none is 10x the median: most cases stop here
    logs = list(map(math.log10, errors))
    cutoff = statistics.median(logs) + math.log10(OUTLIER_FACTOR)
    found = []
    for i, entry in enumerate(entries):
        if logs[i] <= cutoff:  # the overall-median test first
            continue
        consensus = statistics.median(logs[:i] + logs[i + 1 :])
        if logs[i] - consensus > math.log10(OUTLIER_FACTOR):  # both tests: a majority is never the outlier
            found.append((entry, consensus))
    return found


def _outlier_record(runs: Mapping[str, RunResult], entry: _Entry, consensus: float) -> Outlier:
    error, runner, row = entry
    table = runs[runner].table
    log_err = math.log10(max(error, ERROR_FLOOR))
    ratio = 10.0 ** min(log_err - consensus, 300.0)
    return Outlier(
        table.column("case_id")[row],
        table.column("contract_id")[row],
        runner,
        _metric(runs[runner], row),
        error,
        10.0**consensus,
        ratio,
        table.column("status")[row],
    )


# ---- error against K -----------------------------------------------------------------------------


def k_curves(run: RunResult) -> list[KCurve]:
    """Worst error per reduction length, for contracts whose cases report ``extra.reduction_len``."""
    return _curves(run, _measure(run))


def _curves(run: RunResult, measured: list[float | None]) -> list[KCurve]:
    """Only contracts whose op is a product with an inner length K (``_HAS_K``); a norm's, a softmax's
    or a sum's row length is no K."""
    worst: dict[str, dict[float, float]] = defaultdict(dict)
    table = run.table
    rows = zip(table.column("contract_id"), table.column("op"), table.extra("reduction_len"), measured)
    for contract_id, op, k, error in rows:
        if k is None or error is None or not 0.0 < k < math.inf or op not in _HAS_K:
            continue
        points = worst[contract_id]
        if error > points.get(k, -1.0):
            points[k] = error
    return [
        KCurve(cid, run.runner, tuple(sorted(pts.items())))
        for cid, pts in sorted(worst.items())
        if len(pts) > 1
    ]


def _device(run: RunResult) -> str:
    fp = run.fingerprint
    name = " ".join(p for p in (fp.backend, fp.device) if p)
    return f"{name} ({fp.key()})"


def runner_severities(comparison: Comparison) -> list[tuple[str, float, int]]:
    """Per runner: the median over contracts of each contract's severity (the typical headroom; a failing
    contract counts over 1, an error as infinite) and how many contracts fail or err."""
    per_runner: dict[str, list[float]] = defaultdict(list)
    failing: dict[str, int] = defaultdict(int)
    for cell in comparison.cells:
        if cell.severity is not None:
            per_runner[cell.runner].append(cell.severity)
        failing[cell.runner] += cell.verdict in (Status.FAIL, Status.ERROR)
    return [
        (r, statistics.median(per_runner[r]) if per_runner[r] else 0.0, failing[r])
        for r in comparison.runners
    ]
