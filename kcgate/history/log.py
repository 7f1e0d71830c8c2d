"""The append-only history log: one JSON-lines file per run, ``<commit>/<runner>.jsonl``, a header line
then one line per case. In CI it lives on a data branch, so every addition is a reviewable new file,
concurrent legs never write the same file, and a re-run finds its file already there (only an incomplete
run's file is replaced, by the complete run). Files are untrusted: ``parse_log`` checks every line and
names the file, the line and the fix; ``check_entry`` holds a run to the same limits before it is
written, and links are refused both ways. No torch."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kcgate.errors import IOFault, ResultsError, UsageError
from kcgate.history.records import RECORDED, RUN_ID, SHA, TIME, CaseEntry, RunEntry, real_time
from kcgate.results.baseline import RUNNER_NAME
from kcgate.results.model import STATUSES, write_atomic
from kcgate.util import bounded

KIND = "kcgate-history"
VERSION = 1
CASE_FIELDS = (
    "case_id",
    "contract_id",
    "status",
    "budget_used",
    "max_ulp",
    "max_abs_err",
    "error",
    "cause",
    "note",
    "severity",  # appended: a file without it (OLD_CASE_FIELDS) reads it as derived from status and budget
)
OLD_CASE_FIELDS = CASE_FIELDS[:-1]
SUFFIX = ".jsonl"
MAX_LOG_BYTES = 64 * 1024 * 1024
MAX_ID = 300  # characters of a case or contract id
MAX_NOTE = 300
LINKS = "a history file and its commit's directory must be a regular file and directory; remove the link"
FIX = "restore it from the data branch's history (git log -- FILE) or delete it and re-add the run's results"


def log_path(root: Path, entry: RunEntry) -> Path:
    """Where a run's log file goes: one directory per commit, one file per runner."""
    return root / entry.commit / f"{entry.runner}{SUFFIX}"


def dumps_log(entry: RunEntry) -> str:
    head = {
        "kind": KIND,
        "version": VERSION,
        "commit": entry.commit,
        "time": entry.time,
        "runner": entry.runner,
        "fingerprint": entry.fingerprint,
        "device": entry.device,
        "run_id": entry.run_id,
        "pr": entry.pr,
        "case_fields": list(CASE_FIELDS),
        "complete": entry.complete,
        "recorded": entry.recorded,
    }
    lines = [json.dumps(head, sort_keys=True)]
    lines += [json.dumps([_field(c, f) for f in CASE_FIELDS], allow_nan=False) for c in entry.cases]
    return "\n".join(lines) + "\n"


def _field(case: CaseEntry, name: str) -> Any:
    """A case's value as its log line holds it: an infinite severity is null (re-derived on reading)."""
    value = getattr(case, name)
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_log(root: Path, entry: RunEntry) -> Path | None:
    """Write the run's log file unless it exists (append-only: a re-run never rewrites history), except
    that a complete run replaces an incomplete one's file. Returns the path written, or None when the file
    was already there. A link on the way (the commit's directory, the file) is refused, never followed."""
    path = log_path(root, entry)
    for p in (path.parent, path):
        if p.is_symlink():
            raise UsageError(f"{p}: is a symbolic link; {LINKS}")
    if path.exists() and not (entry.complete and not read_log(path).complete):
        return None
    write_atomic(path, dumps_log(entry))
    return path


def check_entry(entry: RunEntry) -> None:
    """Refuse a run whose log file ``history rebuild`` would refuse (an id over 300 characters, a device
    over 200, a pull request number past 2^31): ``history add`` writes only what it can read back."""
    try:
        _parse(dumps_log(entry), "")
    except _Bad as exc:
        what = "the run" if exc.line == 1 else f"case {entry.cases[exc.line - 2].case_id[:80]!r}..."
        raise UsageError(
            f"runner {entry.runner!r}, {what}: {exc.what[:300]}; the history could not read it back, so "
            "nothing was recorded: shorten it (or pass a valid --pr)"
        ) from None


def log_files(root: Path) -> list[Path]:
    """Every ``*.jsonl`` below ``root``, sorted; symbolic links are refused (the branch is untrusted)."""
    if not root.is_dir():
        raise ResultsError(f"{root}: no such history directory; pass the checkout of the history data branch")
    found = []
    for top, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in dirs:
            if Path(top, d).is_symlink():  # os.walk would skip it: a run nobody sees is a lost run
                raise ResultsError(f"{Path(top, d)}: is a symbolic link; {LINKS}; {FIX}")
        for name in names:
            path = Path(top, name)
            if name.endswith(SUFFIX):
                if path.is_symlink():
                    raise ResultsError(
                        f"{path}: is a symbolic link; a history file must be a regular file; {FIX}"
                    )
                found.append(path)
    return sorted(found)


def read_log(path: Path) -> RunEntry:
    try:
        raw = bounded.read_capped(path, MAX_LOG_BYTES)
    except bounded.Refused as exc:
        raise ResultsError(f"{path}: history file {exc}; {FIX}") from None
    except OSError as exc:
        raise IOFault(path, exc) from None
    return parse_log(raw, str(path))


class _Bad(Exception):
    def __init__(self, line: int, what: str) -> None:
        super().__init__(what)
        self.line, self.what = line, what


