"""The history store: SQLite from the standard library, one file. A run is keyed by (commit, runner), so
adding it again changes nothing, and each addition is one IMMEDIATE transaction, so concurrent adds
queue (busy timeout) instead of losing records. Cases are stored per case; ``cells`` keeps each
contract's worst case per run, which every view reads, with its severity (``kcgate.results.severity``;
a store made before severities were kept gains the column, null: views derive it). No torch."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kcgate.errors import UsageError
from kcgate.gate.compare import STATUS_RANK
from kcgate.history.records import CaseEntry, RunEntry
from kcgate.results.model import Status

KIND = "kcgate-history"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 120.0  # a concurrent add waits this long for the writer before giving up
STATUS_CODE = {str(s): i for s, i in STATUS_RANK.items()}  # stored as its rank: worst is the largest
STATUS_OF = {i: s for s, i in STATUS_CODE.items()}
REBUILD = "delete it and rebuild it from the log: kcgate history rebuild LOGDIR --db PATH"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS names(id INTEGER PRIMARY KEY, text TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS runs(
  id INTEGER PRIMARY KEY, commit_sha TEXT NOT NULL, committed_at TEXT NOT NULL, runner TEXT NOT NULL,
  fingerprint TEXT NOT NULL, device TEXT NOT NULL, run_id TEXT NOT NULL, pr INTEGER,
  UNIQUE(commit_sha, runner));
CREATE INDEX IF NOT EXISTS runs_by_time ON runs(committed_at, commit_sha);
CREATE TABLE IF NOT EXISTS cases(
  run INTEGER NOT NULL, case_name INTEGER NOT NULL, contract INTEGER NOT NULL, status INTEGER NOT NULL,
  budget REAL, max_ulp REAL, max_err REAL, error REAL, cause INTEGER NOT NULL, note INTEGER NOT NULL,
  severity REAL, PRIMARY KEY(run, case_name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cells(
  run INTEGER NOT NULL, contract INTEGER NOT NULL, status INTEGER NOT NULL, budget REAL,
  cases INTEGER NOT NULL, failing INTEGER NOT NULL, cause INTEGER NOT NULL, severity REAL,
  PRIMARY KEY(run, contract)) WITHOUT ROWID;
"""
ADDED_COLUMNS = (("cases", "severity REAL"), ("cells", "severity REAL"))  # to stores made before them


@dataclass(frozen=True)
class Added:
    """What one ``add`` did: runs recorded, runs already there (skipped), cases recorded."""

    added: int = 0
    skipped: int = 0
    cases: int = 0


@contextlib.contextmanager
def open_store(path: Path, *, create: bool = True) -> Iterator[sqlite3.Connection]:
    """The store at ``path`` (created when ``create``); a file that is not a kcgate history is refused."""
    if not create and not path.is_file():
        raise UsageError(
            f"{path}: no history database; create it with `kcgate history add` or `kcgate history rebuild`"
        )
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise UsageError(f"{path}: cannot open the history database ({exc}); check the path") from None
    try:
        _prepare(conn, path)
        yield conn
    finally:
        conn.close()


def _prepare(conn: sqlite3.Connection, path: Path) -> None:
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript("BEGIN IMMEDIATE;" + SCHEMA + _migration(conn) + "COMMIT;")
        conn.execute(
            "INSERT OR IGNORE INTO meta VALUES ('kind', ?), ('version', ?)", (KIND, str(SCHEMA_VERSION))
        )
        meta = dict(conn.execute("SELECT key, value FROM meta"))
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"{path}: not a kcgate history database ({exc}); {REBUILD}") from None
    if meta.get("kind") != KIND or meta.get("version") != str(SCHEMA_VERSION):
        raise UsageError(f"{path}: a history database of another kind or version; {REBUILD}")


def _migration(conn: sqlite3.Connection) -> str:
    """ALTER statements adding the columns an older store lacks (its tables exist, without them)."""
    out = []
    for table, column in ADDED_COLUMNS:
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if have and column.split()[0] not in have:
            out.append(f"ALTER TABLE {table} ADD COLUMN {column};")
    return "".join(out)


def add_runs(conn: sqlite3.Connection, entries: Iterable[RunEntry]) -> Added:
    total = Added()
    for entry in entries:
        n = add_run(conn, entry)
        total = Added(total.added + (n is not None), total.skipped + (n is None), total.cases + (n or 0))
    return total


def add_run(conn: sqlite3.Connection, entry: RunEntry) -> int | None:
    """Record one run in one transaction: its case count, or None when (commit, runner) was already there."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        cur = conn.execute(
            "INSERT OR IGNORE INTO runs(commit_sha, committed_at, runner, fingerprint, device, run_id, pr)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (entry.commit, entry.time, entry.runner, entry.fingerprint, entry.device, entry.run_id, entry.pr),
        )
        if not cur.rowcount:
            conn.execute("ROLLBACK")
            return None
        run = cur.lastrowid
        ids = intern(conn, _texts(entry.cases))
        conn.executemany(
            "INSERT OR REPLACE INTO cases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            _case_rows(run, entry.cases, ids),
        )
        conn.executemany(
            "INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?, ?)", _cell_rows(run, entry.cases, ids)
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return len(entry.cases)


def _texts(cases: Sequence[CaseEntry]) -> set[str]:
    out = {""}
    for c in cases:
        out.update((c.case_id, c.contract_id, c.cause, c.note))
    return out


def intern(conn: sqlite3.Connection, texts: Iterable[str]) -> dict[str, int]:
    """Each text's id in ``names`` (ids and causes repeat in every run: stored once)."""
    wanted = sorted(set(texts))
    conn.executemany("INSERT OR IGNORE INTO names(text) VALUES (?)", ((t,) for t in wanted))
    ids: dict[str, int] = {}
    for i in range(0, len(wanted), 500):
        chunk = wanted[i : i + 500]
        marks = ",".join("?" * len(chunk))
        ids.update(
            (t, n) for n, t in conn.execute(f"SELECT id, text FROM names WHERE text IN ({marks})", chunk)
        )
    return ids


def _case_rows(
    run: int | None, cases: Sequence[CaseEntry], ids: dict[str, int]
) -> Iterator[tuple[object, ...]]:
    for c in cases:
        yield (
            run, ids[c.case_id], ids[c.contract_id], STATUS_CODE[c.status],
            c.budget_used, c.max_ulp, c.max_abs_err, c.error, ids[c.cause], ids[c.note], c.severity,
        )  # fmt: skip


def _cell_rows(
    run: int | None, cases: Sequence[CaseEntry], ids: dict[str, int]
) -> Iterator[tuple[object, ...]]:
    """Per contract: the worst status, the largest budget, the case count, the failures, the worst's cause
    and the largest severity among the cases of the worst status (the number agrees with the verdict)."""
    by_contract: dict[str, list[CaseEntry]] = {}
    for c in cases:
        by_contract.setdefault(c.contract_id, []).append(c)
    for contract, group in by_contract.items():
        worst = max(group, key=lambda c: (STATUS_CODE[c.status], c.severity or 0.0, c.budget_used or 0.0))
        budgets = [c.budget_used for c in group if c.budget_used is not None]
        severe = [c.severity for c in group if c.status == worst.status and c.severity is not None]
        failing = sum(c.status == Status.FAIL for c in group)
        yield (
            run,
            ids[contract],
            STATUS_CODE[worst.status],
            max(budgets) if budgets else None,
            len(group),
            failing,
            ids[worst.cause],
            max(severe) if severe else None,
        )
