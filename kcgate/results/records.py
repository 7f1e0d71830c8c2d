"""The records of a results file and its column table: one ``Column`` row per column of a case row.

``CASE_COLUMNS`` and ``METRIC_COLUMNS`` are the one definition of the row layout. The row codec below
(``to_row``, ``from_row``), the bulk reader (``kcgate.results.table``), the file header's ``case_fields``
and ``metric_fields``, the JSON Schema of results files (``kcgate.render.schema``) and the per-case JUnit
properties (``junit_properties``: ``run --junit``, ``report --junit`` and the pytest plugin's
``record_property``) are all derived from them. No torch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from operator import attrgetter
from typing import Any

from kcgate.results.columns import (
    COUNT,
    EXTRA,
    INTS,
    LINE,
    MAX_KEY,
    MAX_TEXT,
    NUMBER,
    SECONDS,
    TEXT,
    Column,
    Invalid,
    JUnit,
    Kind,
    build_frozen,
    choice,
    clean_number,
    expect,
    names,
    row_encoder,
    row_schema,
    same,
    scalar_text,
    string,
)


class Status(str, Enum):
    """A case's outcome; members are their strings (``Status.PASS == "pass"``) in JSON and text alike."""

    PASS = "pass"  # the contract holds for this case
    FAIL = "fail"  # the kernel violates it
    ERROR = "error"  # the case could not be evaluated (crash, timeout, bad output)
    REFUSED = "refused"  # the kernel declined the case (unsupported dtype or shape)

    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]


STATUSES: tuple[str, ...] = tuple(s.value for s in Status)
# A passing case's recorded note (issues 46, 53), its message's first word: "inconclusive" where a statistical
# verdict (the sensitivity gate's, a refusal's) stayed undecided after its extra trials, or where the comparison
# means nothing (conditioning); "limitation", issue 46's note below the gate's line, read in older results.
# Not a block; ``kcgate diff`` shows it as drift.
PASS_NOTES: tuple[str, ...] = ("limitation: ", "inconclusive: ")


def is_pass_note(status: str, message: str) -> bool:
    """A passing case that carries one of the PASS_NOTES."""
    return status == Status.PASS and message.startswith(PASS_NOTES)


# A rerun on the base commit's code (`kcgate run --base-ref`): base fails alike (the failure is main's,
# never this PR's: kcgate.vocab.categories' "pre-existing"), or base passes or lacks the case (introduced).
PRE_EXISTING = "pre-existing"
INTRODUCED = "introduced"
ABSENT = "absent"  # base_rerun of a case whose contract, dtype or shape base does not plan
NO_KERNEL = "cannot import the kernel: "  # an error's message when the kernel is not there to run


def fails_alike(now: str, then: str) -> bool:
    """Whether a case that is ``now`` not passing was already so on the same inputs at base (``then``): a
    failure and an error match each other (a crash on base and a wrong answer now are one problem of the
    kernel), a refusal matches only a refusal."""
    if now == Status.PASS or then not in SEVERITY or then == Status.PASS:
        return False
    return (now == Status.REFUSED) == (then == Status.REFUSED)


UNEVALUATED = frozenset({Status.ERROR, Status.REFUSED})  # no verdict on the contract either way
# How bad an outcome is, to report the worst of several (trials, seeds, states): an error hides what a
# failure would have shown, and a refusal says only that the case cannot tell.
SEVERITY: dict[str, int] = {Status.PASS: 0, Status.REFUSED: 1, Status.FAIL: 2, Status.ERROR: 3}
VOLATILE_SUFFIXES = ("_VISIBLE_DEVICES", "ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR", "device_count")
# The `kcgate run` flags that override a contract's protocol and so can change a verdict: (flag, the run's
# ``meta`` key that records the value used). Absent from meta: every contract's own value was used. The
# PR comment's reproduce lines pass them again.
OVERRIDES = (("--held-out", "override.held_out"), ("--timeout", "override.timeout_s"))