def parse_log(raw: bytes | str, name: str = "<history>") -> RunEntry:
    """A run from its log file's text; any defect is a ResultsError naming the file, the line and the fix."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        return _parse(text, name)
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{name}: not UTF-8 text ({str(exc)[:100]}); {FIX}") from None
    except _Bad as exc:
        raise ResultsError(f"{name}:{exc.line}: {exc.what[:300]}; fix: {FIX}") from None


def _parse(text: str, name: str) -> RunEntry:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise _Bad(1, "the file is empty")
    head, fields = _header(_json(lines[0], 1), name)
    cases = tuple(_case(_json(line, n), n, fields) for n, line in enumerate(lines[1:], start=2))
    return RunEntry(**head, cases=cases)


def _json(line: str, n: int) -> Any:
    try:
        return bounded.loads_json(line, parse_constant=_no_constant)
    except (ValueError, bounded.Refused) as exc:
        raise _Bad(n, f"not a JSON line ({str(exc)[:120]})") from None


def _no_constant(word: str) -> float:
    raise ValueError(f"{word} is not JSON")


def _header(d: Any, name: str) -> tuple[dict[str, Any], int]:
    """The run's fields from the header line, and how many case fields its lines hold."""
    _check(isinstance(d, dict), 1, "the first line must be the run's header object")
    _check(d.get("kind") == KIND, 1, f"kind must be {KIND!r}: this is not a kcgate history file")
    _check(d.get("version") == VERSION and type(d.get("version")) is int, 1, f"version must be {VERSION}")
    fields = d.get("case_fields")
    _check(
        fields in (list(CASE_FIELDS), list(OLD_CASE_FIELDS)),
        1,
        f"case_fields must be {', '.join(CASE_FIELDS)}",
    )
    out = {
        "commit": _match(d.get("commit"), SHA, "commit", "a lowercase hex commit SHA"),
        "time": _time(d.get("time"), "time", "YYYY-MM-DDTHH:MM:SSZ"),
        "runner": _match(d.get("runner"), RUNNER_NAME, "runner", "a runner name (letters, digits, . _ + -)"),
        "fingerprint": _text(d.get("fingerprint"), 1, "fingerprint", 64),
        "device": _text(d.get("device"), 1, "device", 200),
        "run_id": _match(d.get("run_id"), RUN_ID, "run_id", "up to 64 letters, digits, . _ -"),
        "pr": d.get("pr"),
    }
    pr = out["pr"]
    _check(pr is None or (type(pr) is int and 0 < pr < 2**31), 1, "pr must be a pull request number or null")
    out["complete"] = d.get("complete", True)  # absent in logs written before #54: complete runs only
    _check(type(out["complete"]) is bool, 1, "complete must be true or false")
    recorded = d.get("recorded", out["time"])  # absent before #54: ordered by the commit's time
    out["recorded"] = (
        recorded if recorded == "" else _time(recorded, "recorded", "YYYY-MM-DDTHH:MM:SS.ffffffZ", RECORDED)
    )
    where = Path(name)
    if where.suffix == SUFFIX:  # a file on the branch: its place must agree with what it says
        _check(where.stem == out["runner"], 1, f"runner {out['runner']!r} does not match the file name")
        _check(where.parent.name == out["commit"], 1, f"commit {out['commit']} does not match its directory")
    return out, len(fields)


def _case(row: Any, n: int, fields: int = len(CASE_FIELDS)) -> CaseEntry:
    _check(type(row) is list and len(row) == fields, n, f"a case must be a list of the {fields} case_fields")
    case_id, contract_id, status, budget, ulp, err, error, cause, note, *rest = row
    _check(status in STATUSES, n, f"status must be one of {', '.join(STATUSES)}")
    return CaseEntry(
        _text(case_id, n, "case_id", MAX_ID, empty=False),
        _text(contract_id, n, "contract_id", MAX_ID, empty=False),
        status,
        _number(budget, n, "budget_used"),
        _number(ulp, n, "max_ulp"),
        _number(err, n, "max_abs_err"),
        _number(error, n, "error"),
        _text(cause, n, "cause", 64),
        _text(note, n, "note", MAX_NOTE),
        _number(rest[0], n, "severity") if rest else None,  # None: derived (CaseEntry)
    )


def _check(ok: bool, line: int, what: str) -> None:
    if not ok:
        raise _Bad(line, what)


def _text(value: Any, line: int, key: str, limit: int, *, empty: bool = True) -> str:
    _check(
        isinstance(value, str) and len(value) <= limit,
        line,
        f"{key} must be a string of at most {limit} characters",
    )
    _check(empty or bool(value), line, f"{key} must not be empty")
    return str(value)


def _time(value: Any, key: str, words: str, pattern: re.Pattern[str] = TIME) -> str:
    _check(real_time(value, pattern), 1, f"{key} must be {words}, a time that exists")
    return str(value)


def _match(value: Any, pattern: Any, key: str, words: str) -> Any:
    _check(isinstance(value, str) and bool(pattern.fullmatch(value)), 1, f"{key} must be {words}")
    return value


def _number(value: Any, line: int, key: str) -> float | None:
    if value is None:
        return None
    ok = type(value) in (int, float) and math.isfinite(value) and value >= 0
    _check(ok, line, f"{key} must be a finite number >= 0 or null")
    return float(value)


def read_logs(root: Path) -> Iterator[RunEntry]:
    for path in log_files(root):
        yield read_log(path)
