"""The contract field table is the one list of contract keys: the loader, the JSON Schema (a description
for every key) and the README's contract-language section all agree with it."""

from __future__ import annotations

import re

from kcgate.contracts.fields import CONTRACT_FIELD, CONTRACT_FIELDS, REQUIRED_KEYS
from kcgate.render.schema import contracts_schema
from tests.conftest import ROOT


def test_loader_and_schema_know_exactly_the_table_keys() -> None:
    keys = {f.key for f in CONTRACT_FIELDS}
    assert len(keys) == len(CONTRACT_FIELDS)
    contract = contracts_schema()["properties"]["contract"]["items"]
    assert set(contract["properties"]) == keys == set(CONTRACT_FIELD)
    assert tuple(contract["required"]) == REQUIRED_KEYS
    for f in CONTRACT_FIELDS:
        assert contract["properties"][f.key]["description"].startswith(f.description), f.key


def test_readme_names_every_contract_key() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## The contract language") :]
    section = section[: section.index("\n## ", 5)]
    missing = [
        f.key for f in CONTRACT_FIELDS if not re.search(rf"`{f.key}`|^{f.key} =|\b{f.key} = ", section, re.M)
    ]
    assert not missing, f"README's contract-language section does not name: {missing}"