# A flag per contract that sets ``env``: a digest of that env, the numerics its cases ran under. Not in the
# runner's key (one contract's env must not make every case incomparable); the diff compares it per contract.
CONTRACT_ENV = "contract_env:"
# A flag per distribution of ``[project] track``: its installed version ("not installed" when absent). Not
# keyed either: a PR that bumps the library under test is what the gate compares, never incomparable.
TRACKED = "track:"
UNKEYED_PREFIXES = (CONTRACT_ENV, TRACKED)
GRAD_BUDGET = "grad_budget."  # metrics.extra key prefix: each input gradient's budget used (backward)
OUT_BUDGET = "out_budget."  # metrics.extra key prefix: each named output's budget used (several outputs)


@dataclass(frozen=True)
class Fingerprint:
    """What a result was measured on; results compare only with the same fingerprint key."""

    backend: str  # a kind of kcgate.vocab.device_kinds
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
        d["flags"] = {
            k: v
            for k, v in d["flags"].items()
            if not k.endswith(VOLATILE_SUFFIXES) and not k.startswith(UNKEYED_PREFIXES)
        }
        blob = json.dumps(d, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def contract_envs(self) -> dict[str, str]:
        """Contract id -> the digest of its ``env`` (only contracts that set one)."""
        return {k[len(CONTRACT_ENV) :]: v for k, v in self.flags if k.startswith(CONTRACT_ENV)}

    def tracked(self) -> dict[str, str]:
        """Distribution -> its version, for each ``[project] track`` entry the run recorded."""
        return {k[len(TRACKED) :]: v for k, v in self.flags if k.startswith(TRACKED)}

    def with_tracked(self, versions: Mapping[str, str]) -> Fingerprint:
        """This fingerprint with a ``track:<distribution>`` flag per tracked distribution."""
        kept = tuple((k, v) for k, v in self.flags if not k.startswith(TRACKED))
        extra = tuple((f"{TRACKED}{name}", version) for name, version in versions.items())
        return replace(self, flags=tuple(sorted(kept + extra)))

    def with_contract_envs(self, envs: Mapping[str, Iterable[tuple[str, str]]]) -> Fingerprint:
        """This fingerprint with a ``contract_env:<id>`` flag per contract that sets ``env``."""
        extra = {f"{CONTRACT_ENV}{cid}": env_digest(env) for cid, env in envs.items() if env}
        kept = tuple((k, v) for k, v in self.flags if not k.startswith(CONTRACT_ENV))
        return replace(self, flags=tuple(sorted(kept + tuple(extra.items()))))

    def to_json(self) -> dict[str, Any]:
        d = {
            k: getattr(self, k) for k in ("backend", "vendor", "device", "arch", "driver", "runtime", "torch")
        }
        d["flags"] = dict(self.flags)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Fingerprint:
        flags = d.get("flags") or {}
        expect(isinstance(flags, dict), "fingerprint.flags must be an object")
        return cls(
            backend=text(d, "backend", required=True),
            vendor=text(d, "vendor"),
            device=text(d, "device"),
            arch=text(d, "arch"),
            driver=text(d, "driver"),
            runtime=text(d, "runtime"),
            torch=text(d, "torch"),
            flags=tuple(
                sorted(
                    (str(k)[:MAX_KEY], scalar_text(v, "fingerprint.flags", MAX_KEY)) for k, v in flags.items()
                )
            ),
        )


def env_digest(env: Iterable[tuple[str, str]]) -> str:
    """A short, order-free digest of an environment's variables."""
    return hashlib.sha256(json.dumps(sorted(env)).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Signature:
    """A diagnosed failure mode with its measured evidence."""

    cause: str  # a cause of kcgate.vocab.causes.CAUSE_TABLE, e.g. "low-precision-accumulator"
    summary: str  # one line, e.g. "behaves like an fp16 accumulator (11 effective bits)"
    evidence: tuple[tuple[str, float | str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        ev = {k: (clean_number(v) if isinstance(v, float) else v) for k, v in self.evidence}
        return {"cause": self.cause, "summary": self.summary, "evidence": ev}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Signature:
        ev = d.get("evidence") or {}
        expect(isinstance(ev, dict), "signature.evidence must be an object")
        items = tuple(sorted((str(k)[:MAX_KEY], _evidence_value(v)) for k, v in ev.items()))
        return cls(cause=text(d, "cause", required=True), summary=text(d, "summary"), evidence=items)


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
    cr_ulp: float | None = (
        None  # 16- and 8-bit outputs: the largest distance from the correctly rounded result
    )
    cr_miss: float | None = None  # 16- and 8-bit outputs: the share of elements not correctly rounded

    @property
    def worst_grad(self) -> str:
        """The input whose gradient decided a backward case ("" when the forward output did, or no
        backward ran): the largest ``grad_budget.<name>`` extra, where it exceeds the forward budget."""
        extra = dict(self.extra)
        grads = [(v, k.removeprefix(GRAD_BUDGET)) for k, v in self.extra if k.startswith(GRAD_BUDGET)]
        if not grads:
            return ""
        budget, name = max(grads)
        # as the trial decides (kcgate.engine.backward._decide): the forward output wins a tie (both NaN)
        return name if budget > extra.get("out_budget", -1.0) else ""

    @property
    def worst_output(self) -> str:
        """The named output that decided a case of several outputs ("" for one output, or when a gradient
        decided): the largest ``out_budget.<name>`` extra."""
        outs = [(v, k.removeprefix(OUT_BUDGET)) for k, v in self.extra if k.startswith(OUT_BUDGET)]
        return max(outs)[1] if outs and not self.worst_grad else ""

    @property
    def parts_over(self) -> list[tuple[str, float]]:
        """Each named output and input gradient over its bound, worst first: ``("output 'residual'", 9.9e4)``,
        ``("the gradient of 'x'", 1.0e5)``; the one that decided is first but for ties."""
        parts = [
            (
                f"output {k.removeprefix(OUT_BUDGET)!r}"
                if k.startswith(OUT_BUDGET)
                else f"the gradient of {k.removeprefix(GRAD_BUDGET)!r}",
                v,
            )
            for k, v in self.extra
            if k.startswith((OUT_BUDGET, GRAD_BUDGET)) and not v <= 1.0  # NaN is over
        ]
        return sorted(parts, key=lambda p: -p[1] if p[1] == p[1] else float("-inf"))

    def to_row(self) -> list[Any]:
        """Values in ``METRIC_FIELDS`` order (non-finite numbers become null)."""
        return _metric_row(self)

    def to_json(self) -> dict[str, Any]:
        return dict(zip(METRIC_FIELDS, self.to_row()))

    @classmethod
    def from_json(cls, d: Any) -> Metrics:
        if type(d) is not dict:
            raise Invalid("case.metrics must be an object")
        return cls._validated([d.get(k) for k in METRIC_FIELDS])

    @classmethod
    def from_row(cls, row: Any) -> Metrics:
        if type(row) is not list or len(row) != len(METRIC_FIELDS):
            raise Invalid(f"case.metrics must be a list of the {len(METRIC_FIELDS)} metric_fields")
        return cls._validated(row)

    @classmethod
    def _validated(cls, row: list[Any]) -> Metrics:
        return build_frozen(cls, {f: decode(v, c) for (f, decode, c), v in zip(_METRIC_DECODE, row)})  # type: ignore[no-any-return]


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
    status: str  # a Status
    metrics: Metrics = field(default_factory=Metrics)
    signature: Signature | None = None
    message: str = ""
    duration_s: float = 0.0  # the whole case: inputs, kernel calls, oracle and check
    kernel_s: float = 0.0  # inside the kernel (synchronized), all its calls
    oracle_s: float = 0.0  # inside the fp64 oracle or the Freivalds check
    line: int | None = None  # line of the contract in contracts.toml (or in source), for annotations
    source: str = ""  # the .py a discovered contract is declared in (Contract.source); "": contracts.toml
    harness_s: float = (
        0.0  # kcgate's own share: duration_s less kernel_s and oracle_s (inputs, checks, compare)
    )
    shrunk_shape: tuple[
        int, ...
    ] = ()  # the smallest shape found failing with the same cause (kcgate.engine.shrink)
    # (nonzero input elements, elements) of the sparsest input found failing alike at that shape; (): none
    shrunk_nonzero: tuple[int, ...] = ()
    # `kcgate run --base-ref`: a case that failed (or errored) here and not on the baseline's same inputs,
    # rerun on the base commit's code with its seed (kcgate.execution.attribution)
    attribution: str = ""
    base_commit: str = ""  # the commit it was rerun on
    base_rerun: str = ""  # the rerun's status there (a Status), or "absent": base has no such case
    base_summary: str = ""  # the rerun's signature summary or message, in one line

    @property
    def tensor(self) -> tuple[str, str]:
        """(key, name) of the tensor the case failed on: the signature's (``grad``, ``output`` or ``tensor``
        evidence: what the diagnosis or an integrity check saw it on), else the one with the largest budget;
        ("", "") where neither names one."""
        ev = dict(self.signature.evidence) if self.signature else {}
        for key in ("grad", "output", "tensor"):
            if isinstance(ev.get(key), str):
                return key, str(ev[key])
        m = self.metrics
        return (
            ("grad", m.worst_grad)
            if m.worst_grad
            else ("output", m.worst_output)
            if m.worst_output
            else ("", "")
        )

    @property
    def ok(self) -> bool:
        return self.status == Status.PASS

    def to_row(self) -> list[Any]:
        """Values in ``CASE_FIELDS`` order, metrics as a row too: one line per case in a results file."""
        return _case_row(self)

    def to_json(self) -> dict[str, Any]:
        """One case as an object (the worker's protocol, and schema-1 files)."""
        d = dict(zip(CASE_FIELDS, self.to_row()))
        d[_METRICS.name] = self.metrics.to_json()
        return d

    @classmethod
    def from_json(cls, d: Any) -> CaseResult:
        if type(d) is not dict:
            raise Invalid("each case must be an object")
        metrics = d.get(_METRICS.name)
        return cls._validated(
            [d.get(k) for k in CASE_FIELDS], Metrics.from_json(metrics) if metrics else _NO_METRICS
        )

    @classmethod
    def from_row(cls, row: Any) -> CaseResult:
        if type(row) is not list or len(row) != len(CASE_FIELDS):
            raise Invalid(f"each case must be a list of the {len(CASE_FIELDS)} case_fields")
        return cls._validated(row, _METRICS.kind.decode(row[METRICS_AT], _METRICS))

    @classmethod
    def _validated(cls, row: list[Any], metrics: Metrics) -> CaseResult:
        fields = {f: decode(row[i], c) for i, f, decode, c in _CASE_DECODE}
        fields[_METRICS.field] = metrics
        return build_frozen(cls, fields)  # type: ignore[no-any-return]


# ---- validation helpers --------------------------------------------------------------------------


def text(d: Mapping[str, Any], key: str, *, required: bool = False) -> str:
    """The text value of ``key`` in an untrusted object ("" when absent, cut at MAX_TEXT)."""
    return string(d.get(key), key, required=required)


def _evidence_value(v: Any) -> float | str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return "" if v is None else scalar_text(v, "signature.evidence", MAX_TEXT)


def _decode_signature(v: Any, col: Column) -> Signature | None:
    if v is not None and type(v) is not dict:
        raise Invalid(f"{col.label} must be an object or null")
    return Signature.from_json(v) if v else None


def _encode_signature(s: Signature | None) -> dict[str, Any] | None:
    return s.to_json() if s else None


def _decode_metrics(v: Any, col: Column) -> Metrics:
    return Metrics.from_row(v) if v is not None else _NO_METRICS


# ---- the column table ----------------------------------------------------------------------------

SIGNATURE = Kind(
    "signature",
    frozenset({dict, type(None)}),
    {
        "type": ["object", "null"],
        "required": ["cause", "summary"],
        "properties": {
            "cause": {"type": "string"},
            "summary": {"type": "string"},
            "evidence": {"type": "object"},
        },
    },
    _decode_signature,
    lambda column: tuple(Signature.from_json(v) if v else None for v in column),
    _encode_signature,
    junit=lambda s: s.cause if s else None,
    eager=True,
)


def _metric(name: str, kind: Kind, description: str, *, junit: JUnit = JUnit.NO) -> Column:
    return Column(name, kind, description, "metrics", junit=junit)


_P, _ID = JUnit.PROPERTY, JUnit.IDENTITY
METRIC_COLUMNS: tuple[Column, ...] = (
    _metric("budget_used", NUMBER, "measured error / allowed error (1.0: at the edge)", junit=_P),
    _metric("max_abs_err", NUMBER, "the largest absolute error", junit=_P),
    _metric("max_rel_err", NUMBER, "the largest relative error", junit=_P),
    _metric("max_ulp", NUMBER, "the largest error in units in the last place", junit=_P),
    _metric("mismatches", COUNT, "elements outside their bound", junit=_P),
    _metric("elements", COUNT, "elements compared", junit=_P),
    _metric("worst_index", INTS, "the index of the worst element"),
    _metric("allowed_at_worst", NUMBER, "the error allowed at the worst element", junit=_P),
    _metric("extra", EXTRA, "named measurements: grad_budget.<input> per gradient, out_budget, ..."),
    # appended (a file written before them reads them as null): 16- and 8-bit float outputs only
    _metric(
        "cr_ulp",
        NUMBER,
        "16/8-bit outputs: the largest distance from the correctly rounded fp64 result, in ULPs",
    ),
    _metric(
        "cr_miss",
        NUMBER,
        "16/8-bit outputs: the share of elements not correctly rounded (what budget drift compares)",
    ),
)
_metric_row = row_encoder(METRIC_COLUMNS)
METRICS = Kind(
    "metrics",
    frozenset({list, type(None)}),
    row_schema(METRIC_COLUMNS),
    _decode_metrics,
    same,  # split into the metric columns by the bulk reader
    _metric_row,
    columns=METRIC_COLUMNS,
)


def _case(name: str, kind: Kind, description: str, **kw: Any) -> Column:
    return Column(name, kind, description, "case", **kw)


CASE_COLUMNS: tuple[Column, ...] = (
    _case(
        "case_id",
        TEXT,
        "the case: contract, dtype, shape and seed (`kcgate run -k CASE_ID`)",
        required=True,
        junit=_ID,
    ),
    _case("contract_id", TEXT, "the contract's id in the contracts file", required=True),
    _case("class", TEXT, "the contract class, e.g. C-PRC-01", attr="klass", junit=_ID),
    _case("op", TEXT, "the op family"),
    _case("dtype", TEXT, "the input dtype", junit=_P),
    _case("shape", INTS, "the case's shape", junit=_P),
    _case("seed", COUNT, "the case's seed (`kcgate run --seed` reruns the case exactly)", junit=_P),
    _case(
        "status",
        choice(STATUSES),
        "pass: the contract holds; fail: violated; error: not evaluated; refused",
        junit=_ID,
    ),
    _case("metrics", METRICS, "the numbers measured, a row of metric_fields"),
    _case("signature", SIGNATURE, "the diagnosed failure mode (cause, summary, evidence), or null", junit=_P),
    _case("message", TEXT, "what happened, in one line"),
    _case("duration_s", SECONDS, "the whole case: inputs, kernel calls, oracle and check"),
    _case("kernel_s", SECONDS, "inside the kernel (synchronized), all its calls"),
    _case("oracle_s", SECONDS, "inside the fp64 oracle or the Freivalds check"),
    _case("line", LINE, "the contract's line in the contracts file (or in source), for annotations"),
    _case(
        "source",
        TEXT,
        "the file a discovered contract is declared in, relative to the contracts file's directory; empty: the contracts file",
    ),
    _case(
        "harness_s",
        SECONDS,
        "kcgate's own share of the case: duration_s less kernel_s and oracle_s (inputs, guard bands, checks, "
        "comparisons); 0 in files written before it was recorded",
    ),
    _case(
        "shrunk_shape",
        INTS,
        "a failed case: the smallest shape found that fails with the same cause on the case's seed "
        "(`kcgate run --shape`); empty: not searched or none smaller",
    ),
    _case(
        "shrunk_nonzero",
        INTS,
        "a failed case: [nonzero input elements, elements] of the sparsest input found at the shrunk shape (the "
        "case's own where none is smaller) that fails with the same cause, the other elements set to 0; "
        "empty: not searched or none sparser",
    ),
    _case(
        "attribution",
        TEXT,
        "`kcgate run --base-ref`: a case that failed or errored here and not on the baseline's same inputs, "
        "rerun on the base commit's code with its seed: pre-existing (base fails alike) or introduced (base "
        "passes, or lacks the case); empty: not rerun",
    ),
    _case(
        "base_commit", TEXT, "the commit the case was rerun on (`kcgate run --base-ref`); empty: not rerun"
    ),
    _case(
        "base_rerun",
        TEXT,
        "the rerun's status on the base commit (pass, fail, error, refused), or absent (base does not plan "
        "the case); empty: not rerun",
    ),
    _case("base_summary", TEXT, "the rerun's signature summary or message on the base commit, in one line"),
)
CASE_FIELDS: tuple[str, ...] = names(CASE_COLUMNS)
"""The columns of a case row in a schema-2 results file (its ``case_fields``)."""
METRIC_FIELDS: tuple[str, ...] = names(METRIC_COLUMNS)
"""The columns of a case row's metrics (the file's ``metric_fields``)."""

METRICS_AT = next(i for i, c in enumerate(CASE_COLUMNS) if c.kind is METRICS)
_METRICS = CASE_COLUMNS[METRICS_AT]
# The row codec's hot loops, from the table: values in column order, each kind's encoder (None: the value
# is its JSON) and decoder. A row is decoded in table order, except that its status is judged first (a file
# that is no results file is named by its statuses); metrics are decoded before the row's other columns.
_case_row = row_encoder(CASE_COLUMNS)
_METRIC_DECODE = tuple((c.field, c.kind.decode, c) for c in METRIC_COLUMNS)
_CASE_DECODE = tuple(
    sorted(
        ((i, c.field, c.kind.decode, c) for i, c in enumerate(CASE_COLUMNS) if c.kind is not METRICS),
        key=lambda entry: entry[3].name != "status",
    )
)
TIMINGS_AT = tuple(i for i, c in enumerate(CASE_COLUMNS) if c.kind is SECONDS)  # zeroed in stable files


def _junit_columns(wanted: frozenset[JUnit]) -> tuple[tuple[Column, Callable[[CaseResult], Any]], ...]:
    """The columns marked ``wanted``, in table order (metrics in their place), each with its reader."""
    found: list[tuple[Column, Callable[[CaseResult], Any]]] = []
    for c in CASE_COLUMNS:
        if c.kind is METRICS:
            found += [(m, attrgetter(f"{c.field}.{m.field}")) for m in METRIC_COLUMNS if m.junit in wanted]
        elif c.junit in wanted:
            found.append((c, attrgetter(c.field)))
    return tuple(found)


_JUNIT = {
    False: _junit_columns(frozenset({JUnit.PROPERTY})),
    True: _junit_columns(frozenset({JUnit.PROPERTY, JUnit.IDENTITY})),
}


def junit_properties(case: CaseResult, *, identity: bool = False) -> list[tuple[Column, str]]:
    """The case's JUnit properties, the one list every JUnit writer reads: each column marked
    ``JUnit.PROPERTY`` (with ``identity``, ``JUnit.IDENTITY`` too: for a test case whose name, class and
    outcome are not kcgate's), in table order with the metrics in their place, as its kind's text. A value
    with no text (no signature, a number not measured) is left out. The writer names them: ``run --junit``
    by the column's name, ``report --junit`` a metric as ``metric.<name>``, pytest ``kcgate.<name>``."""
    texts = ((c, c.kind.junit(read(case))) for c, read in _JUNIT[identity])
    return [(c, text) for c, text in texts if text is not None]
