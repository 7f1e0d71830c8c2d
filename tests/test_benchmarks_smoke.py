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
    assert out.startswith("false alarms: 0 of 8 cases"), out[:200]  # each declared shape and its boundary one
    assert "| klass | cases | false alarms | rate | 95% upper | s/case |" in out
    assert "| shape | cases |" in out and "| boundary | 4 |" in out
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


def test_false_alarm_benchmark_quick_mode_runs_issue_46s_held_out_kernels() -> None:
    """``--quick``: three of issue 46's held-out library kernels (flash-attention's attention_ref, vLLM's GQA
    causal reference, the tutorial layer norm), C-PRC-01, bf16, forward and backward, at their declared and
    boundary shapes: 12 cases, none an alarm, the rule of three printed."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.false_alarms", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.startswith("false alarms: 0 of 12 cases"), proc.stdout[:300]
    assert "rule of three 3/n = 0.25" in proc.stdout


def test_gate_only_lists_the_failures_within_the_bound_and_the_changed_verdicts() -> None:
    """benchmarks/gate_only.py's report: a failure whose message says it was within the bound is the
    sensitivity gate's catch (listed with its budget and ratios); one over the bound is not; ``compare``
    names every case whose status or cause changed between two runs."""
    from benchmarks import gate_only as g

    gate = g.Verdict("realistic", "sum-fp16-acc", 0, "32x4096", "fail", "excess-error",
                     "within the bound (the forward output's budget 0.495) but ...", 0.495,
                     {"excess_ratio": 1090.0, "excess_rms_ratio": 1640.0, "excess_max_ratio": 687.0})  # fmt: skip
    bound = g.Verdict("faults", "noise-0.3", 0, "32x256", "fail", "noise", "error exceeds the allowed bound",
                      3.0, {})  # fmt: skip
    lines = g.report([gate, bound])
    assert (
        "| realistic | sum-fp16-acc | 0 | 32x4096 | 0.495 | 1.09e+03 | 1.64e+03 / 687 | excess-error |"
        in lines
    )
    assert not any("noise-0.3" in line for line in lines)
    assert "faults: 1 cases, 1 fail, 0 of them only through the sensitivity gate (0 bugs)" in lines
    before = [dict(gate.__dict__, status="pass", cause=""), dict(bound.__dict__)]
    changed = g.compare(before, [gate, bound])
    assert changed == [
        f"  realistic/sum-fp16-acc/32x4096/s0: pass  -> fail excess-error: {gate.message[:160]}"
    ]
    assert g.compare([dict(bound.__dict__)], [bound]) == ["  no verdict changed"]


def _bench(module: str, *args: str, timeout: int = 1200) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow  # a scratch repository, three kcgate runs and two base reruns in real workers
def test_planted_replay_quick_blocks_only_the_pr_that_introduces_a_bug() -> None:
    """benchmarks/planted_replay.py --quick: main has a crash, a failure and a drift; a PR that adds a notes
    file passes with them shown as main's, and a PR that breaks the local softmax is blocked for it alone."""
    out = _bench("planted_replay", "--quick")
    assert "2 PRs, 1 introducing a bug: 1 correct blocks, 0 missed, 0 false blocks" in out, out[-2000:]
    assert "main -> main (nothing): planted ok: local-softmax: pass new" in out
    assert "planted-crash: error pre-existing" in out
    assert "PRs whose planted problems were shown as main's (none blocking): 2 of 2" in out


@pytest.mark.slow  # a scratch repository, five kcgate runs in real workers, two of them with a base rerun
def test_shipped_power_blocks_a_pr_that_introduces_a_shipped_bug_and_calls_it_pre_existing_after() -> None:
    """benchmarks/shipped_power.py on one shipped bug (TransformerEngine's CE mean over ignored rows): the PR
    that introduces it is blocked, every blocking row attributed to it; once merged unnoticed, an unrelated
    PR is not blocked and every failing row is pre-existing."""
    out = _bench("shipped_power", "--only", "te-ce-mean-over-all-rows")
    assert "introduced and blocked, every blocking row attributed to the PR: 1 of 1" in out, out[-2000:]
    assert "already on main, not blocked and shown pre-existing: 1 of 1" in out
