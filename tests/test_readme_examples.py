"""The README's shell examples run as written (issue 55: its ``kcgate runners --json PATH`` was exit 3).

Every line of every ``bash`` block is either a ``kcgate`` line, run here exactly as written (``kcgate`` is a
script on PATH that runs the checkout's kcgate, in a real subprocess, on the CPU) with the exit code the
README's words imply, or a line this test names and does not run (installing from the network, the test
suite itself). The quick start ("Use it") runs in a fresh project holding ``mypackage``, a correct softmax,
as a user's would; the rest in a temporary copy of the repository (its tracked files).
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

from tests.conftest import ROOT

# the first word of a README shell line this test does not run, and why
NOT_RUN = {
    "git": "clones from the network",
    "pip": "installs from the network",
    "python3": "creates a virtual environment",
    "python": "runs the test suite itself",
    "pytest": "the pytest plugin: tests/adopt/test_pytest_plugin.py runs it",
}

# each kcgate line of the README and the exit code its words imply
EXIT = {
    "kcgate --version": 0,
    "kcgate init mypackage --github": 0,  # "contracts.toml from your kernels": its quick run passes a correct one
    "kcgate validate": 0,
    "kcgate run --runner laptop": 0,  # "exit 1 on a violation": mypackage's softmax has none
    "kcgate baseline update results/": 0,
    "kcgate --install-completion": 0,
    "kcgate run": 0,  # the repository's own contracts, on the CPU
}
# files a line says it writes (relative to where it runs)
WRITES = {
    "kcgate init mypackage --github": [
        "contracts.toml",
        ".github/workflows/kcgate-run.yml",
        ".github/workflows/kcgate-report.yml",
    ],
    "kcgate run --runner laptop": ["results/laptop.json"],
    "kcgate baseline update results/": ["baselines/laptop.json"],
}
QUICK_START = "kcgate init mypackage"  # the block that runs in a user's project, not in the repository

MYPACKAGE = '''"""A kernel package as the README's quick start names it: one correct softmax."""

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
'''


def readme_blocks() -> list[list[str]]:
    """The command lines of each ``bash`` block of README.md: comments cut, blank lines dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    out = []
    for block in blocks:
        lines = [re.split(r"\s+#|^#", line, maxsplit=1)[0].strip() for line in block.splitlines()]
        out.append([line for line in lines if line])
    return out


def test_every_readme_shell_line_is_run_or_named() -> None:
    lines = [line for block in readme_blocks() for line in block]
    assert lines, "README.md has no bash block"
    for line in lines:
        word = line.split()[0]
        assert word == "kcgate" or word in NOT_RUN, f"README line {line!r}: run it here or name it in NOT_RUN"
    assert {line for line in lines if line.startswith("kcgate ")} == set(EXIT), (
        "a kcgate line without its code"
    )


def _kcgate_on_path(tmp: Path, source: Path) -> dict[str, str]:
    """An environment whose ``kcgate`` runs ``source``'s kcgate with this interpreter, and whose HOME is
    ``tmp`` (``--install-completion`` writes there, never to the user's shell files)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "kcgate"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom kcgate.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "PYTHONPATH": str(source), "HOME": str(home), "SHELL": "/bin/bash",
            "GITHUB_ACTIONS": "", "CI": ""}  # fmt: skip


def _run_block(lines: list[str], cwd: Path, env: dict[str, str]) -> None:
    for line in (ln for ln in lines if ln.startswith("kcgate")):
        proc = subprocess.run(
            shlex.split(line),
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == EXIT[line], (
            f"{line}: exit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
        for name in WRITES.get(line, []):
            assert (cwd / name).is_file(), f"{line}: wrote no {name}\n{proc.stdout[-2000:]}"
        if line == "kcgate --install-completion":
            assert list((Path(env["HOME"]) / ".bash_completions").glob("kcgate*")), proc.stdout


@pytest.mark.slow  # init's probe and quick run, then a run: real subprocesses (~2 min on a loaded 2-core machine)
def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    block = next(b for b in readme_blocks() if any(line.startswith(QUICK_START) for line in b))
    project = tmp_path / "project"
    (project / "mypackage").mkdir(parents=True)
    (project / "mypackage" / "__init__.py").write_text(MYPACKAGE)
    _run_block(block, project, _kcgate_on_path(tmp_path, ROOT))


@pytest.mark.slow  # kcgate run of the repository's own contracts (minutes on a loaded 2-core machine)
def test_the_other_examples_run_in_a_copy_of_the_repository(tmp_path: Path) -> None:
    copy = tmp_path / "kcgate"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    env = _kcgate_on_path(tmp_path, copy)
    blocks = [b for b in readme_blocks() if not any(line.startswith(QUICK_START) for line in b)]
    for block in blocks:
        _run_block(block, copy, env)
    assert list((copy / "results").glob("*.json")), "kcgate run wrote no results file"
