"""`kcgate calibrate`: the matrix, the JSON, exit 0 when calibrated and 6 (under-specified) when a
bad kernel passes a contract that is too loose."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from kcgate.cli import app  # noqa: E402

pytestmark = pytest.mark.slow  # the calibration matrix runs kernels end to end

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
    root = Path(__file__).resolve().parents[2]
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
kernel = "tests.testing.kernels.crashy:good"
good = "tests.testing.kernels.crashy:good"
bad = "tests.testing.kernels.crashy:segfault"
baseline = "kcgate.kernels.calibration.c_prc_01:baseline"
shapes = [[32, 256, 32]]
protocol = {{ seeds = 1, trials = 1 }}
"""


def test_a_crashing_kernel_costs_its_state_not_the_calibration(tmp_path: Path):
    """Calibration runs user kernels in a worker: a segfaulting bad kernel is an error of that state only."""
    toml = tmp_path / "contracts.toml"
    toml.write_text(CRASHY.format(root=Path(__file__).resolve().parents[2]))
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


ADVICE_KERNELS = """
import torch


def good_softmax(x):
    return torch.softmax(x, -1)


def naive_softmax(x):  # no max-subtraction
    e = x.float().exp()
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


def good_mm(a, b):
    return a @ b


def benchmark_only(a, b):  # right for K <= 128 only; says which process ran it
    import os
    if os.environ.get("KCGATE_TEST_MARKER"):
        with open(os.environ["KCGATE_TEST_MARKER"], "a") as f:
            f.write(f"{os.getpid()} ")
    return a[:, :128] @ b[:128] if a.shape[1] > 128 else a @ b
"""

ADVICE = """
[project]
name = "advice"
paths = ["{root}"]

[[contract]]
id = "softmax-prc01"
class = "C-PRC-01"
op = "softmax"
kernel = "advk:good_softmax"
good = "advk:good_softmax"
bad = "advk:naive_softmax"
shapes = [[32, 256]]
protocol = {{ seeds = 1, trials = 1, probes = false }}

[[contract]]
id = "mm-prc01"
class = "C-PRC-01"
op = "matmul"
kernel = "advk:good_mm"
good = "advk:good_mm"
bad = "advk:benchmark_only"
shapes = [[64, 128, 64]]
protocol = {{ seeds = 1, trials = 1 }}
"""


def test_advice_names_the_probe_or_the_shape_class_that_catches_the_bad_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The advice's remedies run the kernels in workers, never in the process that advises and prints."""
    marker = tmp_path / "pids.txt"
    monkeypatch.setenv("KCGATE_TEST_MARKER", str(marker))
    (tmp_path / "advk.py").write_text(ADVICE_KERNELS)
    toml = tmp_path / "contracts.toml"
    toml.write_text(ADVICE.format(root=tmp_path))
    out = tmp_path / "cal.json"
    res = CliRunner().invoke(app, ["calibrate", "--no-builtin", "--contracts", str(toml), "--json", str(out)])
    assert res.exit_code == 6, res.output
    advice = {r["contract_id"]: r["advice"] for r in json.loads(out.read_text())["contracts"]}
    assert "C-PRC-02" in advice["softmax-prc01"][0] and "overflow" in advice["softmax-prc01"][0]
    assert "C-CMP-03" in advice["mm-prc01"][0] and "64x1024x64" in advice["mm-prc01"][0]
    assert "tighten the tolerance" not in res.output
    assert "softmax-prc01: add a C-PRC-02 contract" in res.output
    pids = set(marker.read_text().split())
    assert pids and str(os.getpid()) not in pids, pids  # the CLI ran here (CliRunner); the kernels did not


def test_with_its_stability_probes_c_prc_01_catches_the_softmax_without_max_subtraction(tmp_path: Path):
    """The same contract as above with ``protocol.probes`` on (the default): its own C-PRC-01 cases fail the
    naive softmax, so calibrate has no advice to give for it."""
    (tmp_path / "advk.py").write_text(ADVICE_KERNELS)
    toml = tmp_path / "contracts.toml"
    toml.write_text(ADVICE.format(root=tmp_path).replace(", probes = false", "", 1))
    out = tmp_path / "cal.json"
    CliRunner().invoke(app, ["calibrate", "--no-builtin", "--contracts", str(toml), "--json", str(out)])
    rows = {r["contract_id"]: r for r in json.loads(out.read_text())["contracts"]}
    assert rows["softmax-prc01"]["advice"] == [], rows["softmax-prc01"]
    bad = next(st for st in rows["softmax-prc01"]["states"] if st["state"] == "bad")
    assert bad["status"] == "fail" and bad["cause"] == "overflow-nan" and "probe" in bad["message"]
    assert rows["mm-prc01"]["advice"]  # the K-truncating matmul still needs a held-out shape


def test_loose_tolerance_advice_is_the_derived_bound(tmp_path: Path):
    root = Path(__file__).resolve().parents[2]
    toml = tmp_path / "contracts.toml"
    toml.write_text(LOOSE.format(root=root))
    out = tmp_path / "cal.json"
    res = CliRunner().invoke(app, ["calibrate", "--no-builtin", "--contracts", str(toml), "--json", str(out)])
    assert res.exit_code == 6, res.output
    (row,) = json.loads(out.read_text())["contracts"]
    assert row["advice"] and 'method = "error-bound"' in row["advice"][0]
