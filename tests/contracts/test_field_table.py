"""The contract format is one field table (kcgate.contracts.fields): the loader's generic checks, their
messages and the JSON Schema all come from its rows, nested tables included."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kcgate.contracts import load as spec
from kcgate.contracts.field_checks import READERS, At, Collector, value
from kcgate.contracts.fields import CONTRACT_FIELD, FILE_FIELDS, PROTOCOL_LIMITS, TYPES, Field
from kcgate.errors import ContractsError
from kcgate.render.schema import _TYPE_SCHEMAS, contracts_schema, field_schema
from kcgate.util import tomlsrc
from tests.conftest import ROOT

HEAD = '[[contract]]\nid = "m"\nclass = "C-PRC-01"\nkernel = "kcgate.kernels.builtin:matmul"\nop = "matmul"\n'


def _rows(fields: tuple[Field, ...] = FILE_FIELDS, path: str = "") -> list[tuple[str, Field]]:
    out = []
    for f in fields:
        out.append((f"{path}{f.key}", f))
        out += _rows(f.fields, f"{path}{f.key}.")
    return out


def _problems(tmp_path: Path, text: str) -> list[Any]:
    f = tmp_path / "contracts.toml"
    f.write_text(text)
    with pytest.raises(ContractsError) as info:
        spec.load_project(f)
    return list(info.value.problems)


def _check(row: Field, given: Any) -> tuple[Any, list[Any]]:
    col = Collector("c.toml", tomlsrc.LineMap())
    return value({row.key: given}, row, At(("contract", 0), "contract 'm'", col)), col.problems


def test_every_row_has_a_known_type_a_description_and_a_since_version() -> None:
    assert set(TYPES) == set(_TYPE_SCHEMAS) and set(READERS) <= set(TYPES)
    for path, f in _rows():
        assert f.type in TYPES and f.description and re.fullmatch(r"\d+\.\d+", f.since), path
        assert not f.choices or f.type in ("choice", "strings", "dtype", "dtypes"), path
        assert bool(f.fields) == (f.type in ("table", "tables", "per-input") or f.alternative == "table"), (
            path
        )


def _schema_keys(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    for key, sub in schema.get("properties", {}).items():
        out.append((f"{path}{key}", sub))
        for part in (sub, sub.get("items", {}), sub.get("additionalProperties", {}), *sub.get("oneOf", [])):
            if isinstance(part, dict):
                out += _schema_keys(part, f"{path}{key}.")
                out += _schema_keys(part.get("items", {}), f"{path}{key}.")
    return out


def test_the_schema_describes_every_key_of_every_table() -> None:
    described = dict(_schema_keys(contracts_schema()))
    rows = dict(_rows())
    assert set(described) == set(rows)
    for path, f in rows.items():
        assert described[path]["description"].startswith(f.description), path
        assert described[path]["x-since"] == f.since, path
    assert described["contract.protocol.seeds"]["maximum"] == PROTOCOL_LIMITS["seeds"]
    assert described["contract.distribution"]["enum"] == list(CONTRACT_FIELD["distribution"].choices)
    assert described["contract.tolerance.method"]["enum"] == list(
        CONTRACT_FIELD["tolerance"].field("method").choices
    )
    assert described["contract.op"]["enum"] == list(CONTRACT_FIELD["op"].choices)
    assert described["contract.op"]["x-values-from"] == "kcgate.vocab.catalogue.CATALOGUE"


def _as_json(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _as_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_as_json(x) for x in v]
    return v.isoformat() if isinstance(v, dt.date) else v


def test_the_repository_contracts_are_valid_under_the_generated_schema() -> None:
    data, _ = tomlsrc.parse((ROOT / "contracts.toml").read_text(encoding="utf-8"))
    schema = contracts_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(_as_json(data), schema)
    bad = json.loads(json.dumps(_as_json(data)))
    bad["contract"][0]["protocol"] = {"seeds": PROTOCOL_LIMITS["seeds"] + 1}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_a_rows_allowed_values_drive_both_the_message_and_the_schema() -> None:
    """Adding a value (or a key) is one row: the loader's message and the schema's enum follow it."""
    row = CONTRACT_FIELD["distribution"]
    _, (problem,) = _check(row, "laplase")
    assert problem.message == "unknown distribution 'laplase'" and "laplace" not in problem.fix
    wider = dataclasses.replace(row, choices=(*row.choices, "laplace"))
    got, (problem,) = _check(wider, "laplase")
    assert (
        got is None
        and problem.fix == "did you mean 'laplace'?"
        and problem.where == "contract 'm'.distribution"
    )
    assert _check(wider, "laplace") == ("laplace", [])
    assert field_schema(wider)["enum"][-1] == "laplace" and "laplace" not in field_schema(row)["enum"]


def test_a_new_row_is_checked_and_described_without_other_code() -> None:
    row = Field(
        "warmup",
        "7 protocol",
        "untimed runs before the first trial",
        type="integer",
        default=1,
        minimum=0,
        maximum=50,
        since="0.3",
    )
    assert _check(row, 3) == (3, [])
    _, (low,) = _check(row, -1)
    _, (high,) = _check(row, 51)
    assert (low.message, low.fix) == ("must be an integer >= 0, not -1", "warmup = 1")
    assert high.message == "51 is over the limit of 50" and high.fix.startswith("warmup = 50 at most")
    assert field_schema(row) == {
        "type": "integer",
        "minimum": 0,
        "maximum": 50,
        "default": 1,
        "description": "untimed runs before the first trial",
        "x-since": "0.3",
    }


@pytest.mark.parametrize(
    ("body", "where", "message", "fix"),
    [
        ("protocol = { seed = 3 }\n", "contract 'm'.protocol.seed", "unknown key", "did you mean 'seeds'?"),
        (
            "shape_class = { max_element = 9 }\n",
            "contract 'm'.shape_class.max_element",
            "unknown key",
            "did you mean 'max_elements'?",
        ),
        ("call = { kwarg = {} }\n", "contract 'm'.call.kwarg", "unknown key", "did you mean 'kwargs'?"),
        (
            "tolerance = { methd = 'ulp' }\n",
            "contract 'm'.tolerance.methd",
            "unknown key",
            "did you mean 'method'?",
        ),
        (
            "protocol = { guard = -1 }\n",
            "contract 'm'.protocol.guard",
            "must be an integer >= 0, not -1",
            "guard = 16",
        ),
        (
            "protocol = { poison = 1 }\n",
            "contract 'm'.protocol.poison",
            "must be true or false",
            "poison = true",
        ),
        (
            "tolerance = { excess = 0.5 }\n",
            "contract 'm'.tolerance.excess",
            "must be a number >= 1 or false, not 0.5",
            "excess = 1.5 (the default), a larger factor, or false to turn the gate off",
        ),
        (
            "layout = 'transposd'\n",
            "contract 'm'.layout",
            "unknown layout 'transposd'",
            "did you mean 'transposed'?",
        ),
    ],
)
def test_nested_and_top_level_problems_are_worded_from_the_rows(
    tmp_path: Path, body: str, where: str, message: str, fix: str
) -> None:
    problem = next(p for p in _problems(tmp_path, HEAD + body) if p.where == where)
    assert (problem.message, problem.fix) == (message, fix)
    assert problem.line == 6


def test_project_and_policy_keys_come_from_their_rows(tmp_path: Path) -> None:
    text = '[project]\npath = ["."]\n\n[policy]\nblock_on = ["new-violaton"]\n\n' + HEAD
    by_where = {p.where: p for p in _problems(tmp_path, text)}
    assert by_where["project.path"].fix == "did you mean 'paths'?" and by_where["project.path"].line == 2
    assert by_where["policy.block_on"].message == "unknown value 'new-violaton'"


def test_defaults_come_from_the_rows(tmp_path: Path) -> None:
    f = tmp_path / "contracts.toml"
    f.write_text(HEAD)
    (c,) = spec.load_project(f).contracts
    for key in ("distribution", "layout", "direction", "accumulate", "call", "description"):
        assert getattr(c, key) == CONTRACT_FIELD[key].default, key
    proto = CONTRACT_FIELD["protocol"]
    assert c.protocol.guard == proto.field("guard").default and c.protocol.poison is True
    assert c.devices == CONTRACT_FIELD["devices"].choices and c.tolerance.excess == 1.5


def test_readme_names_every_key_of_the_contract_tables() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## The contract language") :]
    section = section[: section.index("\n## ", 5)]
    nested = [(f.key, g.key) for f in CONTRACT_FIELD.values() for g in f.fields]
    missing = [f"{t}.{k}" for t, k in nested if not re.search(rf"`{k}`|\b{k} =|\.{k}\b", section)]
    assert not missing, f"README's contract-language section does not name: {missing}"
