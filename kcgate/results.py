"""The results model: frozen records with explicit JSON round trips, atomic writes and validation.

Results files cross trust boundaries (CI artifacts, baselines), so ``load_run`` treats them as
untrusted: size-capped, schema-checked, and every number checked for type. No torch here.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kcgate.errors import ResultsError

SCHEMA_VERSION = 1
MAX_RESULTS_BYTES = 64 * 1024 * 1024
MAX_TEXT = 4096  # longest free-text field kept from an untrusted file
STATUSES = ("pass", "fail", "error", "refused")
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
            flags=tuple(sorted((str(k)[:200], str(v)[:200]) for k, v in flags.items())),
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

    def to_json(self) -> dict[str, Any]:
        return {
            "budget_used": clean_number(self.budget_used),
            "max_abs_err": clean_number(self.max_abs_err),
            "max_rel_err": clean_number(self.max_rel_err),
            "max_ulp": clean_number(self.max_ulp),
            "mismatches": self.mismatches,
            "elements": self.elements,
            "worst_index": list(self.worst_index),
            "allowed_at_worst": clean_number(self.allowed_at_worst),
            "extra": {k: clean_number(v) for k, v in self.extra},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Metrics:
        extra = d.get("extra") or {}
        if type(extra) is not dict:
            raise _Invalid("metrics.extra must be an object")
        wi = d.get("worst_index") or []
        if type(wi) is not list or not all(type(i) is int for i in wi):
            raise _Invalid("metrics.worst_index must be ints")
        return _build(
            cls,
            {
                "budget_used": _num(d, "budget_used"),
                "max_abs_err": _num(d, "max_abs_err"),
                "max_rel_err": _num(d, "max_rel_err"),
                "max_ulp": _num(d, "max_ulp"),
                "mismatches": _int(d, "mismatches"),
                "elements": _int(d, "elements"),
                "worst_index": tuple(wi[:8]),
                "allowed_at_worst": _num(d, "allowed_at_worst"),
                "extra": tuple(
                    sorted((str(k)[:200], _finite_or_nan(v)) for k, v in extra.items() if v is not None)
                )
                if extra
                else (),
            },
        )


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
    duration_s: float = 0.0
    line: int | None = None  # line of the contract in contracts.toml, for annotations

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    def to_json(self) -> dict[str, Any]:
        return {
            "case_id": self.case_id,
            "contract_id": self.contract_id,
            "class": self.klass,
            "op": self.op,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "seed": self.seed,
            "status": self.status,
            "metrics": self.metrics.to_json(),
            "signature": self.signature.to_json() if self.signature else None,
            "message": self.message,
            "duration_s": round(self.duration_s, 6),
            "line": self.line,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CaseResult:
        # hot path (10^5 cases per report): plain ifs, so no message is formatted unless it is raised
        if type(d) is not dict:
            raise _Invalid("each case must be an object")
        status = d.get("status")
        if status not in STATUSES:
            raise _Invalid(f"case status {str(status)[:40]!r} is not one of {', '.join(STATUSES)}")
        shape = d.get("shape") or []
        if type(shape) is not list or not all(type(i) is int for i in shape):
            raise _Invalid("case.shape must be ints")
        sig = d.get("signature")
        if sig is not None and type(sig) is not dict:
            raise _Invalid("case.signature must be an object or null")
        metrics = d.get("metrics") or {}
        if type(metrics) is not dict:
            raise _Invalid("case.metrics must be an object")
        line = d.get("line")
        if line is not None and type(line) is not int:
            raise _Invalid("case.line must be an int")
        return _build(
            cls,
            {
                "case_id": _text(d, "case_id", required=True),
                "contract_id": _text(d, "contract_id", required=True),
                "klass": _text(d, "class"),
                "op": _text(d, "op"),
                "dtype": _text(d, "dtype"),
                "shape": tuple(shape[:8]),
                "seed": _int(d, "seed"),
                "status": status,
                "metrics": Metrics.from_json(metrics),
                "signature": Signature.from_json(sig) if sig else None,
                "message": _text(d, "message"),
                "duration_s": _num(d, "duration_s") or 0.0,
                "line": line,
            },
        )


@dataclass(frozen=True)
class RunResult:
    """All cases of one run on one runner (or the merge of its shards)."""

    runner: str
    fingerprint: Fingerprint
    cases: tuple[CaseResult, ...]
    contracts_file: str = "contracts.toml"
    complete: bool = True
    kcgate_version: str = ""
    meta: tuple[tuple[str, str], ...] = ()  # volatile facts (timestamps, host); dropped from baselines

    def to_json(self) -> dict[str, Any]:
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
            "cases": [c.to_json() for c in self.cases],
        }

    @classmethod
    def from_json(cls, d: Any) -> RunResult:
        _expect(isinstance(d, dict), "a results file must hold a JSON object")
        _expect(d.get("kind", "kcgate-results") == "kcgate-results", "this is not a kcgate results file")
        version = d.get("schema_version")
        _expect(
            version == SCHEMA_VERSION,
            f"schema_version {str(version)[:20]} is not supported (this kcgate reads {SCHEMA_VERSION}); "
            "re-run `kcgate run` with this version of kcgate",
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
            cases=tuple(CaseResult.from_json(c) for c in cases),
            contracts_file=_text(d, "contracts_file") or "contracts.toml",
            complete=bool(d.get("complete", True)),
            kcgate_version=_text(d, "kcgate_version"),
            meta=tuple(sorted((str(k)[:200], str(v)[:MAX_TEXT]) for k, v in meta.items())),
        )

    def with_cases(self, cases: tuple[CaseResult, ...], complete: bool | None = None) -> RunResult:
        return replace(self, cases=cases, complete=self.complete if complete is None else complete)


# ---- files -------------------------------------------------------------------------------------


def dumps_run(run: RunResult, *, stable: bool = False) -> str:
    """Serialize; ``stable`` drops volatile fields so baselines diff cleanly in review."""
    d = run.to_json()
    if stable:
        d["meta"] = {}
        for c in d["cases"]:
            c["duration_s"] = 0.0
    return json.dumps(d, sort_keys=True, indent=1, allow_nan=False, default=_json_default) + "\n"


def write_run(path: Path, run: RunResult, *, stable: bool = False) -> None:
    """Write atomically: a reader (or a kill -9) never sees a half-written file."""
    write_atomic(path, dumps_run(run, stable=stable))


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_run(path: Path, *, max_bytes: int = MAX_RESULTS_BYTES) -> RunResult:
    """Read an untrusted results file; any defect becomes a ResultsError naming the file and the fix."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read results file ({exc.strerror}); check the path") from None
    if size > max_bytes:
        raise ResultsError(
            f"{path}: results file is {size} bytes, over the {max_bytes}-byte cap; "
            "it is not a kcgate results file or it was tampered with"
        )
    try:
        data = json.loads(path.read_bytes(), parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ResultsError(
            f"{path}: not valid JSON ({str(exc)[:200]}); re-run `kcgate run` to regenerate it"
        ) from None
    try:
        return RunResult.from_json(data)
    except _Invalid as exc:
        raise ResultsError(f"{path}: {exc}") from None


def parse_run(text: str, name: str = "<results>") -> RunResult:
    try:
        return RunResult.from_json(json.loads(text, parse_constant=_reject_constant))
    except (ValueError, _Invalid) as exc:
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


_FLOAT_MAX_INT = 2**1024  # larger ints overflow float()


def _build(cls: type[Any], fields: dict[str, Any]) -> Any:
    """A frozen dataclass from already-validated fields, without its __init__ (5x faster on 10^5 records).

    ``fields`` must name every field exactly; the JSON round-trip tests would fail on a missing one.
    """
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


def _text(d: Mapping[str, Any], key: str, *, required: bool = False) -> str:
    v = d.get(key)
    if type(v) is str:
        return v if len(v) <= MAX_TEXT else v[:MAX_TEXT]
    if v is not None:
        raise _Invalid(f"field {key!r} must be a string")
    if required:
        raise _Invalid(f"missing required field {key!r}")
    return ""


def _num(d: Mapping[str, Any], key: str) -> float | None:
    # JSON gives exactly int or float (never bool here: type(True) is bool); inf - inf and nan - nan are nan
    v = d.get(key)
    if type(v) is float:
        return v if v - v == 0.0 else None
    if type(v) is int:
        return float(v) if -_FLOAT_MAX_INT < v < _FLOAT_MAX_INT else None
    if v is not None:
        raise _Invalid(f"field {key!r} must be a number")
    return None


def _int(d: Mapping[str, Any], key: str) -> int:
    v = d.get(key, 0)
    if type(v) is not int:
        raise _Invalid(f"field {key!r} must be an integer")
    return v  # type: ignore[no-any-return]


def _finite_or_nan(v: Any) -> float:
    _expect(isinstance(v, (int, float)) and not isinstance(v, bool), "metrics.extra values must be numbers")
    return float(v)


def _evidence_value(v: Any) -> float | str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return "" if v is None else str(v)[:MAX_TEXT]


def _json_default(o: Any) -> Any:
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def clean_number(x: float | None) -> float | None:
    """None for NaN/inf, so files stay strict JSON (allow_nan=False)."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)
