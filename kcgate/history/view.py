"""What ``kcgate history`` shows, read from the store: each contract's severity (``kcgate.results.severity``:
over 1 exactly when it fails, whichever gate failed it) and budget over the last N commits per runner, the
steps where it moved past the policy's drift rule (``DriftRule``, the diff's own rule),
and the runners whose errors diverge from the consensus (``gate.compare.case_outliers``). No torch."""

from __future__ import annotations

import math
import sqlite3
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

from kcgate.contracts.policy import DriftRule
from kcgate.gate.compare import case_outliers
from kcgate.history.store import STATUS_OF, Hostile
from kcgate.results.model import RunResult, Status
from kcgate.results.severity import severity


@dataclass(frozen=True)
class Commit:
    sha: str
    time: str
    pr: int | None


@dataclass(frozen=True)
class Point:
    """A contract on a runner at a commit: the worst case's status, the largest budget used and the
    severity of its worst cases (> 1 exactly when it fails; inf: an error, or a failure with no finite
    number)."""

    contract: str
    runner: str
    commit: str
    status: str
    budget: float | None
    cases: int
    failing: int
    cause: str
    severity: float | None = None

    def __post_init__(self) -> None:
        if self.severity is None:  # built without one: read from the status and the budget
            object.__setattr__(self, "severity", severity(self.status, self.budget))


@dataclass(frozen=True)
class Move:
    """A step from one commit to the next past the drift rule ("drift", both passing), into failure
    ("fails") or out of it ("fixed"); ``before`` and ``after`` are severities, so a verdict change is never
    drift."""

    contract: str
    runner: str
    commit: str
    before: float | None
    after: float | None
    factor: float | None
    kind: str


@dataclass(frozen=True)
class Divergence:
    """A runner whose error on some case of a contract was a consensus outlier at ``outlier_commits`` of
    the ``commits`` where at least three runners ran it; ``ratio`` at the latest such commit."""

    contract: str
    runner: str
    case_id: str
    outlier_commits: int
    commits: int
    ratio: float


@dataclass(frozen=True)
class HistoryView:
    commits: tuple[Commit, ...]  # oldest first
    runners: tuple[str, ...]
    contracts: tuple[str, ...]
    points: tuple[Point, ...]
    moves: tuple[Move, ...]
    divergences: tuple[Divergence, ...]
    drift_rule: str
    devices: tuple[tuple[str, str], ...] = ()  # runner -> device words at its latest run

    @property
    def head(self) -> str:
        return self.commits[-1].sha if self.commits else ""

    @cached_property
    def _pairs(self) -> dict[tuple[str, str], list[Point]]:
        """(contract, runner) -> its points, oldest commit first (built once: views are queried per pair)."""
        order = {c.sha: i for i, c in enumerate(self.commits)}
        out: dict[tuple[str, str], list[Point]] = defaultdict(list)
        for p in sorted(self.points, key=lambda p: order[p.commit]):
            out[(p.contract, p.runner)].append(p)
        return dict(out)

    @cached_property
    def _prs(self) -> dict[str, int | None]:
        return {c.sha: c.pr for c in self.commits}

    def pr_of(self, sha: str) -> int | None:
        """The pull request a commit merged, where recorded."""
        return self._prs.get(sha)

    def series(self, contract: str, runner: str) -> list[Point]:
        """The contract's points on a runner, oldest commit first."""
        return list(self._pairs.get((contract, runner), ()))

    def of_contract(self, contract: str) -> list[Point]:
        """Every point of a contract, by runner, oldest commit first."""
        return [p for r in self.runners for p in self._pairs.get((contract, r), ())]

    def at_head(self) -> dict[tuple[str, str], Point]:
        """(contract, runner) -> the latest point of each pair (the runner x contract matrix at the head)."""
        return {key: points[-1] for key, points in self._pairs.items()}

    def to_json(self) -> dict[str, Any]:
        """The view as strict JSON: an infinite severity (an error, a failure with no finite number) is
        null, its status says which."""
        return {
            "kind": "kcgate-history-view",
            "drift_rule": self.drift_rule,
            "commits": [asdict(c) for c in self.commits],
            "runners": list(self.runners),
            "contracts": list(self.contracts),
            "devices": dict(self.devices),
            "points": [_finite(asdict(p)) for p in self.points],
            "moves": [_finite(asdict(m)) for m in self.moves],
            "divergences": [asdict(d) for d in self.divergences],
        }


def _finite(d: dict[str, Any]) -> dict[str, Any]:
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in d.items()}


