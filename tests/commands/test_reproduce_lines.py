"""The PR comment's reproduce lines run as written, from the repository root, and reproduce their failures.

A real PR flow in a scratch repository: a baseline run of a correct matmul, then the PR's matmul that keeps
its running sum in bf16, run with a contracts file that is not ``contracts.toml`` and a results directory
of its own; ``kcgate report`` renders the comment; each reproduce line is taken from the comment and run
as a subprocess. Each must fail the same case with the same seed, and none may replace the full run's
results file.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kcgate.results.model import load_run
from tests.conftest import ROOT, kcgate

GOOD = "def matmul(a, b):\n    return a @ b\n"
BAD = '''import torch


def matmul(a, b):
    """Keeps the running sum across K-blocks of 128 in bf16."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.bfloat16)
    for k in range(0, a.shape[1], 128):
        acc = (acc.float() + a[:, k : k + 128] @ b[k : k + 128]).to(torch.bfloat16)
    return acc.float()
'''
CONTRACTS = """[project]
paths = ["."]
baselines = "baselines"
results = "results-pr"

[[contract]]
id = "pr-matmul"
class = "C-PRC-01"
kernel = "kern:matmul"
op = "matmul"
dtypes = ["float32"]
shapes = [[16, 1024, 16]]
protocol = { seeds = 2, trials = 1, boundary = false }

[[contract]]
id = "pr-softmax"
class = "C-PRC-01"
kernel = "kcgate.kernels.builtin:softmax"
op = "softmax"
shapes = [[16, 256]]
protocol = { seeds = 2, trials = 1, boundary = false }
"""
_CODE = re.compile(r"^- [^`]*: `([^`]*kcgate run [^`]*)`", re.MULTILINE)  # the line's first command
_ENV = re.compile(r"[A-Z][A-Z0-9_]*=")


def _env() -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT), "CI": "", "GITHUB_ACTIONS": ""}


def _argv(line: str) -> tuple[list[str], dict[str, str]]:
    """The line's words as argv (``kcgate`` is this interpreter's ``-m kcgate``), and its NAME=value prefix."""
    words = shlex.split(line)
    env = {}
    while words and _ENV.match(words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    assert words[0] == "kcgate", line
    return [sys.executable, "-m", "kcgate", *words[1:]], env


@pytest.mark.slow  # four kcgate runs in real workers
def test_every_reproduce_line_runs_as_written_and_reproduces_its_failure(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "contracts-pr.toml").write_text(CONTRACTS)
    (repo / "kern.py").write_text(GOOD)
    run = ("run", "-c", "contracts-pr.toml", "--runner", "cpu-pr", "-q")
    proc = kcgate(*run, cwd=repo, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (repo / "baselines").mkdir()
    shutil.move(repo / "results-pr" / "cpu-pr.json", repo / "baselines" / "cpu-pr.json")

    (repo / "kern.py").write_text(BAD)  # the pull request
    proc = kcgate(*run, cwd=repo, env=_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    full = load_run(repo / "results-pr" / "cpu-pr.json")
    failed = {c.case_id: c.seed for c in full.cases if not c.ok}
    assert failed and len(full.cases) == 6  # the baseline's 4 cases on their seeds, and a fresh one per shape

    report = ("report", "results-pr", "--contracts", "contracts-pr.toml", "--comment-out", "comment.md")
    proc = kcgate(*report, "--no-annotations", cwd=repo, env=_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # the case's own reproduce lines (a shrunk reproduction, `--shape`, is tested in tests/engine/test_shrink.py)
    lines = [ln for ln in _CODE.findall((repo / "comment.md").read_text()) if " --shape " not in ln]
    assert lines, (repo / "comment.md").read_text()

    for line in lines:
        assert "-c contracts-pr.toml" in line and "--runner cpu-pr" in line and "--device cpu" in line
        argv, extra = _argv(line)
        proc = subprocess.run(
            argv,
            cwd=repo,
            env={**os.environ, **_env(), **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 1, f"{line}\n{proc.stdout}{proc.stderr}"
        repro = load_run(repo / "results-pr" / "repro" / "cpu-pr.json")
        (case,) = repro.cases
        assert case.case_id in failed and case.seed == failed[case.case_id] and not case.ok, line
        assert "results-pr/repro/cpu-pr.json" in proc.stderr + proc.stdout  # says where it wrote
        assert load_run(repo / "results-pr" / "cpu-pr.json") == full  # the full run's file is untouched


def test_a_narrower_run_writes_beside_a_fuller_results_file(tmp_path: Path) -> None:
    """Any run that selects fewer cases than the default results file holds (not only a reproduce line)."""
    from kcgate.commands._run_impl import beside_fuller
    from kcgate.plan import Case
    from kcgate.results.model import CaseResult, Fingerprint, RunResult, write_run

    path = tmp_path / "results" / "cpu.json"
    cases = [
        CaseResult(f"m/float32/4/s{i}", "m", "C-PRC-01", "matmul", "float32", (4,), i, "pass") for i in (0, 1)
    ]
    write_run(path, RunResult("cpu", Fingerprint("cpu"), cases))
    one = [Case("m/float32/4/s0", "m", "C-PRC-01", "matmul", "float32", (4,), 0, 0)]
    both = [*one, Case("m/float32/4/s1", "m", "C-PRC-01", "matmul", "float32", (4,), 1, 0)]
    assert beside_fuller(path, one, resume=False) == tmp_path / "results" / "repro" / "cpu.json"
    assert beside_fuller(path, both, resume=False) == path  # the same plan replaces its own file
    assert beside_fuller(path, one, resume=True) == path  # --resume finishes the file it names
    assert beside_fuller(tmp_path / "none.json", one, resume=False) == tmp_path / "none.json"
