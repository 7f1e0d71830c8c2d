"""Smoke test for benchmarks/cli_startup.py: its torch-free proof passes for --help, validate and schema.

No timing assertions: only that ``python -X importtime -m kcgate CMD`` names no torch module and that a
poisoned torch on the path is never imported.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cli_startup() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "kcgate_bench_cli_startup", ROOT / "benchmarks" / "cli_startup.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["--help", "validate", "schema"])
@pytest.mark.slow
def test_cli_command_is_torch_free(name: str, tmp_path: Path) -> None:
    bench = _cli_startup()
    args = bench.FAST_COMMANDS[name]
    rc, lines = bench.importtime_torch_lines(args)
    assert rc == 0, f"kcgate {name} exited {rc}"
    assert lines == [], f"kcgate {name} imports torch: {lines}"
    rc, imported, err = bench.fake_torch_attempted(args, tmp_path)
    assert rc == 0, f"kcgate {name} exited {rc} with torch poisoned: {err}"
    assert not imported, f"kcgate {name} attempted `import torch`"


def test_importtime_detector_sees_torch() -> None:
    """The detector is not vacuous: a line naming torch (or a torch submodule) is caught, others are not."""
    bench = _cli_startup()
    assert bench._TORCH_LINE.search("import time:       120 |     2000 | torch")
    assert bench._TORCH_LINE.search("import time:       120 |     2000 |   torch._C")
    assert not bench._TORCH_LINE.search("import time:       120 |     2000 | torchvision_free_mod")
    assert not bench._TORCH_LINE.search("import time:       120 |     2000 | kcgate.torchless")


def test_false_alarm_benchmark_runs_and_counts() -> None:
    """benchmarks/false_alarms.py on two corpus kernels, one class, one seed: every case passes and the
    summary line, the per-key tables and the cause breakdown are printed. In its own process, as it is run:
    it executes cases in process, and torch state another test left (threads, a function mode) is not its."""
    args = ["--seeds", "1", "--only", "textbook-sigmoid,tiled-bmm", "--classes", "C-PRC-01"]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.false_alarms", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert out.startswith("false alarms: 0 of 4 cases"), out[:200]
    assert "| klass | cases | false alarms | rate | 95% upper | s/case |" in out
    assert "false alarms by cause: none" in out


def test_history_scale_benchmark_runs_small() -> None:
    """benchmarks/history_scale.py at 40 commits x 10 contracts x 3 runners: it fills, adds, queries and
    prints a median for each operation."""
    args = ["--commits", "40", "--contracts", "10", "--runners", "3", "--repeats", "1"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "history_scale.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "40 commits x 10 contracts x 3 runners = 1,200 case rows" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "median" not in line]
    assert len(rows) == 6 and all(float(r.rsplit("|", 2)[1]) >= 0 for r in rows)
