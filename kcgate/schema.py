"""JSON Schemas: of contracts.toml (for editors, `kcgate schema`) and of results files. Built from the
same constants the loader validates against, so the schema cannot drift from the code. No torch.
"""

from __future__ import annotations

from typing import Any

from kcgate import dtypes, spec
from kcgate.classes import CLASSES
from kcgate.contract_fields import CONTRACT_FIELD, REQUIRED_KEYS
from kcgate.policy import BLOCKABLE, WAIVER_KINDS
from kcgate.results.model import CASE_FIELDS, METRIC_FIELDS, SCHEMA_VERSION, STATUSES

_STR = {"type": "string"}
_POS = {"type": "number", "exclusiveMinimum": 0}
_IMPORT = {"type": "string", "pattern": r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$"}


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


def _described(row: str, detail: str | None) -> str:
    """The field row's description, then any detail only the schema knows (e.g. each family's params)."""
    return f"{row}; {detail}" if detail and detail != row else row


def contracts_schema() -> dict[str, Any]:
    tolerance = _obj(
        {
            "method": _enum(spec.TOLERANCES),
            "lambda": _POS,
            "ulp": _POS,
            "rtol": _POS,
            "atol": _POS,
            "factor": {
                "type": "number",
                "minimum": 1,
                "description": "method 'relative': x the baseline's error",
            },
            "baseline": {
                **_IMPORT,
                "description": "method 'relative': the baseline (default: the composite)",
            },
            "excess": {
                "oneOf": [{"type": "number", "minimum": 1}, {"const": False}],
                "description": "the sensitivity gate's factor (default 1.5), or false to turn it off",
            },
        }
    )
    protocol = _obj(
        {
            "seeds": {"type": "integer", "minimum": 1},
            "trials": {"type": "integer", "minimum": 1},
            "poison": {"type": "boolean"},
            "guard": {"type": "integer", "minimum": 0},
            "timeout_s": _POS,
            "k_sweep": _list({"type": "integer", "minimum": 1}),
            "freivalds_vectors": {
                "type": "integer",
                "minimum": 1,
                "maximum": spec.PROTOCOL_LIMITS["freivalds_vectors"],
                "description": "random vectors per Freivalds check (default 10: a bad row missed w.p. <= 1e-3)",
            },
        }
    )
    waiver = _obj(
        {
            "runner": _STR,
            "until": {"type": "string", "format": "date"},
            "reason": _STR,
            "owner": _STR,
            "kind": _enum(WAIVER_KINDS, "violation (default): failing cases; error: cases that cannot run"),
        },
        ("runner", "until", "reason"),
    )
    contract = _obj(
        {
            "id": {"type": "string", "pattern": spec._ID.pattern},
            "class": _enum(CLASSES),
            "kernel": _IMPORT,
            "op": _enum(spec.OPS),
            "description": _STR,
            "devices": _list(_enum(spec.DEVICES)),
            "dtypes": _list(_enum(dtypes.TENSOR_DTYPES + tuple(dtypes.ALIASES))),
            "accumulate": _enum(dtypes.ACCUMULATORS + tuple(dtypes.ALIASES)),
            "out_dtype": _enum(
                dtypes.TENSOR_DTYPES + tuple(dtypes.ALIASES),
                "the output's dtype (default: the input dtype); part of every postcondition: "
                "a kernel returning another dtype fails with signature wrong-dtype, whatever the class",
            ),
            "shapes": _list(_list({"type": "integer", "minimum": 1})),
            "distribution": _enum(spec.DISTRIBUTIONS),
            "layout": _enum(spec.LAYOUTS),
            "postcondition": _enum(spec.POSTCONDITIONS),
            "tolerance": tolerance,
            "oracle": _enum(spec.ORACLES),
            "reference": _IMPORT,
            "inputs": _IMPORT,
            "protocol": protocol,
            "signature": _list(_STR),
            "params": {
                "type": "object",
                "description": "per op family: "
                + "; ".join(f"{op}: {', '.join(ps)}" for op, ps in spec.OP_PARAMS.items()),
            },
            "call": {
                "oneOf": [
                    _enum(spec.CALLS),
                    _obj({"args": {"type": "array"}, "kwargs": {"type": "object"}}),
                ],
            },
            "direction": _enum(spec.DIRECTIONS),
            "init": {"type": "object"},
            "env": {"type": "object", "additionalProperties": _STR},
            "good": _IMPORT,
            "bad": _IMPORT,
            "baseline": _IMPORT,
            "waiver": _list(waiver),
            "shape_constraints": _CONSTRAINTS,
            "shape_class": _obj(
                {
                    "dims": {**_CONSTRAINTS, "description": "C-CMP-03: the class held-out shapes span"},
                    "max_elements": {"type": "integer", "minimum": 1},
                }
            ),
        },
        REQUIRED_KEYS,
    )
    contract["properties"] = {  # every key described once, in its field row
        key: {**prop, "description": _described(CONTRACT_FIELD[key].description, prop.get("description"))}
        for key, prop in contract["properties"].items()
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "kcgate contracts.toml",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "project": _obj(
                {
                    "name": _STR,
                    "paths": _list(_STR),
                    "baselines": _STR,
                    "results": _STR,
                    "discover": _list(_STR),
                }
            ),
            "policy": _obj(
                {
                    "block_on": _list(_enum(BLOCKABLE)),
                    "budget_drift": {
                        "oneOf": [
                            {**_POS, "description": "the absolute rule: a rise of more than this"},
                            _obj(
                                {
                                    "ratio": {"type": "number", "exclusiveMinimum": 1},
                                    "floor": _POS,
                                    "absolute": _POS,
                                }
                            ),
                        ],
                        "description": "a rise of more than ratio x (default 4, floor 1e-3) and/or absolute",
                    },
                    "required_runners": _list(_STR),
                    "acknowledge_removed": _list(_STR),
                }
            ),
            "contract": {**_list(contract), "minItems": 1},
        },
        "required": ["contract"],
    }


_NUM = {"type": ["number", "null"]}


def results_schema() -> dict[str, Any]:
    """Schema 2: a header, ``case_fields``/``metric_fields`` naming the columns, then one row per case."""
    metrics = _row(
        [
            _NUM,
            _NUM,
            _NUM,
            _NUM,
            _INT,
            _INT,
            _list({"type": "integer"}),
            _NUM,
            {"type": "object", "additionalProperties": _NUM},
        ]
    )
    signature = {
        "type": ["object", "null"],
        "required": ["cause", "summary"],
        "properties": {"cause": _STR, "summary": _STR, "evidence": {"type": "object"}},
    }
    case = _row(
        [
            _STR,
            _STR,
            _STR,
            _STR,
            _STR,
            _list({"type": "integer"}),
            _INT,
            _enum(STATUSES),
            metrics,
            signature,
            _STR,
            _SECONDS,
            _SECONDS,
            _SECONDS,
            {"type": ["integer", "null"]},
        ]
    )
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
            "cases": _list(case),
        },
    }


_INT = {"type": "integer"}
_SECONDS = {"type": "number", "minimum": 0}


def _row(columns: list[dict[str, Any]]) -> dict[str, Any]:
    """A fixed-length array whose items are the given columns, in order."""
    return {"type": "array", "prefixItems": columns, "items": False, "minItems": len(columns)}
