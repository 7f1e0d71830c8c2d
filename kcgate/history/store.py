"""The history store: SQLite from the standard library, one file. A run is keyed by (commit, runner), so
adding it again changes nothing, except that a complete run replaces an incomplete one; each addition is
one IMMEDIATE transaction, so concurrent adds queue (busy timeout) instead of losing records. Readers
open the file read-only and never wait behind a writer. A file that is not a kcgate history (another
application's database) is refused before anything is written to it. Cases are stored per case;
``cells`` keeps each contract's worst case per run, which every view reads, with its severity
(``kcgate.results.severity``). No torch."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path

from kcgate.errors import UsageError
from kcgate.gate.compare import STATUS_RANK
from kcgate.history.records import CaseEntry, RunEntry
from kcgate.results.model import Status

KIND = "kcgate-history"
SCHEMA_VERSION = 2  # 2: runs record when they were recorded (the view's order) and whether they are complete;
# cases and cells their severity
BUSY_TIMEOUT_S = 120.0  # a concurrent add waits this long for the writer before giving up
READ_TIMEOUT_S = 5.0  # a reader never waits behind a writer (WAL); this only covers a checkpoint
STATUS_CODE = {str(s): i for s, i in STATUS_RANK.items()}  # stored as its rank: worst is the largest
STATUS_OF = {i: s for s, i in STATUS_CODE.items()}
REBUILD = "rebuild the history from its log into a new file: kcgate history rebuild LOGDIR --db NEWPATH"
LOCKED = (
    "the history database is locked by another process (a `kcgate history add` or `rebuild` still "
    "running?); wait for it to finish and run this again"
)

SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE names(id INTEGER PRIMARY KEY, text TEXT NOT NULL UNIQUE);
CREATE TABLE runs(
  id INTEGER PRIMARY KEY, commit_sha TEXT NOT NULL, committed_at TEXT NOT NULL, runner TEXT NOT NULL,
  fingerprint TEXT NOT NULL, device TEXT NOT NULL, run_id TEXT NOT NULL, pr INTEGER,
  recorded_at TEXT NOT NULL, complete INTEGER NOT NULL,
  UNIQUE(commit_sha, runner));
CREATE INDEX runs_by_recorded ON runs(recorded_at);
CREATE TABLE cases(
  run INTEGER NOT NULL, case_name INTEGER NOT NULL, contract INTEGER NOT NULL, status INTEGER NOT NULL,
  budget REAL, max_ulp REAL, max_err REAL, error REAL, cause INTEGER NOT NULL, note INTEGER NOT NULL,
  severity REAL, PRIMARY KEY(run, case_name)) WITHOUT ROWID;
CREATE TABLE cells(
  run INTEGER NOT NULL, contract INTEGER NOT NULL, status INTEGER NOT NULL, budget REAL,
  cases INTEGER NOT NULL, failing INTEGER NOT NULL, cause INTEGER NOT NULL, severity REAL,
  PRIMARY KEY(run, contract)) WITHOUT ROWID;
"""


class Hostile(Exception):
    """A row holds what kcgate never writes (a status 99, a budget stored as text, an infinite one): the
    view refuses the whole history rather than show it (``open_store`` names the file)."""


@dataclass(frozen=True)
class Added:
    """What one ``add`` did: runs recorded, runs already there (skipped), cases recorded, and incomplete
    runs that a complete run of the same commit and runner replaced."""

    added: int = 0
    skipped: int = 0
    cases: int = 0
    replaced: int = 0


@contextlib.contextmanager
def open_store(path: Path, *, create: bool = True) -> Iterator[sqlite3.Connection]:
    """The store at ``path``: for writing (created when absent) when ``create``, else read-only, inside one
    read transaction (a consistent snapshot, no write lock). A file that is not a kcgate history is refused
    unchanged; a locked one is said to be locked."""
    if not create and not path.is_file():
        raise UsageError(
            f"{path}: no history database; create it with `kcgate history add` or `kcgate history rebuild`"
        )
    try:
        conn = _connect(path, create)
    except sqlite3.Error as exc:
        raise UsageError(f"{path}: cannot open the history database ({exc}); check the path") from None
    try:
        _prepare(conn, path, create)
        yield conn
    except sqlite3.DatabaseError as exc:
        raise _refusal(path, exc) from None
    except Hostile as exc:
        raise UsageError(
            f"{path}: the history database holds {exc}, which kcgate never writes; {REBUILD}"
        ) from None
    finally:
        conn.close()


