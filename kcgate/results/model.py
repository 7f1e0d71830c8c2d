"""The results model: a run (``RunResult``), its files (atomic writes) and the one loader of results
documents (``load_run``, ``load_member`` for directory trees, ``parse_run``), with the case records and
the column table of ``kcgate.results.records`` re-exported: the import for everything results.

Results files cross trust boundaries (CI artifacts, baselines), so ``load_run`` treats them as
untrusted: size-capped, schema-checked, and every value checked against its column. No torch here.
Layers, with no cycle: columns (kinds) -> records (column table, codec) -> table (by column) -> model.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kcgate.errors import IOFault, ResultsError
from kcgate.results.columns import MAX_KEY, MAX_TEXT, Invalid, build_frozen, clean_number, expect, scalar_text
from kcgate.results.records import (
    CASE_FIELDS,
    GRAD_BUDGET,
    METRIC_FIELDS,
    METRICS_AT,
    OUT_BUDGET,
    SEVERITY,
    STATUSES,
    TIMINGS_AT,
    UNEVALUATED,
    CaseResult,
    Fingerprint,
    Metrics,
    Signature,
    Status,
    text,
)
from kcgate.results.table import CaseTable
from kcgate.util import bounded

__all__ = [  # the results model: the records (kcgate.results.records), the run, and its files
    "CASE_FIELDS",
    "GRAD_BUDGET",
    "OUT_BUDGET",
    "MAX_RESULTS_BYTES",
    "MAX_TEXT",
    "METRIC_FIELDS",
    "SCHEMA_VERSION",
    "SEVERITY",
    "STATUSES",
    "UNEVALUATED",
    "CaseResult",
    "Fingerprint",
    "Metrics",
    "RunResult",
    "Signature",
    "Status",
    "build_frozen",
    "check_writable",
    "clean_number",
    "dumps_run",
    "foreign_kind",
    "load_member",
    "load_run",
    "parse_run",
    "write_atomic",
    "write_run",
]

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: one object per case (kcgate 0.1); 2: one row per case
MAX_RESULTS_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RunResult:
    """All cases of one run on one runner (or the merge of its shards)."""

    runner: str
    fingerprint: Fingerprint
    cases: Sequence[CaseResult]  # always a table.CaseTable: records or columns, built on first use
    contracts_file: str = "contracts.toml"
    complete: bool = True
    kcgate_version: str = ""
    meta: tuple[tuple[str, str], ...] = ()  # volatile facts (timestamps, host); dropped from baselines

    def __post_init__(self) -> None:
        if not isinstance(self.cases, CaseTable):
            object.__setattr__(self, "cases", CaseTable.from_records(self.cases))

    @property
    def table(self) -> CaseTable:
        """The cases by column (diff and compare read columns, never records)."""
        return self.cases  # type: ignore[return-value]

    def to_json(self) -> dict[str, Any]:
        """The schema-2 document: a header, then one row per case (``case_fields`` names the columns)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "kcgate-results",
            "runner": self.runner,
            "fingerprint": self.fingerprint.to_json(),
            "fingerprint_key": self.fingerprint.key(),
            "contracts_file": self.contracts_file,
            "complete": self.complete,
            "kcgate_version": self.kcgate_version,
            "meta": dict(self.meta),
            "case_fields": list(CASE_FIELDS),
            "metric_fields": list(METRIC_FIELDS),
            "cases": [c.to_row() for c in self.cases],
        }

    @classmethod
    def from_json(cls, d: Any) -> RunResult:
        """Schema 2 (rows), or schema 1 (one object per case), so baselines written by 0.1 still load."""
        expect(isinstance(d, dict), "a results file must hold a JSON object")
        expect(d.get("kind", "kcgate-results") == "kcgate-results", "this is not a kcgate results file")
        version = d.get("schema_version")
        expect(
            version in READABLE_VERSIONS and type(version) is int,
            f"schema_version {str(version)[:20]} is not supported (this kcgate reads "
            f"{' and '.join(map(str, READABLE_VERSIONS))}); re-run `kcgate run` with this version of kcgate",
        )
        fp = d.get("fingerprint")
        expect(isinstance(fp, dict), "fingerprint must be an object")
        cases = d.get("cases")
        expect(isinstance(cases, list), "cases must be a list")
        complete = d.get("complete", True)
        expect(type(complete) is bool, "complete must be true or false")
        meta = d.get("meta") or {}
        expect(isinstance(meta, dict), "meta must be an object")
        return cls(
            runner=text(d, "runner", required=True),
            fingerprint=Fingerprint.from_json(fp),
            cases=_case_table(d, version, cases),
            contracts_file=text(d, "contracts_file") or "contracts.toml",
            complete=complete,
            kcgate_version=text(d, "kcgate_version"),
            meta=tuple(sorted((str(k)[:MAX_KEY], scalar_text(v, "meta", MAX_TEXT)) for k, v in meta.items())),
        )

    def with_cases(self, cases: Sequence[CaseResult], complete: bool | None = None) -> RunResult:
        return replace(self, cases=cases, complete=self.complete if complete is None else complete)


