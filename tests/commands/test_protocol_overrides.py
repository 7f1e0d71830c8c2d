"""What changes a verdict can be said in the contract: ``protocol.held_out`` and ``protocol.timeout_s``.

The CLI flag still overrides the contract's value, and the results record which value was used: the run's
``meta`` names each override, and C-CMP-03 records the held-out shapes its verdict covered.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcgate.results.records import METRIC_FIELDS
from tests.conftest import ROOT, kcgate

CONTRACTS = f"""[project]
paths = [{json.dumps(str(ROOT))}]

[[contract]]
id = "lin"
class = "C-CMP-03"
kernel = "kcgate.kernels.builtin:linear"
op = "linear"
shapes = [[8, 64, 8]]
protocol = {{ seeds = 1, trials = 1, held_out = 2, boundary = false }}

[[contract]]
id = "slow"
class = "C-PRC-01"
kernel = "tests.testing.kernels.crashy:slow"
op = "matmul"
shapes = [[8, 32, 8]]
protocol = {{ seeds = 1, trials = 1, timeout_s = 0.1, boundary = false }}
"""


def _cases(path: Path) -> dict[str, list[object]]:
    return {row[0]: row for row in json.loads(path.read_text())["cases"]}


def test_protocol_held_out_and_timeout_s_are_contract_keys(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CONTRACTS)
    proc = kcgate("validate", str(tmp_path / "c.toml"))
    assert proc.returncode == 0 and "unknown key" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.slow  # two runs in real workers
def test_the_contract_sets_them_the_flag_overrides_and_the_results_say_which(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CONTRACTS)
    out = tmp_path / "contract.json"
    proc = kcgate("run", "-c", str(tmp_path / "c.toml"), "-q", "--results", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the slow kernel passes 0.1 s
    doc, cases = json.loads(out.read_text()), _cases(out)
    assert not any(k.startswith("override.") for k in doc["meta"])  # the contract's values were used
    lin, slow = cases["lin/float32/8x64x8/s0"], cases["slow/float32/8x32x8/s0"]
    assert (
        lin[7] == "pass" and lin[8][METRIC_FIELDS.index("extra")]["held_out_shapes"] == 6.0
    )  # 4 extremes + held_out = 2
    assert slow[7] == "error" and "timed out after 0.1 s" in str(slow[10])

    out = tmp_path / "flags.json"
    proc = kcgate(
        "run",
        "-c",
        str(tmp_path / "c.toml"),
        "-q",
        "--results",
        str(out),
        "--held-out",
        "5",
        "--timeout",
        "30",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc, cases = json.loads(out.read_text()), _cases(out)
    assert doc["meta"]["override.held_out"] == "5" and doc["meta"]["override.timeout_s"] == "30"
    assert cases["lin/float32/8x64x8/s0"][8][METRIC_FIELDS.index("extra")]["held_out_shapes"] == 9.0
    assert cases["slow/float32/8x32x8/s0"][7] == "pass"
