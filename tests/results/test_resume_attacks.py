"""``--resume`` after a change that no contract field shows (#44, the second attack suite): the kernel's
package ``__init__`` rebinding it, a module it imports with ``importlib``, and ``[project] paths`` that
resolve the same import string to another file. A finished pass must not be kept for a kernel that is now
1.5x off: each is run again, and the run exits 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.results.model import load_run
from tests.conftest import ROOT, kcgate

pytestmark = pytest.mark.slow

_GOOD = "import torch\n\ndef softmax(x):\n    return torch.softmax(x, -1)\n"
_BROKEN = "import torch\n\ndef softmax(x):\n    return torch.softmax(x, -1) * 1.5\n"
_DYNAMIC = (
    "import importlib\nimport torch\n\ndef softmax(x):\n"
    "    return torch.softmax(x, -1) * importlib.import_module('kern.helper').SCALE\n"
)
_CONTRACTS = """[project]
paths = ["{path}"]

[[contract]]
id = "sm"
class = "C-PRC-01"
kernel = "kern.ops:softmax"
op = "softmax"
dtypes = ["float32"]
shapes = [[8, 64]]
protocol = {{ seeds = 1, trials = 1, boundary = false }}
"""


def _package(root: Path, ops: str, init: str = "", helper: str = "SCALE = 1.0\n") -> None:
    (root / "kern").mkdir(parents=True, exist_ok=True)
    (root / "kern" / "__init__.py").write_text(init)
    (root / "kern" / "ops.py").write_text(ops)
    (root / "kern" / "helper.py").write_text(helper)


def _run(tmp_path: Path, path: str, *extra: str):  # type: ignore[no-untyped-def]
    (tmp_path / "contracts.toml").write_text(_CONTRACTS.format(path=path))
    return kcgate(
        "run", "-c", "contracts.toml", "--results", "r/cpu.json", "--seed", "1", "--shrink-s", "0", "-q", *extra,
        cwd=tmp_path, env={"PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def _change(tmp_path: Path, how: str) -> str:
    """Set up the passing project, return the paths entry the resumed run uses after ``how``."""
    if how == "package-init":
        _package(tmp_path / "a", _GOOD)
        return "a"
    if how == "importlib-helper":
        _package(tmp_path / "a", _DYNAMIC)
        return "a"
    _package(tmp_path / "a", _GOOD)
    _package(tmp_path / "b", _BROKEN)
    return "b"


def _break(tmp_path: Path, how: str) -> None:
    if how == "package-init":
        (tmp_path / "a" / "kern" / "__init__.py").write_text(
            "from . import ops as _ops\nimport torch\n_ops.softmax = lambda x: torch.softmax(x, -1) * 1.5\n"
        )
    elif how == "importlib-helper":
        (tmp_path / "a" / "kern" / "helper.py").write_text("SCALE = 1.5\n")


@pytest.mark.parametrize("how", ["package-init", "importlib-helper", "other-paths"])
def test_a_change_no_contract_field_shows_is_run_again(tmp_path: Path, how: str) -> None:
    later = _change(tmp_path, how)
    first = _run(tmp_path, "a")
    assert first.returncode == 0, first.stdout + first.stderr
    _break(tmp_path, how)
    resumed = _run(tmp_path, later, "--resume")
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    assert [c.status for c in load_run(tmp_path / "r" / "cpu.json").cases] == ["fail"]
