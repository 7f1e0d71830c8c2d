"""The history store: runs recorded once per (commit, runner), concurrent adds lose nothing, the log
rebuilds the same store, and the view finds the planted drift, failure and diverging runner."""

from __future__ import annotations

import re
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


def test_a_null_severity_is_derived_from_the_status_and_budget(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with open_store(db) as conn:
        add_runs(conn, entries(6))
        conn.execute("UPDATE cells SET severity = NULL")
    with open_store(db, create=False) as conn:
        view = load_view(conn, 20)
    assert view.at_head()[("gemm-bf16", DRIFT_RUNNER)].severity == pytest.approx(3.501)


def test_a_severity_stored_as_text_is_a_refused_history(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with open_store(db) as conn:
        add_runs(conn, entries(6))
        conn.execute("UPDATE cells SET severity = 'high'")
    with pytest.raises(UsageError, match="a severity of 'high'"), open_store(db, create=False) as conn:
        load_view(conn, 20)


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


def test_a_file_that_is_not_a_history_database_is_refused_unchanged(tmp_path: Path) -> None:
    """D7: another application's SQLite file is refused before anything is written to it (byte for byte the
    same after), for writing and for reading; no message tells the user to delete it."""
    junk = tmp_path / "h.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(UsageError, match="not a kcgate history database.*kcgate history rebuild") as err:
        with open_store(junk):
            pass
    assert "delete" not in err.value.message
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE invoices(id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO invoices VALUES (1, 99.5)")
    conn.close()
    before = other.read_bytes()
    for create in (True, False):
        with pytest.raises(UsageError, match="another application .tables: invoices., left unchanged") as err:
            with open_store(other, create=create):
                pass
        assert "delete" not in err.value.message
    assert other.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["h.db", "other.db"]
    kind = tmp_path / "kind.db"
    with sqlite3.connect(kind) as conn:
        conn.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('kind', 'something-else')")
    conn.close()
    with pytest.raises(UsageError, match="a database of another kind .'something-else'."):
        with open_store(kind):
            pass


def test_an_older_schema_is_refused_with_the_rebuild_line(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with open_store(db) as conn:
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'version'")
    with pytest.raises(UsageError, match="schema version 1 .this kcgate reads 2.; rebuild the history"):
        with open_store(db, create=False):
            pass


def test_readers_never_wait_behind_a_writer_and_a_lock_is_its_own_message(tmp_path: Path) -> None:
    """D6: a reader opens the file read-only inside a deferred transaction: a writer holding its write
    lock does not stop it; a lock no reader can pass (exclusive locking mode) is said to be a lock, within
    seconds, and never 'delete it'."""
    import time

    db = tmp_path / "h.db"
    with open_store(db) as conn:
        add_runs(conn, entries(2))
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("DELETE FROM cells")
    start = time.monotonic()
    with open_store(db, create=False) as conn:
        assert len(load_view(conn, 10).points) == 2 * 3 * 2  # the committed snapshot
        assert conn.in_transaction  # a read transaction, no write lock: the writer still holds its own
    assert time.monotonic() - start < 5
    writer.execute("ROLLBACK")
    writer.execute("PRAGMA locking_mode=EXCLUSIVE")
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("DELETE FROM cells")
    start = time.monotonic()
    with pytest.raises(UsageError, match="locked by another process") as err:
        with open_store(db, create=False) as conn:
            load_view(conn, 10)
    assert "delete" not in err.value.message and time.monotonic() - start < 30
    writer.execute("ROLLBACK")
    writer.close()


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("UPDATE cells SET status = 99", "a case status '99'"),
        ("UPDATE cells SET budget = 'lots'", "a budget of 'lots'"),
        ("UPDATE cells SET budget = 9e999", "a budget of 'inf'"),
        ("UPDATE cases SET error = -1", "an error of '-1.0'"),
        ("UPDATE cells SET cases = 1.5", "a case count of '1.5'"),
        ("UPDATE runs SET pr = 'x'", "a pull request number 'x'"),
        ("UPDATE runs SET runner = x'00ff' WHERE id = 1", "a runner stored as bytes"),
        ("UPDATE names SET text = x'07' WHERE text = 'gemm-bf16'", "a contract stored as bytes"),
    ],
)
def test_hostile_rows_are_a_refused_history(tmp_path: Path, sql: str, words: str) -> None:
    """D5: a value kcgate never writes is a UsageError (exit 3) naming the file and the value."""
    db = tmp_path / "h.db"
    with open_store(db) as conn:
        add_runs(conn, entries(3))
        conn.execute(sql)
    with pytest.raises(UsageError, match=f"h.db: the history database holds {re.escape(words)}") as err:
        with open_store(db, create=False) as conn:
            load_view(conn, 10)
    assert "kcgate history rebuild" in err.value.message


def test_a_complete_run_replaces_an_incomplete_one_never_the_reverse(tmp_path: Path) -> None:
    """D2: the passing half of a run recorded first does not hide the complete run's failure."""
    from dataclasses import replace

    full = from_run(run_at(FAIL_AT, DRIFT_RUNNER), commit_sha(FAIL_AT), commit_time(FAIL_AT))
    half = replace(full, cases=tuple(c for c in full.cases if c.status == "pass"), complete=False)
    with open_store(tmp_path / "h.db") as conn:
        assert add_run(conn, half).added == 1
        assert add_run(conn, replace(half, cases=half.cases[:1])).skipped == 1  # incomplete: first stays
        again = add_run(conn, full)
        assert (again.added, again.replaced, again.cases) == (0, 1, len(full.cases))
        assert add_run(conn, half).skipped == 1 and add_run(conn, full).skipped == 1
        view = load_view(conn, 10)
    head = view.at_head()[("gemm-bf16", DRIFT_RUNNER)]
    assert (head.status, head.failing, head.cases) == ("fail", 2, 2)
    assert count(tmp_path / "h.db", "runs") == 1 and count(tmp_path / "h.db", "cases") == len(full.cases)


def test_a_runner_name_that_cannot_name_a_file_is_refused() -> None:
    from dataclasses import replace

    run = replace(run_at(0, "cpu-x86"), runner="../../etc/passwd")
    with pytest.raises(UsageError, match="cannot name a baseline file"):
        from_run(run, commit_sha(0), commit_time(0))


def test_the_last_commits_are_the_last_recorded_with_any_runners_pr(tmp_path: Path) -> None:
    # D4: added out of commit-time order (a commit dated 2099 first, one dated 1970 last), a commit's PR
    # recorded by one runner only: the window is the last commits recorded, in that order, each showing
    # its own commit time and the PR any runner recorded.
    from dataclasses import replace

    runs = [
        from_run(run_at(i, r), commit_sha(i), commit_time(i), f"9{i}", None)
        for i in (5, 0, 3, 1)
        for r in RUNNERS
    ]
    runs[0:3] = [replace(e, time="2099-01-01T00:00:00Z") for e in runs[0:3]]
    runs.append(from_run(run_at(4, "cpu-x86"), commit_sha(4), "1970-01-01T00:00:00Z", "94", 104))
    runs.append(from_run(run_at(4, DRIFT_RUNNER), commit_sha(4), "1970-01-01T00:00:00Z", "94", None))
    with open_store(tmp_path / "h.db") as conn:
        add_runs(conn, runs)
        view = load_view(conn, 3)
        everything = load_view(conn, 10)
    assert [(c.sha, c.pr, c.time) for c in view.commits] == [
        (commit_sha(3), None, commit_time(3)),
        (commit_sha(1), None, commit_time(1)),
        (commit_sha(4), 104, "1970-01-01T00:00:00Z"),
    ]
    assert everything.head == commit_sha(4) and everything.commits[0].time == "2099-01-01T00:00:00Z"
    assert everything.at_head()[("gemm-bf16", DRIFT_RUNNER)].status == "fail"
