"""benchmarks/device_check.py at tiny shapes on the CPU, through the same code the device runs: every section
writes its files, the families' time breakdown and overhead come back, and a crash leaves a traceback
while the other sections still run.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _device_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "kcgate_bench_device_check", ROOT / "benchmarks" / "device_check.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_shell_wrapper_runs_every_section_at_smoke_shapes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "device_check.sh"), "--smoke", "--device", "cpu"],
        cwd=tmp_path,
        env={"OUT": str(out), "PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert {k: v["status"] for k, v in summary["sections"].items()} == {
        "environment": "ok",
        "runners": "ok",
        "contracts": "ok",
        "families": "ok",
        "freivalds": "ok",
        "verify-paths": "ok",
    }
    assert summary["sections"]["verify-paths"]["compared"] >= 40  # the host and device comparison paths agree
    assert summary["sections"]["contracts"]["cases"] == summary["sections"]["contracts"]["pass"] > 0
    assert "cpu" in json.loads((out / "runners.json").read_text())["backends"][-1]["backend"]
    cases = json.loads((out / "families-cases.json").read_text())
    assert {c["contract_id"] for c in cases} == {
        "gemm",
        "attention-causal-fwd-bwd",
        "rmsnorm",
        "cross-entropy",
    } and len(cases) == 7  # bf16 and fp16, cross-entropy in bf16
    for c in cases:
        assert c["status"] == "pass" and c["own_s"] > 0 and c["overhead_x"] is not None
        assert c["harness_s"] == pytest.approx(c["duration_s"] - c["kernel_s"] - c["oracle_s"], abs=2e-6)
    within = summary["sections"]["families"]["within_3x"]  # issue 58: every family held to 3x its kernel
    assert set(within) == {c["case_id"] for c in cases}
    assert all(ok == (c["overhead_x"] <= 3.0) for c in cases for ok in [within[c["case_id"]]])
    freivalds = json.loads((out / "freivalds.json").read_text())
    assert [r["n"] for r in freivalds] == [64, 128, 256] and all(r["passed"] for r in freivalds)
    assert (out / "device_check.log").exists() and not (out / "tracebacks").exists()


def test_a_crashing_section_leaves_its_traceback_and_the_rest_run(tmp_path: Path) -> None:
    bench = _device_check()
    code = bench.main(
        [
            "--out",
            str(tmp_path),
            "--smoke",
            "--device",
            "cpu",
            "--sections",
            "environment,freivalds,environment",
        ]
        + ["--fail", "environment"]
    )
    assert code == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["sections"]["environment"]["status"] == "crashed"
    assert summary["sections"]["freivalds"]["status"] == "ok"
    tb = (tmp_path / "tracebacks" / "environment.txt").read_text()
    assert "Traceback" in tb and "a crash on purpose" in tb


def test_the_production_shapes_are_the_issues() -> None:
    bench = _device_check()
    shapes = {f.name: (f.shape, f.dtypes) for f in bench.FAMILIES}
    assert shapes["gemm"] == ((8192, 8192, 8192), ("bfloat16", "float16"))
    assert shapes["attention-causal-fwd-bwd"] == ((4, 32, 32, 4096, 128), ("bfloat16", "float16"))
    assert shapes["rmsnorm"] == ((16384, 8192), ("bfloat16", "float16"))
    assert shapes["cross-entropy"] == ((8192, 128256), ("bfloat16",))
    assert bench.FREIVALDS_N == (4096, 8192, 16384)
    toml = bench.families_toml(smoke=False)
    assert 'direction = "both"' in toml and "causal = true" in toml and "[8192, 128256]" in toml
