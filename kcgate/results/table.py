"""A run's cases by column: validated in bulk, materialised as records only when something asks.

A report reads 10^5 cases and uses a few columns of each (id, contract, status, budget, error). Building
a frozen record per case cost about 10 µs, 1.2 s of a 10k-case x 6-runner diff. A ``CaseTable`` checks a
schema-2 file's rows a whole column at a time at C speed: row lengths, each column's set of JSON types,
one finite-sum test per float column, set inclusion for enums. Columns
are normalised on first use (exactly as ``CaseResult.from_row`` would), and records are built from those
columns only when iterated. Rows that fail the bulk check go through ``CaseResult.from_row`` one by one,
which names the defect, so the bulk check is an accelerator with one slow path that is also the reference.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from itertools import chain
from typing import Any, overload

from kcgate.results import columns as _c
from kcgate.results import records as _r

_present = partial(operator.is_not, None)
_NONE: type = type(None)
_Normaliser = Callable[[tuple[Any, ...]], tuple[Any, ...]]

# Derived from the column table: each case column by record attribute, each metric as "metrics.<name>".
_METRICS = _r.CASE_COLUMNS[_r.METRICS_AT]
_CASE_KEYS = tuple(c.field for c in _r.CASE_COLUMNS)
_METRIC_KEYS = tuple(f"metrics.{m.field}" for m in _r.METRIC_COLUMNS)
_ROW_TYPES = tuple(map(_c.bulk_types, _r.CASE_COLUMNS))
_METRIC_TYPES = tuple(map(_c.bulk_types, _r.METRIC_COLUMNS))
_COLUMNS: dict[str, _c.Column] = {
    **{c.field: c for c in _r.CASE_COLUMNS if c is not _METRICS},
    **dict(zip(_METRIC_KEYS, _r.METRIC_COLUMNS)),
}
_NORMALISERS: dict[str, _Normaliser] = {key: c.kind.normalise for key, c in _COLUMNS.items()}
_EAGER = tuple(key for key, c in _COLUMNS.items() if c.kind.eager)


class _Rejected(Exception):
    """The bulk check cannot vouch for these rows; the per-row path decides (and names the defect)."""


class CaseTable(Sequence["_r.CaseResult"]):
    """Immutable sequence of ``CaseResult`` backed by columns; equal to any sequence of the same records."""

    __slots__ = ("_cache", "_raw", "_records", "_size")

    def __init__(self, size: int, raw: dict[str, tuple[Any, ...]] | None, records: tuple[Any, ...] | None):
        self._size = size
        self._raw = raw  # type-checked file columns, keyed by case and metric field name
        self._records = records
        self._cache: dict[str, tuple[Any, ...]] = {}

    @classmethod
    def from_records(cls, records: Iterable[_r.CaseResult]) -> CaseTable:
        cases = tuple(records)
        return cls(len(cases), None, cases)

    @classmethod
    def from_rows(cls, rows: Any) -> CaseTable:
        """Schema-2 rows from an untrusted file; a defect raises the per-row path's error."""
        if type(rows) is not list:
            raise _c.Invalid("cases must be a list")
        try:
            table = cls(len(rows), _checked_columns(rows), None)
        except _Rejected:
            return cls.from_records(map(_r.CaseResult.from_row, rows))
        for key in _EAGER:  # rare objects with their own checks (signatures): judged now, not on first use
            table.column(key)
        return table

    # ---- columns -------------------------------------------------------------------------------

    def column(self, name: str) -> tuple[Any, ...]:
        """One case attribute (``CaseResult`` name, e.g. ``"klass"``) for every case, as records hold it."""
        return self._column(name, lambda c: getattr(c, name))

    def metric(self, name: str) -> tuple[Any, ...]:
        """One ``Metrics`` attribute for every case; a float metric is finite or None (records built in
        memory may hold NaN or inf: their column has None there, as a results file would)."""
        key = f"metrics.{name}"
        if _NORMALISERS.get(key) is _c.numbers:
            return self._column(key, lambda c: _c.clean_number(getattr(c.metrics, name)))
        return self._column(key, lambda c: getattr(c.metrics, name))

    def extra(self, key: str) -> tuple[float | None, ...]:
        """``metrics.extra[key]`` for every case, None where absent."""
        return self._column(f"extra.{key}", lambda c: _extra_value(c.metrics.extra, key))

    def _column(self, name: str, attr: Any) -> tuple[Any, ...]:
        found = self._cache.get(name)
        if found is None:
            if self._records is not None:
                found = tuple(map(attr, self._records))
            elif name.startswith("extra."):
                found = _extra_column(self._raw_column("metrics.extra"), name[len("extra.") :])
            else:
                found = _NORMALISERS[name](self._raw_column(name))
            self._cache[name] = found
        return found

    def _raw_column(self, name: str) -> tuple[Any, ...]:
        assert self._raw is not None
        return self._raw[name]

    @property
    def lazy(self) -> bool:
        """True until something asks for records (diff and compare never do)."""
        return self._records is None

    # ---- records -------------------------------------------------------------------------------

    def records(self) -> tuple[_r.CaseResult, ...]:
        """Every case as a record (built once, on first use)."""
        if self._records is None:
            self._records = _build_records(self)
            self._raw = None
            self._cache.clear()
        return self._records

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> _r.CaseResult: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[_r.CaseResult, ...]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return self.records()[index]

    def __iter__(self) -> Iterator[_r.CaseResult]:
        return iter(self.records())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (CaseTable, tuple, list)):
            return self.records() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.records())

    def __repr__(self) -> str:
        return f"CaseTable({self._size} cases)"


