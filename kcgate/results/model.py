"""The results model: frozen records with explicit JSON round trips, atomic writes and validation.

Results files cross trust boundaries (CI artifacts, baselines), so ``load_run`` treats them as
untrusted: size-capped, schema-checked, and every number checked for type. No torch here.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from kcgate import bounded
from kcgate.errors import IOFault, ResultsError

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: one object per case (kcgate 0.1); 2: one row per case
MAX_RESULTS_BYTES = 64 * 1024 * 1024
MAX_TEXT = 4096  # longest free-text field kept from an untrusted file


class Status(str, Enum):
    """A case's outcome; members are their strings (``Status.PASS == "pass"``) in JSON and text alike."""

    PASS = "pass"  # the contract holds for this case
    FAIL = "fail"  # the kernel violates it
    ERROR = "error"  # the case could not be evaluated (crash, timeout, bad output)
    REFUSED = "refused"  # the kernel declined the case (unsupported dtype or shape)

    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]


STATUSES: tuple[str, ...] = tuple(s.value for s in Status)
VOLATILE_SUFFIXES = ("_VISIBLE_DEVICES", "ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR", "device_count")


@dataclass(frozen=True)
class Fingerprint:
    """What a result was measured on; results compare only with the same fingerprint key."""

    backend: str  # cpu | cuda | rocm | xpu | mps | npu
    vendor: str = ""
    device: str = ""
    arch: str = ""
    driver: str = ""
    runtime: str = ""
    torch: str = ""
    flags: tuple[tuple[str, str], ...] = ()

    def key(self) -> str:
        """Stable short hash of everything that changes numerics (the torch patch version too).

        Flags that only choose which of several identical devices to use (visible-device variables)
        are recorded but not keyed, so a pool of identical machines stays comparable.
        """
        d = self.to_json()
        d["flags"] = {k: v for k, v in d["flags"].items() if not k.endswith(VOLATILE_SUFFIXES)}
        blob = json.dumps(d, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def to_json(self) -> dict[str, Any]:
        d = {
            k: getattr(self, k) for k in ("backend", "vendor", "device", "arch", "driver", "runtime", "torch")
        }
        d["flags"] = dict(self.flags)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Fingerprint:
        flags = d.get("flags") or {}
        _expect(isinstance(flags, dict), "fingerprint.flags must be an object")
        return cls(
            backend=_text(d, "backend", required=True),
            vendor=_text(d, "vendor"),
            device=_text(d, "device"),
            arch=_text(d, "arch"),
            driver=_text(d, "driver"),
            runtime=_text(d, "runtime"),
            torch=_text(d, "torch"),
            flags=tuple(
                sorted((str(k)[:200], _scalar_text(v, "fingerprint.flags", 200)) for k, v in flags.items())
            ),
        )


@dataclass(frozen=True)
class Signature:
    """A diagnosed failure mode with its measured evidence."""

    cause: str  # a key of kcgate.signatures.CAUSES, e.g. "low-precision-accumulator"
    summary: str  # one line, e.g. "behaves like an fp16 accumulator (11 effective bits)"
    evidence: tuple[tuple[str, float | str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        ev = {k: (clean_number(v) if isinstance(v, float) else v) for k, v in self.evidence}
        return {"cause": self.cause, "summary": self.summary, "evidence": ev}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Signature:
        ev = d.get("evidence") or {}
        _expect(isinstance(ev, dict), "signature.evidence must be an object")
        items = tuple(sorted((str(k)[:200], _evidence_value(v)) for k, v in ev.items()))
        return cls(cause=_text(d, "cause", required=True), summary=_text(d, "summary"), evidence=items)


CASE_FIELDS: tuple[str, ...] = (
    "case_id",
    "contract_id",
    "class",
    "op",
    "dtype",
    "shape",
    "seed",
    "status",
    "metrics",
    "signature",
    "message",
    "duration_s",
    "kernel_s",
    "oracle_s",
    "line",
)
"""The columns of a case row in a schema-2 results file (its ``case_fields``)."""
METRIC_FIELDS: tuple[str, ...] = (
    "budget_used",
    "max_abs_err",
    "max_rel_err",
    "max_ulp",
    "mismatches",
    "elements",
    "worst_index",
    "allowed_at_worst",
    "extra",
)
"""The columns of a case row's metrics (the file's ``metric_fields``)."""
GRAD_BUDGET = "grad_budget."  # metrics.extra key prefix: each input gradient's budget used (backward)
_METRICS_AT = CASE_FIELDS.index("metrics")
_TIMINGS_AT = tuple(CASE_FIELDS.index(k) for k in ("duration_s", "kernel_s", "oracle_s"))


@dataclass(frozen=True)
class Metrics:
    """Numbers measured for one case. ``budget_used`` = measured error / allowed error (1.0 = at the edge)."""

    budget_used: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    max_ulp: float | None = None
    mismatches: int = 0
    elements: int = 0
    worst_index: tuple[int, ...] = ()
    allowed_at_worst: float | None = None
    extra: tuple[tuple[str, float], ...] = ()

    @property
    def worst_grad(self) -> str:
        """The input whose gradient decided a backward case ("" when the forward output did, or no
        backward ran): the largest ``grad_budget.<name>`` extra, when no forward budget exceeds it."""
        extra = dict(self.extra)
        grads = [(v, k.removeprefix(GRAD_BUDGET)) for k, v in self.extra if k.startswith(GRAD_BUDGET)]
        if not grads:
            return ""
        budget, name = max(grads)
        return name if budget >= extra.get("out_budget", -1.0) else ""

    def to_row(self) -> list[Any]:
        """Values in ``METRIC_FIELDS`` order (non-finite numbers become null)."""
        return [
            clean_number(self.budget_used),
            clean_number(self.max_abs_err),
            clean_number(self.max_rel_err),
            clean_number(self.max_ulp),
            self.mismatches,
            self.elements,
            list(self.worst_index),
            clean_number(self.allowed_at_worst),
            {k: clean_number(v) for k, v in self.extra},
        ]

    def to_json(self) -> dict[str, Any]:
        return dict(zip(METRIC_FIELDS, self.to_row()))

    @classmethod
    def from_json(cls, d: Any) -> Metrics:
        if type(d) is not dict:
            raise _Invalid("case.metrics must be an object")
        return cls._validated([d.get(k) for k in METRIC_FIELDS])

    @classmethod
    def from_row(cls, row: Any) -> Metrics:
        if type(row) is not list or len(row) != len(METRIC_FIELDS):
            raise _Invalid(f"case.metrics must be a list of the {len(METRIC_FIELDS)} metric_fields")
        return cls._validated(row)

    @classmethod
    def _validated(cls, row: list[Any]) -> Metrics:
        budget, abs_err, rel_err, ulp, mismatches, elements, worst, allowed, extra = row
        if extra is None:
            extra = {}
        elif type(extra) is not dict:
            raise _Invalid("metrics.extra must be an object")
        if worst is None:
            worst = []
        elif type(worst) is not list or not all(type(i) is int for i in worst):
            raise _Invalid("metrics.worst_index must be ints")
        return build_frozen(
            cls,
            {
                "budget_used": _number(budget, "budget_used"),
                "max_abs_err": _number(abs_err, "max_abs_err"),
                "max_rel_err": _number(rel_err, "max_rel_err"),
                "max_ulp": _number(ulp, "max_ulp"),
                "mismatches": _count(mismatches, "mismatches"),
                "elements": _count(elements, "elements"),
                "worst_index": tuple(worst[:8]),
                "allowed_at_worst": _number(allowed, "allowed_at_worst"),
                "extra": extra_items(extra) if extra else (),
            },
        )


_NO_METRICS = Metrics()


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one case: a contract at one dtype, shape and seed on one runner."""

    case_id: str
    contract_id: str
    klass: str
    op: str
    dtype: str
    shape: tuple[int, ...]
    seed: int
    status: str  # pass | fail | error | refused
    metrics: Metrics = field(default_factory=Metrics)
    signature: Signature | None = None
    message: str = ""
    duration_s: float = 0.0  # the whole case: inputs, kernel calls, oracle and check
    kernel_s: float = 0.0  # inside the kernel (synchronized), all its calls
    oracle_s: float = 0.0  # inside the fp64 oracle or the Freivalds check
    line: int | None = None  # line of the contract in contracts.toml, for annotations

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    def to_row(self) -> list[Any]:
        """Values in ``CASE_FIELDS`` order, metrics as a row too: one line per case in a results file."""
        return [
            self.case_id,
            self.contract_id,
            self.klass,
            self.op,
            self.dtype,
            list(self.shape),
            self.seed,
            self.status,
            self.metrics.to_row(),
            self.signature.to_json() if self.signature else None,
            self.message,
            round(self.duration_s, 6),
            round(self.kernel_s, 6),
            round(self.oracle_s, 6),
            self.line,
        ]

    def to_json(self) -> dict[str, Any]:
        """One case as an object (the worker's protocol, and schema-1 files)."""
        d = dict(zip(CASE_FIELDS, self.to_row()))
        d["metrics"] = self.metrics.to_json()
        return d

    @classmethod
    def from_json(cls, d: Any) -> CaseResult:
        if type(d) is not dict:
            raise _Invalid("each case must be an object")
        metrics = d.get("metrics")
        return cls._validated(
            [d.get(k) for k in CASE_FIELDS], Metrics.from_json(metrics) if metrics else _NO_METRICS
        )

    @classmethod
    def from_row(cls, row: Any) -> CaseResult:
        if type(row) is not list or len(row) != len(CASE_FIELDS):
            raise _Invalid(f"each case must be a list of the {len(CASE_FIELDS)} case_fields")
        metrics = row[_METRICS_AT]
        return cls._validated(row, Metrics.from_row(metrics) if metrics is not None else _NO_METRICS)

    @classmethod
    def _validated(cls, row: list[Any], metrics: Metrics) -> CaseResult:
        # hot path (10^5 cases per report): plain ifs, so no message is formatted unless it is raised
        (
            case_id,
            contract_id,
            klass,
            op,
            dtype,
            shape,
            seed,
            status,
            _,
            sig,
            message,
            duration,
            kernel,
            oracle,
            line,
        ) = row
        if status not in STATUSES:
            raise _Invalid(f"case status {str(status)[:40]!r} is not one of {', '.join(STATUSES)}")
        if shape is None:
            shape = []
        elif type(shape) is not list or not all(type(i) is int for i in shape):
            raise _Invalid("case.shape must be ints")
        if sig is not None and type(sig) is not dict:
            raise _Invalid("case.signature must be an object or null")
        if line is not None and type(line) is not int:
            raise _Invalid("case.line must be an int")
        return build_frozen(
            cls,
            {
                "case_id": _string(case_id, "case_id", required=True),
                "contract_id": _string(contract_id, "contract_id", required=True),
                "klass": _string(klass, "class"),
                "op": _string(op, "op"),
                "dtype": _string(dtype, "dtype"),
                "shape": tuple(shape[:8]),
                "seed": _count(seed, "seed"),
                "status": status,
                "metrics": metrics,
                "signature": Signature.from_json(sig) if sig else None,
                "message": _string(message, "message"),
                "duration_s": _number(duration, "duration_s") or 0.0,
                "kernel_s": _number(kernel, "kernel_s") or 0.0,
                "oracle_s": _number(oracle, "oracle_s") or 0.0,
                "line": line,
            },
        )


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
        if not isinstance(self.cases, _table.CaseTable):
            object.__setattr__(self, "cases", _table.CaseTable.from_records(self.cases))

    @property
    def table(self) -> _table.CaseTable:
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
        _expect(isinstance(d, dict), "a results file must hold a JSON object")
        _expect(d.get("kind", "kcgate-results") == "kcgate-results", "this is not a kcgate results file")
        version = d.get("schema_version")
        _expect(
            version in READABLE_VERSIONS and type(version) is int,
            f"schema_version {str(version)[:20]} is not supported (this kcgate reads "
            f"{' and '.join(map(str, READABLE_VERSIONS))}); re-run `kcgate run` with this version of kcgate",
        )
        fp = d.get("fingerprint")
        _expect(isinstance(fp, dict), "fingerprint must be an object")
        cases = d.get("cases")
        _expect(isinstance(cases, list), "cases must be a list")
        meta = d.get("meta") or {}
        _expect(isinstance(meta, dict), "meta must be an object")
        return cls(
            runner=_text(d, "runner", required=True),
            fingerprint=Fingerprint.from_json(fp),
            cases=_case_table(d, version, cases),
            contracts_file=_text(d, "contracts_file") or "contracts.toml",
            complete=bool(d.get("complete", True)),
            kcgate_version=_text(d, "kcgate_version"),
            meta=tuple(sorted((str(k)[:200], _scalar_text(v, "meta", MAX_TEXT)) for k, v in meta.items())),
        )

    def with_cases(self, cases: Sequence[CaseResult], complete: bool | None = None) -> RunResult:
        return replace(self, cases=cases, complete=self.complete if complete is None else complete)


def _case_table(d: dict[str, Any], version: int, cases: list[Any]) -> _table.CaseTable:
    if version == 1:
        return _table.CaseTable.from_records(map(CaseResult.from_json, cases))
    for key, expected in (("case_fields", CASE_FIELDS), ("metric_fields", METRIC_FIELDS)):
        _expect(
            d.get(key) == list(expected),
            f"{key} is not {', '.join(expected)} (this kcgate's schema {SCHEMA_VERSION} columns); "
            "re-run `kcgate run` with this version of kcgate",
        )
    return _table.CaseTable.from_rows(cases)


# ---- files -------------------------------------------------------------------------------------


def dumps_run(run: RunResult, *, stable: bool = False) -> str:
    """Serialize: the header with sorted keys, then one line per case, so a baseline's review diff shows
    one changed line per changed case. ``stable`` drops volatile fields (timestamps, durations)."""
    d = run.to_json()
    rows = d.pop("cases")
    if stable:
        d["meta"] = {}
        for row in rows:
            for at in _TIMINGS_AT:
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
    except _Invalid as exc:
        raise ResultsError(f"{name}: {str(exc)[:300]}") from None


# ---- validation helpers --------------------------------------------------------------------------


class _Invalid(ValueError):
    pass


def _expect(cond: bool, message: str) -> None:
    if not cond:
        raise _Invalid(message)


def _reject_constant(name: str) -> float:
    # NaN/Infinity literals are not JSON; kcgate writes null for a missing number.
    return math.nan


_FLOAT_MAX_INT = 2**1024 - 2**970  # ints from here on round to 2**1024: float() overflows


def build_frozen(cls: type[Any], fields: dict[str, Any]) -> Any:
    """A frozen dataclass from already-validated fields, without its ``__init__`` (5x faster; used where
    10^5 records are built per report). ``fields`` must name every field; the round-trip tests would fail
    on a missing one."""
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


def _text(d: Mapping[str, Any], key: str, *, required: bool = False) -> str:
    return _string(d.get(key), key, required=required)


def _string(v: Any, key: str, *, required: bool = False) -> str:
    if type(v) is str:
        return v if len(v) <= MAX_TEXT else v[:MAX_TEXT]
    if v is not None:
        raise _Invalid(f"field {key!r} must be a string")
    if required:
        raise _Invalid(f"missing required field {key!r}")
    return ""


def _number(v: Any, key: str) -> float | None:
    # JSON gives exactly int or float (never bool here: type(True) is bool); inf - inf and nan - nan are nan
    if type(v) is float:
        return v if v - v == 0.0 else None
    if type(v) is int:
        return float(v) if -_FLOAT_MAX_INT < v < _FLOAT_MAX_INT else None
    if v is not None:
        raise _Invalid(f"field {key!r} must be a number")
    return None


def _count(v: Any, key: str) -> int:
    """An integer field; missing (null) reads as 0."""
    if type(v) is int:
        return v  # type: ignore[no-any-return]
    if v is not None:
        raise _Invalid(f"field {key!r} must be an integer")
    return 0


def extra_items(extra: dict[Any, Any]) -> tuple[tuple[str, float], ...]:
    """``metrics.extra`` as a record holds it: sorted (name, value) pairs, nulls dropped, names cut."""
    return tuple(sorted((str(k)[:200], extra_number(v)) for k, v in extra.items() if v is not None))


def extra_number(v: Any) -> float:
    """An extra value: any JSON number (an int too large for a float reads as NaN, never a crash)."""
    if type(v) is float:
        return v  # type: ignore[no-any-return]
    _expect(type(v) is int, "metrics.extra values must be numbers")
    return float(v) if -_FLOAT_MAX_INT < v < _FLOAT_MAX_INT else math.nan


def _evidence_value(v: Any) -> float | str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return "" if v is None else _scalar_text(v, "signature.evidence", MAX_TEXT)


def _scalar_text(v: Any, key: str, limit: int) -> str:
    """A JSON scalar as text; a nested array or object is refused, never stringified (it could be
    thousands of levels deep or millions of items long)."""
    if isinstance(v, (list, dict)):
        raise _Invalid(f"{key} values must be strings or numbers, not nested arrays or objects")
    return str(v)[:limit]


def _json_default(o: Any) -> Any:
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def clean_number(x: float | None) -> float | None:
    """None for NaN/inf, so files stay strict JSON (allow_nan=False)."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


# Last: the table module reads this module's field lists when it is imported.
from kcgate.results import table as _table  # noqa: E402