def _connect(path: Path, create: bool) -> sqlite3.Connection:
    if create:
        return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    uri = f"{path.resolve().as_uri()}?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=READ_TIMEOUT_S, isolation_level=None)


def _refusal(path: Path, exc: sqlite3.Error) -> UsageError:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return UsageError(f"{path}: {LOCKED}")
    return UsageError(f"{path}: not a kcgate history database ({text[:200]}); {REBUILD}")


def _prepare(conn: sqlite3.Connection, path: Path, create: bool) -> None:
    """Check what the file is before anything is written to it; create the schema in an empty one."""
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables and create:
        _create(conn)
        return
    if "meta" not in tables:
        shown = ", ".join(sorted(tables)[:8]) or "none"
        raise UsageError(
            f"{path}: an SQLite database of another application (tables: {shown[:200]}), left unchanged; "
            "pass the path of a kcgate history with --db (or a new file to create one)"
        )
    meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('kind', 'version')"))
    if meta.get("kind") != KIND:
        raise UsageError(
            f"{path}: a database of another kind ({str(meta.get('kind'))[:60]!r}), left unchanged; pass a kcgate history with --db"
        )
    if meta.get("version") != str(SCHEMA_VERSION):
        raise UsageError(
            f"{path}: a kcgate history of schema version {str(meta.get('version'))[:20]} "
            f"(this kcgate reads {SCHEMA_VERSION}); {REBUILD}"
        )
    if create:
        conn.execute("PRAGMA synchronous=NORMAL")
    else:
        conn.execute("BEGIN")  # deferred: a read snapshot for every query of the view, no write lock


def _create(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0:  # nobody created it since
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO meta VALUES ('kind', ?), ('version', ?)", (KIND, str(SCHEMA_VERSION)))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("PRAGMA journal_mode=WAL")  # readers then never wait behind a writer
    conn.execute("PRAGMA synchronous=NORMAL")


def now() -> str:
    """The time a run is recorded: UTC to the microsecond, so runs added one after another stay in order."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sortable(time: str) -> str:
    """A recorded time with six decimals, so that times compare as text (an old log's commit time has none)."""
    return time if "." in time else time[:-1] + ".000000Z"


def add_runs(conn: sqlite3.Connection, entries: Iterable[RunEntry]) -> Added:
    total = Added()
    for entry in entries:
        one = add_run(conn, entry)
        total = Added(*(x + y for x, y in zip(astuple(total), astuple(one))))
    return total


def add_run(conn: sqlite3.Connection, entry: RunEntry) -> Added:
    """Record one run in one transaction. When (commit, runner) is there already it adds nothing (skipped),
    unless the one there is incomplete and this one complete: then this one replaces it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        there = conn.execute(
            "SELECT id, complete FROM runs WHERE commit_sha = ? AND runner = ?", (entry.commit, entry.runner)
        ).fetchone()
        if there is not None and (there[1] or not entry.complete):
            conn.execute("ROLLBACK")
            return Added(skipped=1)
        if there is not None:
            _delete_run(conn, there[0])
        run = _insert_run(conn, entry)
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
    return Added(added=there is None, cases=len(entry.cases), replaced=there is not None)


def _insert_run(conn: sqlite3.Connection, entry: RunEntry) -> int | None:
    cur = conn.execute(
        "INSERT INTO runs(commit_sha, committed_at, runner, fingerprint, device, run_id, pr, recorded_at,"
        " complete) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            entry.commit, entry.time, entry.runner, entry.fingerprint, entry.device, entry.run_id, entry.pr,
            sortable(entry.recorded or now()), int(entry.complete),
        ),
    )  # fmt: skip
    return cur.lastrowid


def _delete_run(conn: sqlite3.Connection, run: int) -> None:
    """An incomplete run, replaced by the complete one of its commit and runner."""
    for table, key in (("cases", "run"), ("cells", "run"), ("runs", "id")):
        conn.execute(f"DELETE FROM {table} WHERE {key} = ?", (run,))


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
