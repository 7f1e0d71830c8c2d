"""The PR comment's reproduce command, `kcgate run -k CASE_ID --seed S --dtype D`, reruns exactly that case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcgate.plan import SEED_MASK, base_seed_for, derive_seed
from tests.conftest import DATA, kcgate


@given(st.integers(0, SEED_MASK), st.text(min_size=1, max_size=60))
def test_base_seed_for_inverts_derive_seed(base: int, cid: str) -> None:
    assert derive_seed(base_seed_for(derive_seed(base, cid), cid), cid) == derive_seed(base, cid)
    assert 0 <= derive_seed(base, cid) <= SEED_MASK


@pytest.mark.slow
def test_the_reproduce_command_reruns_one_case_with_its_seed(tmp_path: Path) -> None:
    first = tmp_path / "first.json"
    common = ("--contracts", str(DATA / "small.toml"), "--isolation", "none", "-q", "--runner", "cpu-r")
    proc = kcgate("run", *common, "-k", "sum/*", "--results", str(first))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(first.read_text())
    rows = [dict(zip(doc["case_fields"], row)) for row in doc["cases"]]
    case = next(r for r in rows if r["case_id"].endswith("/s1") and r["dtype"] == "bfloat16")
    seed = base_seed_for(case["seed"], case["case_id"])
    again = tmp_path / "again.json"
    proc = kcgate(
        "run", *common, "-k", case["case_id"], "--seed", str(seed), "--dtype", case["dtype"], "--results", str(again)
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(again.read_text())
    [row] = [dict(zip(doc["case_fields"], r)) for r in doc["cases"]]
    assert (row["case_id"], row["seed"], row["metrics"]) == (case["case_id"], case["seed"], case["metrics"])
