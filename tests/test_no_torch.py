"""`kcgate --help`, `validate` and `schema` work where torch cannot be imported."""

from __future__ import annotations

import json

from tests.conftest import ROOT, kcgate


def test_help_without_torch(no_torch_env: dict[str, str]) -> None:
    proc = kcgate("--help", env=no_torch_env)
    assert proc.returncode == 0, proc.stderr
    for command in ("run", "validate", "schema"):
        assert command in proc.stdout


def test_validate_without_torch(no_torch_env: dict[str, str]) -> None:
    proc = kcgate("validate", str(ROOT / "contracts.toml"), env=no_torch_env)
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout


def test_schema_without_torch(no_torch_env: dict[str, str]) -> None:
    proc = kcgate("schema", env=no_torch_env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["title"] == "kcgate contracts.toml"


def test_the_poison_really_works(no_torch_env: dict[str, str]) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", "import torch"], env=no_torch_env, capture_output=True, text=True
    )
    assert proc.returncode != 0 and "poisoned" in proc.stderr


def test_help_does_not_import_torch_in_process() -> None:
    import subprocess
    import sys

    code = "import sys\nfrom kcgate.cli import app\nprint('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.stdout.strip() == "False", proc.stderr
