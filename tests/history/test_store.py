"""The history store: runs recorded once per (commit, runner), concurrent adds lose nothing, the log
rebuilds the same store, and the view finds the planted drift, failure and diverging runner."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kcgate.contracts.policy import DriftRule
from kcgate.errors import UsageError
from kcgate.history.log import read_logs, write_log
from kcgate.history.records import from_run
from kcgate.history.store import add_run, add_runs, open_store
from kcgate.history.view import load_view
from tests.conftest import ROOT
from tests.testing.history_samples import (
    DRIFT_AT,
    DRIFT_RUNNER,
    EXCESS,
    EXCESS_AT,
    FAIL_AT,
    RUNNERS,
    commit_sha,
    commit_time,
    run_at,
)


def entries(n: int = 6):  # type: ignore[no-untyped-def]
    return [
        from_run(run_at(i, r), commit_sha(i), commit_time(i), f"9{i}", 100 + i)
        for i in range(n)
        for r in RUNNERS
    ]


def count(db: Path, table: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def test_adding_a_run_twice_records_it_once(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with open_store(db) as conn:
        first = add_runs(conn, entries(2))
        again = add_runs(conn, entries(2))
    assert (first.added, first.skipped, first.cases) == (6, 0, 24)
    assert (again.added, again.skipped, again.cases) == (0, 6, 0)
    assert count(db, "runs") == 6 and count(db, "cases") == 24 and count(db, "cells") == 12


def test_the_view_finds_the_planted_drift_failure_and_outlier(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.db") as conn:
        add_runs(conn, entries(6))
        view = load_view(conn, 20, drift=DriftRule())
    assert [c.sha for c in view.commits] == [commit_sha(i) for i in range(6)]
    moves = [(m.contract, m.runner, m.commit, m.kind) for m in view.moves]
    assert moves == [
        ("gemm-bf16", DRIFT_RUNNER, commit_sha(DRIFT_AT), "drift"),
        ("gemm-bf16", DRIFT_RUNNER, commit_sha(FAIL_AT), "fails"),
    ]
    assert view.moves[0].before == pytest.approx(0.051) and view.moves[0].after == pytest.approx(0.601)
    found = [(d.contract, d.runner, d.outlier_commits, d.commits) for d in view.divergences]
    assert found == [("gemm-bf16", DRIFT_RUNNER, 2, 6), ("softmax-fp32", DRIFT_RUNNER, 6, 6)]
    assert view.divergences[0].ratio == pytest.approx(1000.0) and view.divergences[1].ratio == pytest.approx(
        100.0
    )
    head = view.at_head()[("gemm-bf16", DRIFT_RUNNER)]
    assert (head.status, head.cause, head.failing) == ("fail", "low-precision-accumulator", 2)


def test_a_failure_of_the_sensitivity_gate_is_a_severity_over_1_where_the_budget_stays_flat(
    tmp_path: Path,
) -> None:
    """rms-norm stays at budget 0.5 while it fails the sensitivity gate (excess ratio 7): the severity, not
    the budget, is what the view's points and moves carry, so the step reads 0.8 -> 7, never 0.5 -> 0.5."""
    runs = [
        from_run(run_at(i, r, (EXCESS,)), commit_sha(i), commit_time(i)) for i in range(4) for r in RUNNERS
    ]
    with open_store(tmp_path / "h.db") as conn:
        add_runs(conn, runs)
        view = load_view(conn, 20)
    points = view.series(EXCESS, DRIFT_RUNNER)
    assert [p.budget for p in points] == pytest.approx([0.5, 0.5, 0.5, 0.5])
    assert [p.severity for p in points] == pytest.approx([0.8, 0.8, 7.0, 7.0])
    moves = {(m.runner, m.kind, m.before, m.after) for m in view.moves}
    assert moves == {(r, "fails", 0.8, 7.0) for r in RUNNERS}
    assert all(m.commit == commit_sha(EXCESS_AT) for m in view.moves)