def load_view(
    conn: sqlite3.Connection,
    last: int,
    contracts: Sequence[str] = (),
    runners: Sequence[str] = (),
    drift: DriftRule = DriftRule(),
) -> HistoryView:
    commits = _commits(conn, last)
    runs = _runs(conn, [c.sha for c in commits], runners)
    points = _points(conn, runs, contracts)
    return HistoryView(
        commits=commits,
        runners=tuple(sorted({r[1] for r in runs.values()})),
        contracts=tuple(sorted({p.contract for p in points})),
        points=points,
        moves=find_moves(points, commits, drift),
        divergences=find_divergences(_errors(conn, runs, contracts), len(commits)),
        drift_rule=drift.describe(),
        devices=tuple(sorted({r[1]: r[2] for r in sorted(runs.values(), key=lambda r: r[3])}.items())),
    )


def recorded_commit(conn: sqlite3.Connection, commits: Sequence[str], runs: Mapping[str, RunResult]) -> str:
    """The newest of ``commits`` whose recorded runs are these results files, case for case (ids, statuses
    and budgets, bit for bit), on every one of their runners recorded there; "" when none is. It names the
    baseline's commit where its files were given by path, so the comment's chart draws it once."""
    want = {runner: _cases_of(run) for runner, run in runs.items()}
    for sha in reversed(commits):
        recorded = {
            runner: rid
            for rid, runner in conn.execute("SELECT id, runner FROM runs WHERE commit_sha = ?", (sha,))
            if runner in want
        }
        if recorded and all(_recorded_cases(conn, rid) == want[r] for r, rid in recorded.items()):
            return sha
    return ""


def _cases_of(run: RunResult) -> dict[str, tuple[str, float | None]]:
    t = run.table
    budgets = (
        float(b) if b is not None and math.isfinite(b) and b >= 0 else None for b in t.metric("budget_used")
    )
    return {cid: (str(st), b) for cid, st, b in zip(t.column("case_id"), t.column("status"), budgets)}


def _recorded_cases(conn: sqlite3.Connection, run: int) -> dict[str, tuple[str, float | None]]:
    rows = conn.execute(
        "SELECT n.text, c.status, c.budget FROM cases c JOIN names n ON n.id = c.case_name WHERE c.run = ?",
        (run,),
    )
    return {_text(name, "a case"): (_status(code), _number(b, "a budget")) for name, code, b in rows}


def _commits(conn: sqlite3.Connection, last: int) -> tuple[Commit, ...]:
    # In the order runs were recorded, not by the commit's date (which its author sets: a commit dated
    # 2099 would stay the head). Walks runs_by_recorded from the newest run and stops at the last-th
    # commit, so the cost does not grow with the store; a commit's place is its latest recorded run.
    times: dict[str, str] = {}
    for sha, t in conn.execute(
        "SELECT commit_sha, committed_at FROM runs ORDER BY recorded_at DESC, id DESC"
    ):
        if sha not in times:
            if len(times) == last:
                break
            times[sha] = _text(t, "a commit time")
            _text(sha, "a commit")
    if not times:
        return ()
    marks = ",".join("?" * len(times))
    prs = dict(
        conn.execute(
            f"SELECT commit_sha, MAX(pr) FROM runs WHERE commit_sha IN ({marks}) GROUP BY commit_sha",
            list(times),
        )
    )
    return tuple(Commit(sha, t, _pr(prs.get(sha))) for sha, t in reversed(times.items()))


_Run = tuple[str, str, str, int]  # commit, runner, device, commit's place (oldest 0)


def _runs(conn: sqlite3.Connection, commits: list[str], runners: Sequence[str]) -> dict[int, _Run]:
    if not commits:
        return {}
    place = {sha: i for i, sha in enumerate(commits)}
    marks = ",".join("?" * len(commits))
    rows = conn.execute(
        f"SELECT id, commit_sha, runner, device FROM runs WHERE commit_sha IN ({marks})", commits
    )
    return {
        i: (sha, _text(r, "a runner"), _text(dev, "a device"), place[sha])
        for i, sha, r, dev in rows
        if not runners or r in runners
    }


def _points(conn: sqlite3.Connection, runs: dict[int, _Run], contracts: Sequence[str]) -> tuple[Point, ...]:
    out = []
    for run, contract, code, budget, cases, failing, cause, severe in _select(
        conn,
        "SELECT c.run, n.text, c.status, c.budget, c.cases, c.failing, k.text, c.severity FROM cells c"
        " JOIN names n ON n.id = c.contract JOIN names k ON k.id = c.cause",
        runs,
        contracts,
    ):
        sha, runner, _dev, place = runs[run]
        status, budget = _status(code), _number(budget, "a budget")
        severe = severity(status, budget if severe is None else _severity(severe))  # null: derived
        point = Point(
            _text(contract, "a contract"), runner, sha, status, budget,
            _count(cases), _count(failing), _text(cause, "a cause"), severe,
        )  # fmt: skip
        out.append((place, point))
    out.sort(key=lambda pp: (pp[1].contract, pp[1].runner, pp[0]))
    return tuple(p for _, p in out)