def _case_table(d: dict[str, Any], version: int, cases: list[Any]) -> CaseTable:
    if version == 1:
        return CaseTable.from_records(map(CaseResult.from_json, cases))
    older = _appended_since(d.get("case_fields"))
    older_metrics = _appended_since(d.get("metric_fields"), METRIC_FIELDS, "extra")
    for key, expected in (
        ("case_fields", CASE_FIELDS[: len(CASE_FIELDS) - older]),
        ("metric_fields", METRIC_FIELDS[: len(METRIC_FIELDS) - older_metrics]),
    ):
        expect(
            d.get(key) == list(expected),
            f"{key} is not {', '.join(expected)} (this kcgate's schema {SCHEMA_VERSION} columns); "
            "re-run `kcgate run` with this version of kcgate",
        )
    if older_metrics:
        cases = _padded_metrics(cases, older_metrics)
    return CaseTable.from_rows(_padded(cases, older) if older else cases)


def _appended_since(fields: Any, ours: tuple[str, ...] = CASE_FIELDS, first: str = "line") -> int:
    """How many columns this kcgate appended after the file was written: a file written before a column
    existed (its fields a prefix of ours, at least up to ``first``) reads it as null, its default."""
    oldest = ours.index(first) + 1
    if not isinstance(fields, list) or not oldest <= len(fields) < len(ours):
        return 0
    return len(ours) - len(fields) if fields == list(ours[: len(fields)]) else 0


def _padded_metrics(cases: list[Any], missing: int) -> list[Any]:
    """Rows of an older file with the appended metric columns (cr_ulp, cr_miss) as nulls; a row of
    another shape is left for the row check to name."""
    out = []
    for r in cases:
        m = r[METRICS_AT] if isinstance(r, list) and len(r) > METRICS_AT else None
        if isinstance(m, list) and len(m) == len(METRIC_FIELDS) - missing:
            r = [*r[:METRICS_AT], m + [None] * missing, *r[METRICS_AT + 1 :]]
        out.append(r)
    return out


def _padded(cases: list[Any], missing: int) -> list[Any]:
    """Rows of an older file with the appended columns as nulls; a row of another length is refused with
    the file's own column count."""
    width = len(CASE_FIELDS) - missing
    for r in cases:
        expect(
            isinstance(r, list) and len(r) == width, f"each case must be a list of the {width} case_fields"
        )
    return [r + [None] * missing for r in cases]


# ---- files -------------------------------------------------------------------------------------


def dumps_run(run: RunResult, *, stable: bool = False) -> str:
    """Serialize: the header with sorted keys, then one line per case, so a baseline's review diff shows
    one changed line per changed case. ``stable`` drops volatile fields (timestamps, durations)."""
    d = run.to_json()
    rows = d.pop("cases")
    if stable:
        d["meta"] = {}
        for row in rows:
            for at in TIMINGS_AT:
                row[at] = 0.0
    head = json.dumps(d, sort_keys=True, indent=1, allow_nan=False, default=_json_default)
    lines = ",\n  ".join(json.dumps(r, allow_nan=False, default=_json_default) for r in rows)
    cases = f"[\n  {lines}\n ]" if rows else "[]"
    return f'{head[:-2]},\n "cases": {cases}\n}}\n'