def test_a_store_made_before_severities_gains_the_column_and_derives_them(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with open_store(db) as conn:
        add_runs(conn, entries(6))
        conn.execute("ALTER TABLE cells DROP COLUMN severity")
        conn.execute("ALTER TABLE cases DROP COLUMN severity")
    with open_store(db) as conn:
        view = load_view(conn, 20)
        columns = {row[1] for row in conn.execute("PRAGMA table_info(cells)")}
    assert "severity" in columns
    assert view.at_head()[("gemm-bf16", DRIFT_RUNNER)].severity == pytest.approx(3.501)


def test_a_stricter_drift_rule_moves_nothing_more_a_looser_one_misses_the_drift(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.db") as conn:
        add_runs(conn, entries(6))
        loose = load_view(conn, 20, drift=DriftRule(ratio=20.0))
    assert [m.kind for m in loose.moves] == ["fails"]


def test_last_contract_and_runner_narrow_the_view(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.db") as conn:
        add_runs(conn, entries(6))
        view = load_view(conn, 3, contracts=["gemm-bf16"], runners=["cpu-x86", DRIFT_RUNNER])
    assert [c.sha for c in view.commits] == [commit_sha(i) for i in (3, 4, 5)]
    assert view.contracts == ("gemm-bf16",) and view.runners == (DRIFT_RUNNER, "cpu-x86")
    assert [m.kind for m in view.moves] == ["fails"]  # the drift step (2 -> 3) is outside the window


def test_concurrent_adds_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    """Four processes add overlapping runs at once: every run is there exactly once."""
    db = tmp_path / "h.db"
    with open_store(db):
        pass
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from kcgate.history.records import from_run\n"
        "from kcgate.history.store import add_run, open_store\n"
        "from tests.testing.history_samples import RUNNERS, commit_sha, commit_time, run_at\n"
        "k = int(sys.argv[1])\n"
        "with open_store(Path(sys.argv[2])) as conn:\n"
        "    for i in range(k, k + 8):\n"
        "        for r in RUNNERS:\n"
        "            add_run(conn, from_run(run_at(i, r), commit_sha(i), commit_time(i)))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(k), str(db)], cwd=ROOT) for k in (0, 2, 4, 6)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    assert count(db, "runs") == 14 * 3 and count(db, "cases") == 14 * 3 * 4


def test_the_log_rebuilds_the_same_store(tmp_path: Path) -> None:
    log = tmp_path / "log"
    written = [write_log(log, e) for e in entries(4)]
    assert all(written) and write_log(log, entries(1)[0]) is None  # append-only: never rewritten
    assert written[0] == log / commit_sha(0) / "nvidia-h100.jsonl"
    with open_store(tmp_path / "a.db") as a, open_store(tmp_path / "b.db") as b:
        add_runs(a, entries(4))
        add_runs(b, read_logs(log))
        assert load_view(a, 10) == load_view(b, 10)


def test_a_failed_add_leaves_no_half_run(tmp_path: Path) -> None:
    bad = entries(1)[0]
    broken = type(bad)(
        **{
            **bad.__dict__,
            "cases": (*bad.cases, bad.cases[0].__class__(**{**bad.cases[0].__dict__, "status": "odd"})),
        }
    )
    with open_store(tmp_path / "h.db") as conn, pytest.raises(KeyError):
        add_run(conn, broken)
    assert count(tmp_path / "h.db", "runs") == 0 and count(tmp_path / "h.db", "cases") == 0


def test_a_file_that_is_not_a_history_database_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "h.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(UsageError, match="not a kcgate history database.*kcgate history rebuild"):
        with open_store(junk):
            pass
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('kind', 'something-else')")
    with pytest.raises(UsageError, match="another kind or version"):
        with open_store(other):
            pass


def test_a_runner_name_that_cannot_name_a_file_is_refused() -> None:
    from dataclasses import replace

    run = replace(run_at(0, "cpu-x86"), runner="../../etc/passwd")
    with pytest.raises(UsageError, match="cannot name a baseline file"):
        from_run(run, commit_sha(0), commit_time(0))


def test_the_last_commits_are_the_newest_by_commit_time_with_any_runners_pr(tmp_path: Path) -> None:
    # Added out of time order, a commit's PR recorded by one runner only: the window is the newest
    # commits by their time, oldest first, and each carries the PR any runner recorded.
    runs = [
        from_run(run_at(i, r), commit_sha(i), commit_time(i), f"9{i}", None)
        for i in (5, 0, 3, 1)
        for r in RUNNERS
    ]
    runs.append(from_run(run_at(4, "cpu-x86"), commit_sha(4), commit_time(4), "94", 104))
    runs.append(from_run(run_at(4, DRIFT_RUNNER), commit_sha(4), commit_time(4), "94", None))
    with open_store(tmp_path / "h.db") as conn:
        add_runs(conn, runs)
        view = load_view(conn, 3)
    assert [(c.sha, c.pr) for c in view.commits] == [
        (commit_sha(3), None),
        (commit_sha(4), 104),
        (commit_sha(5), None),
    ]
