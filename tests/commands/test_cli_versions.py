"""The CLI's usage errors under the lowest and the newest typer and click the project allows (issue 35 #8,
#12): a mistyped flag is exit 3 "No such option" in every environment, never a traceback or exit 4.

Each environment is a fresh venv (``python -m venv`` + ``pip install``) holding only the CLI's
dependencies at pinned versions, with kcgate taken from this checkout (PYTHONPATH). The newest pair
installs a standalone click 8.5 beside typer 0.29 (which runs its own vendored click), as an ML
environment with triton, Liger and transformers does. Building them needs a package index: the test
is skipped where pip cannot reach one. ``KCGATE_CLI_VENVS``: a directory to keep the venvs in between
runs. Run alone with ``.ci/cli-versions``.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

# The tested range; pyproject.toml's typer floor is the first row's (checked below). typer 0.12.5
# requires click>=8.0.0: both ends of that click range are tested with it.
MATRIX = (
    ("typer==0.12.5", "click==8.0.0"),
    ("typer==0.12.5", "click==8.1.8"),
    ("typer==0.29.2", "click==8.5.1"),
)
OTHERS = ("tomli>=2.1", "numpy>=1.24", "junit-xml>=1.9")  # what the CLI imports besides typer

# (arguments, exit code, text on stderr or stdout)
USAGE = (
    (("run", "--results", "x"), 3, "No such option: --results"),
    (("diff", "--bogus", "a", "b"), 3, "No such option: --bogus"),
    (("--bogus",), 3, "No such option: --bogus"),
    ((), 0, "Usage:"),
    (("--version",), 0, "kcgate 0.1.0"),
    (("validate", "no-such-contracts.toml"), 2, "no such file"),
)


def _venv(pins: tuple[str, ...], root: Path) -> Path:
    """A venv with ``pins`` installed (reused when ``root`` already holds it); skip without an index."""
    name = hashlib.sha256(" ".join(pins).encode()).hexdigest()[:12]
    env = root / name
    python = env / "bin" / "python"
    if (env / ".ready").exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True, capture_output=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins, *OTHERS],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot install {' '.join(pins)} (no package index?): {done.stderr.strip()[-300:]}")
    (env / ".ready").touch()
    return python


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kept = os.environ.get("KCGATE_CLI_VENVS")
    return Path(kept) if kept else tmp_path_factory.mktemp("cli-venvs")


@pytest.mark.parametrize("pins", MATRIX, ids=lambda p: "+".join(p))
def test_usage_errors_are_usage_errors_with_every_typer_and_click(pins: tuple[str, ...], venvs: Path) -> None:
    python = _venv(pins, venvs)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(ROOT)
    for args, code, words in USAGE:
        proc = subprocess.run(
            [str(python), "-m", "kcgate", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=venvs,
            timeout=120,
        )
        said = proc.stdout + proc.stderr
        assert proc.returncode == code and words in said, (
            f"{pins} kcgate {' '.join(args)}: {proc.returncode}\n{said}"
        )
        assert "Traceback" not in said and "internal error:" not in said, said


def test_the_declared_typer_range_is_the_tested_one() -> None:
    """pyproject.toml's typer floor and ceiling are the versions this test runs."""
    text = (ROOT / "pyproject.toml").read_text()
    spec = re.search(r'"typer(>=[^"]+)"', text)
    assert spec is not None
    low = MATRIX[0][0].split("==")[1]
    high = MATRIX[-1][0].split("==")[1]
    major, minor, _ = high.split(".")
    assert spec.group(1) == f">={low},<{major}.{int(minor) + 1}", spec.group(1)