def write_run(path: Path, run: RunResult, *, stable: bool = False) -> None:
    """Write atomically: a reader (or a kill -9) never sees a half-written file."""
    write_atomic(path, dumps_run(run, stable=stable))


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and a rename; an OS error (full disk, no permission, a directory
    in the way) is an IOFault naming ``path`` (exit 3), and the old file is left as it was."""
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        _make_parent(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise IOFault(path, exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise IOFault(path, exc) from None
        raise


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # what mkdir says when a file stands where a directory must be
        blocker = next(p for p in path.parents if p.exists() and not p.is_dir())
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(blocker)) from None


def check_writable(path: Path, fix: str = "") -> None:
    """Fail now, not after hours of cases, if ``path`` cannot be written: a directory in its place, a
    file where a directory should be, no permission, a read-only or full filesystem (a 4 KiB probe
    file is written and removed). An IOFault names the path and the OS error."""
    probe = path.with_name(f".{path.name}.probe")
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        write_atomic(probe, "\0" * 4096)
    except IOFault as exc:
        raise IOFault(path, exc.error, fix) from None
    except OSError as exc:
        raise IOFault(path, exc, fix) from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)


def load_run(path: Path, *, max_bytes: int = MAX_RESULTS_BYTES) -> RunResult:
    """Read an untrusted results file; any defect becomes a ResultsError naming the file and the fix.

    Only a regular file is read, and at most ``max_bytes`` of it whatever its ``st_size`` says (a FIFO
    or ``/dev/zero`` says 0); nesting too deep to parse and lone surrogates are refused (exit 3)."""
    try:
        raw = bounded.read_capped(path, max_bytes)
    except bounded.Refused as exc:
        raise ResultsError(f"{path}: results file {exc}; pass the results file `kcgate run` wrote") from None
    return parse_run(raw, str(path))


def load_member(path: Path) -> RunResult | None:
    """``load_run`` for a file found in a directory tree: a JSON document that declares another kind
    (another tool's artifact) is skipped (None); any other defect is the ResultsError of ``load_run``."""
    try:
        return load_run(path)
    except ResultsError:
        if foreign_kind(_bytes_or_nothing(path)):
            return None
        raise


def foreign_kind(data: bytes) -> bool:
    """True for a JSON object that says it is something else (another tool's artifact), not a broken file."""
    try:
        doc = bounded.loads_json(data)
    except ValueError:  # Refused too: too deep, lone surrogates
        return False
    return isinstance(doc, dict) and "kind" in doc and doc["kind"] != "kcgate-results"


def _bytes_or_nothing(path: Path) -> bytes:
    try:
        return bounded.read_capped(path, MAX_RESULTS_BYTES)
    except bounded.Refused:
        return b""


def parse_run(text: str | bytes, name: str = "<results>") -> RunResult:
    """Parse an untrusted results document (its bytes or text); ``name`` labels the errors."""
    try:
        data = bounded.loads_json(text, parse_constant=_reject_constant)
    except bounded.Refused as exc:
        raise ResultsError(f"{name}: results file {exc}; it is not a kcgate results file") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ResultsError(
            f"{name}: not valid JSON ({str(exc)[:200]}); re-run `kcgate run` to regenerate it"
        ) from None
    try:
        return RunResult.from_json(data)
    except Invalid as exc:
        raise ResultsError(f"{name}: {str(exc)[:300]}") from None


# ---- validation helpers --------------------------------------------------------------------------


def _reject_constant(name: str) -> float:
    # NaN/Infinity literals are not JSON; kcgate writes null for a missing number.
    return math.nan


def _json_default(o: Any) -> Any:
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def index_cases(run: RunResult, name: str = "") -> dict[str, int]:
    """Row by case_id; a duplicate id would make the diff ambiguous, so it is a ResultsError."""
    ids = run.table.column("case_id")
    index = dict(zip(ids, range(len(ids))))
    if len(index) != len(ids):
        twice = next(cid for cid, n in Counter(ids).items() if n > 1)
        where = name or f"results of runner {run.runner!r}"
        raise ResultsError(f"{where}: case id {twice[:120]!r} appears twice; regenerate the file")
    return index
