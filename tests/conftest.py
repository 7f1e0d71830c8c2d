"""Shared fixtures: the repo root, and running the kcgate CLI in a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session", autouse=True)
def _native_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The native Freivalds kernel is cached in a directory of this test session, not in ~/.cache (workers
    started by the tests inherit it); a developer's own KCGATE_CACHE_DIR is left as it is."""
    if os.environ.get("KCGATE_CACHE_DIR"):
        yield
        return
    os.environ["KCGATE_CACHE_DIR"] = str(tmp_path_factory.mktemp("native-cache"))
    try:
        yield
    finally:
        os.environ.pop("KCGATE_CACHE_DIR", None)


def kcgate(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    python_flags: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """Run `python [PYTHON_FLAGS] -m kcgate ARGS` and capture its output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, *python_flags, "-m", "kcgate", *args],
        cwd=cwd or ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def imported(proc: subprocess.CompletedProcess[str], word: str) -> list[str]:
    """The ``-X importtime`` lines of a run (``python_flags=("-X", "importtime")``) that name ``word``."""
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("import time:") and word in ln]


@pytest.fixture
def no_torch_env(tmp_path: Path) -> dict[str, str]:
    """An environment in which `import torch` fails, to prove a command never imports it."""
    fake = tmp_path / "poison" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('torch is poisoned in this test')\n")
    return {"PYTHONPATH": f"{fake.parent}{os.pathsep}{ROOT}"}
