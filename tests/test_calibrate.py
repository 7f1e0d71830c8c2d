"""`kcgate calibrate`: the matrix, the JSON, exit 0 when calibrated and 6 (under-specified) when a
bad kernel passes a contract that is too loose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from kcgate.cli import app  # noqa: E402

LOOSE = """
[project]
name = "loose"
paths = ["{root}"]

[[contract]]
id = "gemm-too-loose"
class = "C-PRC-01"
op = "matmul"
kernel = "kcgate.kernels.calibration.c_prc_01:good"
good = "kcgate.kernels.calibration.c_prc_01:good"
bad = "kcgate.kernels.calibration.c_prc_01:bad"
shapes = [[32, 256, 32]]
tolerance = {{ method = "abs-rel", rtol = 1e-2, atol = 1e-1 }}
protocol = {{ seeds = 1, trials = 1 }}
"""


def test_calibrate_selected_class_prints_matrix_and_json(tmp_path: Path):
    out = tmp_path / "cal.json"
    res = CliRunner().invoke(app, ["calibrate", "-k", "C-PRC-03", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "cal-prc-03" in res.output and "calibrated" in res.output
    doc = json.loads(out.read_text())
    (row,) = doc["contracts"]
    states = {s["state"]: s for s in row["states"]}
    assert states["good"]["accepted"] and not states["bad"]["accepted"] and not states["baseline"]["accepted"]
    assert row["margin"] >= 10 and states["bad"]["cause"] == "operand-truncation"


def test_loose_user_contract_is_under_specified(tmp_path: Path):
    root = Path(__file__).resolve().parents[1]
    toml = tmp_path / "contracts.toml"
    toml.write_text(LOOSE.format(root=root))
    res = CliRunner().invoke(app, ["calibrate", "--no-builtin", "--contracts", str(toml)])
    assert res.exit_code == 6, res.output
    assert "under-specified" in res.output and "gemm-too-loose" in res.output


def test_nothing_to_calibrate_is_a_usage_error():
    res = CliRunner().invoke(app, ["calibrate", "-k", "no-such-contract"])
    assert res.exit_code == 3


CRASHY = """
[project]
name = "crashy"
paths = ["{root}"]

[[contract]]
id = "gemm-crash"
class = "C-PRC-01"
op = "matmul"
kernel = "tests.kernels.crashy:good"
good = "tests.kernels.crashy:good"
bad = "tests.kernels.crashy:segfault"
baseline = "kcgate.kernels.calibration.c_prc_01:baseline"
shapes = [[32, 256, 32]]
protocol = {{ seeds = 1, trials = 1 }}
"""


def test_a_crashing_kernel_costs_its_state_not_the_calibration(tmp_path: Path):
    """Calibration runs user kernels in a worker: a segfaulting bad kernel is an error of that state only."""
    toml = tmp_path / "contracts.toml"
    toml.write_text(CRASHY.format(root=Path(__file__).resolve().parents[1]))
    out = tmp_path / "cal.json"
    res = CliRunner().invoke(app, ["calibrate", "--no-builtin", "--contracts", str(toml), "--json", str(out)])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(out.read_text())["contracts"]
    states = {s["state"]: s for s in row["states"]}
    assert states["good"]["status"] == "pass"
    assert states["bad"]["status"] == "error" and "SIGSEGV" in states["bad"]["message"]
    assert states["baseline"]["status"] == "fail"  # the worker was replaced and the next state ran


def test_calibrate_rejects_a_bad_isolation_mode():
    res = CliRunner().invoke(app, ["calibrate", "--isolation", "threads"])
    assert res.exit_code == 3 and "choose 'process' or 'none'" in res.output
