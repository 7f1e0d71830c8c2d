"""JSON Schemas: of contracts.toml (for editors, `kcgate schema`) and of results files. The first is generated
from the field table the loader checks against (kcgate.contracts.fields), so it cannot drift from the code. No
torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kcgate.contracts.fields import FILE_FIELDS, ID_PATTERN, IMPORT_PATTERN, Field
from kcgate.results.columns import row_schema
from kcgate.results.model import SCHEMA_VERSION
from kcgate.results.records import CASE_COLUMNS, CASE_FIELDS, METRIC_FIELDS
from kcgate.vocab import dtypes
from kcgate.vocab.catalogue import CATALOGUE

_STR = {"type": "string"}
_IMPORT = {"type": "string", "pattern": IMPORT_PATTERN}
_ARG = {"description": "an input name, a size placeholder such as {n}, a literal or a list of these"}


def _enum(values: Any, desc: str = "") -> dict[str, Any]:
    d: dict[str, Any] = {"enum": list(values)}
    if desc:
        d["description"] = desc
    return d


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


def _list(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


_CONSTRAINTS = {
    "type": "object",
    "additionalProperties": {"oneOf": [_STR, _list(_STR)]},
    "examples": [{"m": "multiple_of(16)", "k": "range(16, 8192)", "3": "even"}],
}


def _choices(f: Field) -> dict[str, Any]:
    """The row's allowed values; dtype rows also accept the aliases the loader canonicalises."""
    aliases = tuple(dtypes.ALIASES) if f.type in ("dtype", "dtypes") else ()
    return _enum(f.choices + aliases) if f.choices else dict(_STR)


def _limits(f: Field, kind: str) -> dict[str, Any]:
    d: dict[str, Any] = {"type": kind}
    if f.minimum is not None:
        d["exclusiveMinimum" if f.exclusive else "minimum"] = f.minimum
    if f.maximum is not None:
        d["maximum"] = f.maximum
    return d


def _table(fields: tuple[Field, ...]) -> dict[str, Any]:
    return _obj({f.key: field_schema(f) for f in fields}, tuple(f.key for f in fields if f.required))


# How each row type of kcgate.contracts.fields.TYPES is written in JSON Schema.
_TYPE_SCHEMAS: dict[str, Callable[[Field], dict[str, Any]]] = {
    "string": _choices,
    "choice": _choices,
    "dtype": _choices,
    "strings": lambda f: _list(_choices(f)),
    "dtypes": lambda f: _list(_choices(f)),
    "import": lambda f: dict(_IMPORT),
    "id": lambda f: {"type": "string", "pattern": ID_PATTERN},
    "date": lambda f: {"type": "string", "format": "date"},
    "number": lambda f: _limits(f, "number"),
    "integer": lambda f: _limits(f, "integer"),
    "integers": lambda f: _list(_limits(f, "integer")),
    "boolean": lambda f: {"type": "boolean"},
    "shapes": lambda f: _list(_list({"type": "integer", "minimum": 1})),
    "constraints": lambda f: dict(_CONSTRAINTS),
    "table": lambda f: _table(f.fields),
    "tables": lambda f: _list(_table(f.fields)),
    "mapping": lambda f: {"type": "object", "additionalProperties": _ARG},
    "array": lambda f: _list(_ARG),
    "env": lambda f: {"type": "object", "additionalProperties": _STR},
    "params": lambda f: {"type": "object"},
    "per-input": lambda f: {"type": "object", "additionalProperties": _table(f.fields)},
}
_ALTERNATIVES: dict[str, Callable[[Field], dict[str, Any]]] = {
    "table": lambda f: _table(f.fields),
    "false": lambda f: {"const": False},
}


def field_schema(f: Field) -> dict[str, Any]:
    """One row as JSON Schema: its type, allowed values, limits, default, description and since-version."""
    d = _TYPE_SCHEMAS[f.type](f)
    if f.alternative:
        d = {"oneOf": [d, _ALTERNATIVES[f.alternative](f)]}
    d["description"] = _described(f.description, _DETAIL.get(f.key))
    if f.default is not None and f.default != ():
        d["default"] = list(f.default) if isinstance(f.default, tuple) else f.default
    d["x-since"] = f.since
    if f.source:
        d["x-values-from"] = f.source  # the table that defines the allowed values
    return d


def _params_detail() -> str:
    families = ((n, op.params) for n, op in CATALOGUE.items() if op.params)
    return "per op family: " + "; ".join(f"{n}: {', '.join(ps)}" for n, ps in families)


_DETAIL = {"params": _params_detail()}  # what only the schema spells out (each family's params)


def _described(row: str, detail: str | None) -> str:
    """The field row's description, then any detail only the schema knows (e.g. each family's params)."""
    return f"{row}; {detail}" if detail and detail != row else row


def contracts_schema() -> dict[str, Any]:
    """The JSON Schema of contracts.toml, generated from the field table (kcgate.contracts.fields)."""
    top = _table(FILE_FIELDS)
    top["properties"]["contract"]["minItems"] = 1
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "kcgate contracts.toml",
        **top,
    }


def results_schema() -> dict[str, Any]:
    """Schema 2: a header, ``case_fields``/``metric_fields`` naming the columns, then one row per case
    (every column's schema and description come from its row of ``records.CASE_COLUMNS``)."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "kcgate results file",
        "type": "object",
        "required": ["schema_version", "runner", "fingerprint", "case_fields", "metric_fields", "cases"],
        "properties": {
            "schema_version": {"const": SCHEMA_VERSION},
            "kind": {"const": "kcgate-results"},
            "runner": _STR,
            "fingerprint": {"type": "object", "required": ["backend"]},
            "fingerprint_key": _STR,
            "contracts_file": _STR,
            "complete": {"type": "boolean"},
            "kcgate_version": _STR,
            "meta": {"type": "object"},
            "case_fields": {"const": list(CASE_FIELDS)},
            "metric_fields": {"const": list(METRIC_FIELDS)},
            "cases": _list(row_schema(CASE_COLUMNS)),
        },
    }
