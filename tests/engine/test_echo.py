"""A fused add + RMSNorm returning its stale residual is named on that output (kcgate.engine.echo), end to
end in a worker process; a residual that is merely wrong is not claimed to be the input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import kcgate
from tests.engine.test_multi_outputs import KERNELS, KK_KERNELS, _contract

STALE = (
    KERNELS
    + """
def stale(x, residual, weight):  # the residual output not updated: the input returned
    return good(x, residual, weight)[0], residual.clone()
"""
)


def _run(tmp: Path, kernel: str) -> list[dict]:  # type: ignore[type-arg]
    (tmp / "kk.py").write_text(STALE)
    (tmp / "kk_kernels.py").write_text(KK_KERNELS)  # the kernels, through another module than the reference
    c = _contract("fused", kernel, "ref", "gen", 'outputs = ["out", "residual"]').replace(
        "float32", "bfloat16"
    )
    (tmp / "contracts.toml").write_text(f'[project]\npaths = ["."]\n\n{c}')
    proc = kcgate(
        "run", "-c", str(tmp / "contracts.toml"), "--results", str(tmp / "out.json"), cwd=tmp, timeout=600
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads((tmp / "out.json").read_text())
    return [dict(zip(data["case_fields"], row)) for row in data["cases"]]


@pytest.mark.slow
def test_a_stale_residual_is_named_on_its_output(tmp_path: Path) -> None:
    for c in _run(tmp_path, "stale"):
        s = c["signature"]
        assert s["cause"] == "wrong-semantics", s
        assert s["summary"].startswith("output 'residual' equals input 'residual'"), s
        assert s["evidence"]["output"] == "residual", s


@pytest.mark.slow
def test_a_residual_off_by_a_factor_is_not_claimed_to_be_the_input(tmp_path: Path) -> None:
    for c in _run(tmp_path, "bad_residual"):
        assert "equals input" not in c["signature"]["summary"], c["signature"]
        assert c["signature"]["evidence"]["output"] == "residual", c["signature"]
