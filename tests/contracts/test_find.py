"""Config discovery (``contracts/find.py``): from a subdirectory, the nearest contracts.toml upward, or the
file a pyproject.toml's ``[tool.kcgate]`` names, never past the repository root."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.contracts.find import find_contracts
from kcgate.errors import ContractsError


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src" / "pkg").mkdir(parents=True)
    return repo


def test_the_nearest_contracts_file_upward(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "contracts.toml").write_text("")
    found = find_contracts(repo / "src" / "pkg")
    assert found is not None and found.path == Path("../../contracts.toml")
    assert "above" in found.note
    here = find_contracts(repo)
    assert here is not None and here.path == Path("contracts.toml") and here.note == ""


def test_a_nearer_file_wins_and_the_search_stops_at_the_repository_root(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (tmp_path / "contracts.toml").write_text("")  # above the repository: never used
    assert find_contracts(repo / "src") is None
    (repo / "src" / "contracts.toml").write_text("")
    found = find_contracts(repo / "src" / "pkg")
    assert found is not None and found.path == Path("../contracts.toml")


def test_pyproject_tool_kcgate_names_the_file(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.kcgate]\ncontracts = "ci/kernels.toml"\n'
    )
    found = find_contracts(repo / "src" / "pkg")
    assert found is not None and found.path == Path("../../ci/kernels.toml")
    assert "[tool.kcgate] contracts in ../../pyproject.toml" in found.note
    (repo / "pyproject.toml").write_text('[project]\nname = "x"\n')  # no [tool.kcgate]: not a config
    assert find_contracts(repo / "src") is None


@pytest.mark.parametrize("text", ["[tool.kcgate\n", "[tool.kcgate]\ncontracts = 3\n"])
def test_a_broken_pyproject_is_named(tmp_path: Path, text: str) -> None:
    repo = _repo(tmp_path)
    (repo / "pyproject.toml").write_text(text)
    with pytest.raises(ContractsError) as err:
        find_contracts(repo / "src")
    assert "pyproject.toml" in err.value.render()
