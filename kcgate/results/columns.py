"""Column kinds of a results row: how one kind of value is checked, decoded, encoded and described.

A results file is untrusted input (CI artifacts, baselines), so every kind carries its limits and its two
readers: ``decode`` judges one value (the per-row path, which names the defect) and ``normalise`` turns a
whole bulk-checked column into the same values at C speed (``kcgate.results.table``). The columns
themselves, one row each, are ``kcgate.results.records.CASE_COLUMNS`` and ``METRIC_COLUMNS``. No torch.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import partial
from itertools import chain
from typing import Any

MAX_TEXT = 4096  # longest free-text value kept from an untrusted file
MAX_DIMS = 8  # most dimensions kept of a shape or an index
MAX_KEY = 200  # longest key kept of an untrusted object (metrics.extra, evidence, flags, meta)

_NONE: type = type(None)
_NUM = frozenset({int, float, _NONE})
_present = partial(operator.is_not, None)
_FLOAT_MAX_INT = 2**1024 - 2**970  # ints from here on round to 2**1024: float() overflows

Column_ = tuple[Any, ...]  # one column of values, a row position across every case


class Invalid(ValueError):
    """An untrusted value that does not fit its column (the loader adds the file's name)."""


class JUnit(Enum):
    """How a column is a per-case JUnit property (``kcgate.results.records.junit_properties``)."""

    NO = "no"
    PROPERTY = "property"  # in every JUnit kcgate writes: run --junit, report --junit, pytest --kcgate's
    # names the case (its id, class, status): only where the test case's own name, class and outcome are
    # not kcgate's (pytest --kcgate's items); kcgate's own JUnit carries them in the test case itself
    IDENTITY = "identity"


def optional_text(value: Any) -> str | None:
    """A value as a JUnit property's text; None (not measured) leaves the property out."""
    return None if value is None else str(value)


@dataclass(frozen=True)
class Kind:
    """One kind of column value: its JSON types and schema, its readers and its writer."""

    name: str
    json_types: frozenset[type]  # what an untrusted file may hold there (the bulk check)
    schema: Mapping[str, Any]  # its JSON Schema
    decode: Callable[[Any, Column], Any]  # one untrusted JSON value -> the record's value (raises Invalid)
    normalise: Callable[[Column_], Column_]  # a bulk-checked column -> the records' values (as decode)
    encode: Callable[[Any], Any]  # the record's value -> JSON
    accepts: Callable[[Column_], bool] = lambda column: True  # the bulk check beyond json_types
    limit: int | None = None  # untrusted input: longest text, or most items, kept
    junit: Callable[[Any], str | None] = optional_text  # a JUnit property's text (None: left out)
    eager: bool = False  # decoded when the file is read (its values have checks of their own)
    columns: tuple[Column, ...] = ()  # a nested row's columns (the case row's metrics)


@dataclass(frozen=True)
class Column:
    """One column of a results row: its name in the file, its kind and what it means."""

    name: str  # in the file's case_fields / metric_fields, the JSON Schema and JUnit properties
    kind: Kind
    description: str
    scope: str  # "case" or "metrics": the row it belongs to (error messages say "case.shape")
    required: bool = False  # a file without it is refused (otherwise null reads as the default)
    junit: JUnit = JUnit.NO  # whether and where it is a property of its case's JUnit test case
    attr: str = ""  # the record's attribute, where it differs from the name ("class": klass)

    @property
    def field(self) -> str:
        return self.attr or self.name

    @property
    def label(self) -> str:
        return f"{self.scope}.{self.name}"


def names(columns: tuple[Column, ...]) -> tuple[str, ...]:
    return tuple(c.name for c in columns)


def row_schema(columns: tuple[Column, ...]) -> dict[str, Any]:
    """A fixed-length array whose items are the columns, in order."""
    items = [{**c.kind.schema, "description": c.description} for c in columns]
    return {"type": "array", "prefixItems": items, "items": False, "minItems": len(columns)}


def row_encoder(columns: tuple[Column, ...]) -> Callable[[Any], list[Any]]:
    """A record's row in column order, each value through its kind's encoder: the function is generated
    from the table (as dataclasses generates ``__init__``), since rows are written once per case."""
    env = {f"e{i}": c.kind.encode for i, c in enumerate(columns)}
    values = (
        f"o.{c.field}" if c.kind.encode is same else f"e{i}(o.{c.field})" for i, c in enumerate(columns)
    )
    assert all(c.field.isidentifier() for c in columns)
    return eval(f"lambda o: [{', '.join(values)}]", env)  # type: ignore[no-any-return]  # noqa: S307


# ---- scalar readers ------------------------------------------------------------------------------


def expect(cond: bool, message: str) -> None:
    if not cond:
        raise Invalid(message)


def string(v: Any, key: str, *, required: bool = False) -> str:
    if type(v) is str:
        return v if len(v) <= MAX_TEXT else v[:MAX_TEXT]
    if v is not None:
        raise Invalid(f"field {key!r} must be a string")
    if required:
        raise Invalid(f"missing required field {key!r}")
    return ""


def number(v: Any, key: str) -> float | None:
    # JSON gives exactly int or float (never bool here: type(True) is bool); inf - inf and nan - nan are nan
    if type(v) is float:
        return v if v - v == 0.0 else None
    if type(v) is int:
        return float(v) if -_FLOAT_MAX_INT < v < _FLOAT_MAX_INT else None
    if v is not None:
        raise Invalid(f"field {key!r} must be a number")
    return None


def count(v: Any, key: str) -> int:
    """An integer field; missing (null) reads as 0."""
    if type(v) is int:
        return v  # type: ignore[no-any-return]
    if v is not None:
        raise Invalid(f"field {key!r} must be an integer")
    return 0


def scalar_text(v: Any, key: str, limit: int) -> str:
    """A JSON scalar as text; a nested array or object is refused, never stringified (it could be
    thousands of levels deep or millions of items long)."""
    if isinstance(v, (list, dict)):
        raise Invalid(f"{key} values must be strings or numbers, not nested arrays or objects")
    return str(v)[:limit]


def extra_items(extra: dict[Any, Any]) -> tuple[tuple[str, float], ...]:
    """``metrics.extra`` as a record holds it: sorted (name, value) pairs, nulls dropped, names cut."""
    return tuple(sorted((str(k)[:MAX_KEY], extra_number(v)) for k, v in extra.items() if v is not None))


def extra_number(v: Any) -> float:
    """An extra value: any JSON number (an int too large for a float reads as NaN, never a crash)."""
    if type(v) is float:
        return v  # type: ignore[no-any-return]
    expect(type(v) is int, "metrics.extra values must be numbers")
    return float(v) if -_FLOAT_MAX_INT < v < _FLOAT_MAX_INT else math.nan


def clean_number(x: float | None) -> float | None:
    """None for NaN/inf, so files stay strict JSON (allow_nan=False)."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


def build_frozen(cls: type[Any], fields: dict[str, Any]) -> Any:
    """A frozen dataclass from already-validated fields, without its ``__init__`` (5x faster; used where
    10^5 records are built per report). ``fields`` must name every field; the round-trip tests would fail
    on a missing one."""
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


# ---- per-value decoders (the per-row path: the reference the bulk path must equal) -----------------


def _decode_text(v: Any, col: Column) -> str:
    return string(v, col.name, required=col.required)


def _decode_ints(v: Any, col: Column) -> tuple[int, ...]:
    if v is None:
        return ()
    if type(v) is not list or not all(type(i) is int for i in v):
        raise Invalid(f"{col.label} must be ints")
    return tuple(v[:MAX_DIMS])


def _decode_line(v: Any, col: Column) -> int | None:
    if v is not None and type(v) is not int:
        raise Invalid(f"{col.label} must be an int")
    return v  # type: ignore[no-any-return]


def _decode_extra(v: Any, col: Column) -> tuple[tuple[str, float], ...]:
    if v is None:
        return ()
    if type(v) is not dict:
        raise Invalid(f"{col.label} must be an object")
    return extra_items(v) if v else ()


# ---- bulk normalisers (must equal the decoders; tests/results/test_table.py checks both ways) -------


def _text(column: Column_) -> Column_:
    if _NONE in set(map(type, column)):
        column = tuple("" if v is None else v for v in column)
    if max(map(len, column), default=0) > MAX_TEXT:
        column = tuple(v[:MAX_TEXT] for v in column)
    return column


def numbers(column: Column_) -> Column_:
    """``number`` per value: floats stay, ints become floats, non-finite becomes None."""
    if set(map(type, column)) <= {float, _NONE}:
        try:
            if math.isfinite(sum(filter(_present, column), 0.0)):
                return column  # every value finite: nothing to change
        except OverflowError:
            pass
    return tuple(number(v, "") for v in column)


def _counts(column: Column_) -> Column_:
    return tuple(0 if v is None else v for v in column) if _NONE in set(map(type, column)) else column


def _int_tuples(column: Column_) -> Column_:
    return tuple(() if v is None else tuple(v[:MAX_DIMS]) for v in column)


def _timings(column: Column_) -> Column_:
    return tuple(v or 0.0 for v in numbers(column))


def _extras(column: Column_) -> Column_:
    return tuple(extra_items(v) if v else () for v in column)


def same(value: Any) -> Any:
    """The identity: a normaliser or encoder with nothing to change."""
    return value


def _all_ints(column: Column_) -> bool:
    return set(map(type, chain.from_iterable(filter(_present, column)))) <= {int}


def _numeric_values(column: Column_) -> bool:
    return set(map(type, chain.from_iterable(map(dict.values, filter(_present, column))))) <= _NUM


def _shape_text(v: tuple[int, ...]) -> str:
    return "x".join(map(str, v))


# ---- the scalar kinds ----------------------------------------------------------------------------

_STR = {"type": "string"}
_NUMBER_OR_NULL = {"type": ["number", "null"]}

TEXT = Kind("text", frozenset({str, _NONE}), _STR, _decode_text, _text, same, limit=MAX_TEXT)
INTS = Kind(
    "ints",
    frozenset({list, _NONE}),
    {"type": "array", "items": {"type": "integer"}},
    _decode_ints,
    _int_tuples,
    list,
    accepts=_all_ints,
    limit=MAX_DIMS,
    junit=_shape_text,
)
COUNT = Kind(
    "count", frozenset({int, _NONE}), {"type": "integer"}, lambda v, c: count(v, c.name), _counts, same
)
NUMBER = Kind(
    "number", _NUM, _NUMBER_OR_NULL, lambda v, c: number(v, c.name), numbers, clean_number
)  # non-finite numbers are written and read as null
SECONDS = Kind(
    "seconds",
    _NUM,
    {"type": "number", "minimum": 0},
    lambda v, c: number(v, c.name) or 0.0,
    _timings,
    partial(round, ndigits=6),
)
LINE = Kind("line", frozenset({int, _NONE}), {"type": ["integer", "null"]}, _decode_line, same, same)
EXTRA = Kind(
    "extra",
    frozenset({dict, _NONE}),
    {"type": "object", "additionalProperties": _NUMBER_OR_NULL},
    _decode_extra,
    _extras,
    lambda items: {k: clean_number(v) for k, v in items},
    accepts=_numeric_values,
    limit=MAX_KEY,
)


def choice(values: tuple[str, ...]) -> Kind:
    """A text column holding one of ``values`` (case status)."""
    allowed = frozenset(values)

    def decode(v: Any, col: Column) -> Any:
        if v not in allowed:
            raise Invalid(f"{col.scope} {col.name} {str(v)[:40]!r} is not one of {', '.join(values)}")
        return v

    return Kind(
        "choice", frozenset({str}), {"enum": list(values)}, decode, same, same, accepts=allowed.issuperset
    )


def bulk_types(col: Column) -> frozenset[type]:
    """The JSON types the bulk check allows in ``col`` (a required column may not be null)."""
    return col.kind.json_types - {_NONE} if col.required else col.kind.json_types
