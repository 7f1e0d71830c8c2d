"""`kcgate --help`, `validate` and `schema` work where torch cannot be imported."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import ROOT, kcgate


def test_help_without_torch(no_torch_env: dict[str, str]) -> None:
    proc = kcgate("--help", env=no_torch_env)
    assert proc.returncode == 0, proc.stderr
    for command in ("run", "validate", "schema"):
        assert command in proc.stdout


@pytest.mark.slow
def test_validate_without_torch(no_torch_env: dict[str, str]) -> None:
    proc = kcgate("validate", str(ROOT / "contracts.toml"), env=no_torch_env)
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout


@pytest.mark.slow
def test_validate_accepts_a_tolerance_less_custom_op_without_torch(
    no_torch_env: dict[str, str], tmp_path: Path
) -> None:
    """A custom op needs no tolerance (its bound is derived from the reference when it runs, not here)."""
    (tmp_path / "k.py").write_text("def f(x): ...\ndef r(x): ...\ndef g(s, d, gen): ...\n")
    p = tmp_path / "contracts.toml"
    p.write_text(
        '[project]\npaths = ["."]\n\n[[contract]]\nid = "c"\nclass = "C-CMP-03"\nop = "custom"\n'
        'kernel = "k:f"\nreference = "k:r"\ninputs = "k:g"\nshapes = [[4, 8]]\n'
    )
    proc = kcgate("validate", str(p), env=no_torch_env)
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout


@pytest.mark.slow
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


@pytest.mark.slow
def test_run_without_torch_says_so_before_planning_in_both_isolation_modes(
    no_torch_env: dict[str, str],
) -> None:
    import sys

    for isolation in ("process", "none"):
        proc = kcgate(
            "run", "--contracts", str(ROOT / "tests" / "data" / "small.toml"), "--isolation", isolation,
            "-k", "sum*", env=no_torch_env,
        )  # fmt: skip
        assert proc.returncode == 3, (isolation, proc.stderr)
        assert f"{sys.executable} cannot import it (torch is poisoned" in proc.stderr, proc.stderr
        assert "fix: install torch" in proc.stderr


# ---- PyGithub is the `github` extra: only publishing needs it ----------------------------------------


def _no_github_env(tmp_path: Path) -> dict[str, str]:
    fake = tmp_path / "poison-github" / "github"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('PyGithub is poisoned in this test')\n")
    return {"PYTHONPATH": f"{fake.parent}{os.pathsep}{ROOT}"}


@pytest.mark.slow
def test_run_and_report_work_without_pygithub_and_publish_names_the_fix(tmp_path: Path) -> None:
    from tests.testing.report_samples import write_results_pair

    env = _no_github_env(tmp_path)
    proc = kcgate("run", "--contracts", str(ROOT / "tests" / "data" / "small.toml"), "--list", env=env)
    assert proc.returncode == 0, proc.stderr
    base, artifacts = write_results_pair(tmp_path, regress=False)
    proc = kcgate("report", str(artifacts), "--baseline", str(base), env=env)
    assert proc.returncode == 0, proc.stderr
    proc = kcgate(
        "report", str(artifacts), "--baseline", str(base), "--publish",
        env={**env, "GITHUB_TOKEN": "x", "GITHUB_REPOSITORY": "acme/kernels"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr  # publishing never changes the verdict
    assert "pip install 'kcgate[github]'" in proc.stdout
