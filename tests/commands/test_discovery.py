"""``kcgate validate`` (and every command reading contracts.toml) from a subdirectory finds the file upward
and says which one it used; with none, the error names a flag that exists."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT, kcgate


def test_validate_from_a_subdirectory_finds_the_repositorys_file() -> None:
    res = kcgate("validate", cwd=ROOT / "docs")
    assert res.returncode == 0, res.stderr
    assert "kcgate: using ../contracts.toml (the nearest contracts.toml above" in res.stderr
    assert res.stdout.startswith("../contracts.toml: OK:")


def test_validate_with_no_file_anywhere_names_the_flag(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "sub").mkdir()
    res = kcgate("validate", cwd=tmp_path / "sub")
    assert res.returncode == 2 and "name it with -c/--contracts PATH" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert kcgate("validate", "--help").stdout.count("--contracts") >= 1


def test_pyproject_names_the_file(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "k.toml").write_text((ROOT / "contracts.toml").read_text())
    (tmp_path / "pyproject.toml").write_text('[tool.kcgate]\ncontracts = "ci/k.toml"\n')
    res = kcgate("validate", "--format", "json", "--strict-imports", cwd=tmp_path)
    assert "[tool.kcgate] contracts in pyproject.toml" in res.stderr
    assert json.loads(res.stdout)["file"] == "ci/k.toml"


def test_a_package_not_installed_here_is_a_warning_unless_strict(tmp_path: Path) -> None:
    """The pre-commit hook's environment has no torch: a kernel there cannot be looked up, and everything
    else is still checked; --strict-imports makes it an error."""
    (tmp_path / "contracts.toml").write_text(
        '[[contract]]\nid = "a"\nclass = "C-PRC-01"\nkernel = "no_such_pkg_43.ops:matmul"\nop = "matmul"\n'
    )
    res = kcgate("validate", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "not installed in this environment: package 'no_such_pkg_43'" in res.stderr
    strict = kcgate("validate", "--strict-imports", cwd=tmp_path)
    assert strict.returncode == 2 and "not installed in this environment" in strict.stderr
    (tmp_path / "contracts.toml").write_text(
        '[[contract]]\nid = "a"\nclass = "C-PRC-01"\nkernel = "no_such_pkg_43.ops:matmul"\nop = "matmull"\n'
    )
    res = kcgate("validate", cwd=tmp_path)
    assert res.returncode == 2 and "matmull" in res.stderr  # the rest is still checked


def test_a_contracts_toml_beside_a_pyproject_naming_another_file_is_refused(tmp_path: Path) -> None:
    """D14: neither file silently wins; the message names both and the ways out. A pyproject naming the
    contracts.toml beside it is no ambiguity."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "k.toml").write_text((ROOT / "contracts.toml").read_text())
    (tmp_path / "contracts.toml").write_text((ROOT / "contracts.toml").read_text())
    (tmp_path / "pyproject.toml").write_text('[tool.kcgate]\ncontracts = "ci/k.toml"\n')
    res = kcgate("validate", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "contracts.toml and pyproject.toml ([tool.kcgate] contracts = 'ci/k.toml')" in res.stderr
    assert "-c/--contracts" in res.stderr and "Traceback" not in res.stderr
    assert kcgate("validate", "-c", "ci/k.toml", cwd=tmp_path).returncode == 0
    (tmp_path / "pyproject.toml").write_text('[tool.kcgate]\ncontracts = "./contracts.toml"\n')
    assert kcgate("validate", cwd=tmp_path).returncode == 0