def _select(
    conn: sqlite3.Connection, sql: str, runs: dict[int, _Run], contracts: Sequence[str]
) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` (its table aliased c) for the given runs (by primary key) and contracts."""
    ids = sorted(runs)
    if not ids:
        return []
    where = f" WHERE c.run IN ({','.join('?' * len(ids))})"
    args: list[Any] = list(ids)
    if contracts:
        where += f" AND n.text IN ({','.join('?' * len(contracts))})"
        args += list(contracts)
    return conn.execute(sql + where, args).fetchall()


def find_moves(points: Sequence[Point], commits: Sequence[Commit], drift: DriftRule) -> tuple[Move, ...]:
    """Each step between a pair's consecutive recorded commits that the drift rule (both passing) or a
    change into or out of failure marks."""
    order = {c.sha: i for i, c in enumerate(commits)}
    series: dict[tuple[str, str], list[Point]] = defaultdict(list)
    for p in points:
        series[(p.contract, p.runner)].append(p)
    moves = []
    for key in sorted(series):
        steps = sorted(series[key], key=lambda p: order[p.commit])
        moves += [m for a, b in zip(steps, steps[1:]) if (m := _move(a, b, drift))]
    return tuple(moves)


def _move(a: Point, b: Point, drift: DriftRule) -> Move | None:
    kind = ""
    if a.status != Status.FAIL and b.status == Status.FAIL:
        kind = "fails"
    elif a.status == Status.FAIL and b.status != Status.FAIL:
        kind = "fixed"
    elif a.status == b.status == Status.PASS and drift.drifted(a.severity, b.severity):
        kind = "drift"
    if not kind:
        return None
    factor = (
        drift.factor(a.severity, b.severity) if math.isfinite((a.severity or 0) + (b.severity or 0)) else None
    )
    return Move(b.contract, b.runner, b.commit, a.severity, b.severity, factor, kind)


_Error = tuple[int, str, str, str, float]  # commit place, case, contract, runner, error


def _errors(conn: sqlite3.Connection, runs: dict[int, _Run], contracts: Sequence[str]) -> list[_Error]:
    rows = _select(
        conn,
        "SELECT c.run, s.text, n.text, c.error FROM cases c JOIN names n ON n.id = c.contract"
        " JOIN names s ON s.id = c.case_name",
        runs,
        contracts,
    )
    return [
        (runs[run][3], _text(case, "a case"), _text(contract, "a contract"), runs[run][1], e)
        for run, case, contract, err in rows
        if (e := _number(err, "an error")) is not None
    ]


# ---- every value read back is what kcgate writes; anything else is a refused history (store.Hostile) ----


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise Hostile(f"{what} stored as {type(value).__name__} ({str(value)[:40]!r})")
    return value


def _status(code: object) -> str:
    if type(code) is not int or code not in STATUS_OF:
        raise Hostile(f"a case status {str(code)[:40]!r}")
    return STATUS_OF[code]


def _number(value: object, what: str) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:  # type: ignore[arg-type,operator]
        raise Hostile(f"{what} of {str(value)[:40]!r}")
    return float(value)  # type: ignore[arg-type]


def _severity(value: object) -> float:
    """A stored severity: a number at least 0, infinite for an error (kcgate.results.severity)."""
    if type(value) not in (int, float) or value != value or value < 0:  # type: ignore[operator]
        raise Hostile(f"a severity of {str(value)[:40]!r}")
    return float(value)  # type: ignore[arg-type]


def _count(value: object) -> int:
    if type(value) is not int or value < 0:
        raise Hostile(f"a case count of {str(value)[:40]!r}")
    return value


def _pr(value: object) -> int | None:
    if value is not None and (type(value) is not int or not 0 < value < 2**31):
        raise Hostile(f"a pull request number {str(value)[:40]!r}")
    return value


def find_divergences(errors: Sequence[_Error], n_commits: int) -> tuple[Divergence, ...]:
    """Per commit and case, the consensus outliers; then per contract and runner, how often and how far."""
    by_case: dict[tuple[int, str, str], dict[str, float]] = defaultdict(dict)
    for place, case, contract, runner, err in errors:
        by_case[(place, case, contract)][runner] = err
    judged: dict[tuple[str, str], set[int]] = defaultdict(set)  # (contract, runner) -> commits with consensus
    found: dict[tuple[str, str], dict[int, tuple[float, str]]] = defaultdict(dict)
    for (place, case, contract), errs in sorted(by_case.items()):
        if len(errs) < 3:
            continue
        for runner in errs:
            judged[(contract, runner)].add(place)
        for runner, consensus in case_outliers(errs):
            ratio = errs[runner] / consensus if consensus > 0 else float("inf")
            held = found[(contract, runner)].get(place)
            if held is None or ratio > held[0]:
                found[(contract, runner)][place] = (ratio, case)
    out = []
    for (contract, runner), at in sorted(found.items()):
        ratio, case = at[max(at)]
        out.append(
            Divergence(contract, runner, case, len(at), len(judged[(contract, runner)]), min(ratio, 1e300))
        )
    return tuple(out)
