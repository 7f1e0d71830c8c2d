"""benchmarks/third_party/liger: its contract files load everywhere; with Liger-Kernel and Triton importable
(not dependencies: skipped without them) the unmutated softmax passes its hand-written contract under the
interpreter, and a mutant of it is killed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib

from kcgate.contracts.load import load_project
from tests.conftest import ROOT

HERE = ROOT / "benchmarks" / "third_party" / "liger"


def _contracts(name: str) -> list[dict[str, Any]]:
    """The file's contracts as TOML (loading it locates the kernels, which needs Liger installed)."""
    return list(tomllib.loads((HERE / name).read_text())["contract"])


def test_hand_written_contracts_are_fp32_and_cover_the_four_kernels() -> None:
    """bf16 under the interpreter checks the interpreter (README.md): the hand-written file keeps it out."""
    contracts = _contracts("contracts.toml")
    assert all(c["dtypes"] == ["float32"] and c["env"] == {"TRITON_INTERPRET": "1"} for c in contracts)
    assert {c["op"] for c in contracts} == {"softmax", "rmsnorm", "cross_entropy", "swiglu"}
    # cross-entropy: one row (never an ignored one) and forward only, as the file explains
    assert all(
        s[0] == 1 and "direction" not in c
        for c in contracts
        if c["op"] == "cross_entropy"
        for s in c["shapes"]
    )
    assert {c["kernel"].split(":")[0] for c in _contracts("init-contracts.toml")} < {
        c["kernel"].split(":")[0] for c in contracts
    }


def _site() -> str | None:
    found = importlib.util.find_spec("liger_kernel") and importlib.util.find_spec("triton")
    return str(Path(found.origin).parent.parent) if found and found.origin else None


@pytest.mark.skipif(_site() is None, reason="liger-kernel and triton are not installed (not dependencies)")
@pytest.mark.parametrize("name", ["contracts.toml", "init-contracts.toml"])
def test_the_contract_files_load(name: str) -> None:
    assert load_project(HERE / name).contracts


@pytest.mark.skipif(_site() is None, reason="liger-kernel and triton are not installed (not dependencies)")
def test_softmax_under_the_interpreter_is_judged(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    env = {**os.environ, "LIGER_SITE": str(_site()), "PYTHON": sys.executable}
    cmd = [str(HERE / "run.sh"), str(HERE / "contracts.toml"), "-k", "softmax-stable", "--rule",
           "max-subtraction-removed", "--no-cache", "--no-advice", "--json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["false_alarms"] == 0 and doc["counts"]["killed"] >= 1