# ---- bulk checks ---------------------------------------------------------------------------------


def _checked_columns(rows: list[Any]) -> dict[str, tuple[Any, ...]]:
    """Type-check rows column-wise; raise _Rejected when any value needs the per-row path's judgement."""
    if not rows:
        return dict.fromkeys((*_CASE_KEYS, *_METRIC_KEYS), ())
    columns = dict(zip(_CASE_KEYS, _checked_zip(rows, _ROW_TYPES)))
    metrics = columns.pop(_METRICS.field)
    columns |= dict(zip(_METRIC_KEYS, _checked_zip(metrics, _METRIC_TYPES)))
    if not all(_COLUMNS[key].kind.accepts(column) for key, column in columns.items()):
        raise _Rejected
    return columns


def _checked_zip(
    rows: list[Any] | tuple[Any, ...], allowed: tuple[frozenset[type], ...]
) -> list[tuple[Any, ...]]:
    """Rows as columns, when every row is a list of the right length with an allowed type in each column.

    (A case without metrics, a null in the metrics column, is rare: the per-row path handles it.)"""
    if set(map(type, rows)) != {list} or set(map(len, rows)) != {len(allowed)}:
        raise _Rejected
    columns = list(zip(*rows))
    if not all(set(map(type, column)) <= ok for column, ok in zip(columns, allowed)):
        raise _Rejected
    return columns


# ---- normalisation (the kinds' normalisers; extra keys read one at a time) -------------------------


def _extra_column(extras: tuple[Any, ...], key: str) -> tuple[float | None, ...]:
    """One key of every extra dict, as ``extra_items`` keeps it (names are cut at 200 characters)."""
    present = tuple(filter(_present, extras))
    if max(map(len, chain.from_iterable(present)), default=0) > _c.MAX_KEY:
        return tuple(_extra_value(_c.extra_items(d), key) if d else None for d in extras)
    if len(present) == len(extras):
        values = tuple(map(operator.methodcaller("get", key), extras))
        if set(map(type, values)) <= {float, _NONE}:
            return values  # floats are kept as they are (extra_number is the identity on them)
    else:
        values = tuple(d.get(key) if d else None for d in extras)
    return tuple(None if v is None else _c.extra_number(v) for v in values)


def _extra_value(items: tuple[tuple[str, float], ...], key: str) -> float | None:
    """The value named ``key`` in a record's sorted extra pairs (the first, as a lookup by name finds it)."""
    return next((v for k, v in items if k == key), None)


def _build_records(table: CaseTable) -> tuple[_r.CaseResult, ...]:
    names = tuple(m.field for m in _r.METRIC_COLUMNS)
    metric_columns = [table.metric(m) for m in names]
    metrics = [_c.build_frozen(_r.Metrics, dict(zip(names, values))) for values in zip(*metric_columns)]
    case_attrs = [a for a in _CASE_KEYS if a != _METRICS.field]
    columns = [table.column(a) for a in case_attrs]
    return tuple(
        _c.build_frozen(_r.CaseResult, {**dict(zip(case_attrs, values)), _METRICS.field: m})
        for values, m in zip(zip(*columns), metrics)
    )
