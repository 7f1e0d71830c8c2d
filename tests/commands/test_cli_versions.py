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

# The tested range. FLOORS: every dependency of pyproject.toml at its declared floor, with today's versions
# of their own dependencies (click, six, ...): typer 0.12.5 to 0.15.4 crash on click >= 8.3 ("Secondary flag
# is not valid for non-boolean flag"), so typer's floor is 0.16.0. Then typer's floor with the oldest click
# it allows, and the newest pair (checked below against pyproject.toml).
FLOORS = ("typer==0.16.0", "numpy==1.24.4", "junit-xml==1.9", "tomli==2.1.0")
MATRIX = (
    FLOORS,
    ("typer==0.16.0", "click==8.0.0"),
    ("typer==0.29.2", "click==8.5.1"),
)
OTHERS = ("tomli>=2.1", "numpy>=1.24", "junit-xml>=1.9")  # what the CLI imports besides typer

# (arguments, exit code, text on stderr or stdout)
USAGE = (
    (
        ("run", "--no-such-flag", "x"),
        3,
        "No such option",
    ),  # click >= 8.3 quotes the name: "option '--no-such-flag'"
    (("diff", "--bogus", "a", "b"), 3, "No such option"),
    (("--bogus",), 3, "No such option"),
    ((), 0, "Usage:"),
    (("--version",), 0, "kcgate 0.1.0"),
    (("--help",), 0, "Example: kcgate init"),
    (("run", "--help"), 0, "--format [console|json]"),
    (("history", "--help"), 0, "[default: 20; 2<=x<=100000]"),  # typer < 0.2x with rich: "\\[default"
    (("validate", "-c", "no-such-contracts.toml"), 2, "no such file"),
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
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins, *_others(pins)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot install {' '.join(pins)} (no package index?): {done.stderr.strip()[-300:]}")
    (env / ".ready").touch()
    return python


def _others(pins: tuple[str, ...]) -> tuple[str, ...]:
    """The CLI's other dependencies, at their floors where ``pins`` names them."""
    named = {p.split("==")[0] for p in pins}
    return tuple(o for o in OTHERS if o.split(">=")[0] not in named)


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
        bogus = next((a for a in args if a.startswith("--")), "") if code == 3 else ""
        assert proc.returncode == code and words in said and bogus in said, (
            f"{pins} kcgate {' '.join(args)}: {proc.returncode}\n{said}"
        )
        assert "Traceback" not in said and "internal error:" not in said, said
        assert "\\[" not in said, f"{pins} kcgate {' '.join(args)}: rich's markup escape printed\n{said}"


def test_the_declared_ranges_are_the_tested_ones() -> None:
    """pyproject.toml's floors are FLOORS, and its typer ceiling is the newest typer tested."""
    text = (ROOT / "pyproject.toml").read_text()
    deps = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    assert deps is not None
    declared = dict(re.findall(r'"([A-Za-z0-9_.-]+)>=([^",<]+)', deps.group(1)))
    floors = dict(p.split("==") for p in FLOORS)
    assert {name: floors.get(name, "?")[: len(v)] for name, v in declared.items()} == declared, (
        declared,
        FLOORS,
    )
    high = MATRIX[-1][0].split("==")[1]
    major, minor, _ = high.split(".")
    assert f'"typer>={floors["typer"]},<{major}.{int(minor) + 1}"' in text
