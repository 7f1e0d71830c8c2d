"""The baseline store: files, directories, git refs, deterministic writes and the `baseline update` command."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kcgate.cli import app
from kcgate.errors import ResultsError, UsageError
from kcgate.results import baseline
from kcgate.results.model import load_run

DATA = Path(__file__).parents[1] / "data" / "diff"


def _copy(tmp: Path, name: str, as_name: str | None = None) -> Path:
    target = tmp / (as_name or name)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(DATA / name, target)
    return target


def test_file_is_indexed_by_runner() -> None:
    assert list(baseline.load_results(DATA / "base.json")) == ["cpu-ci"]


def test_directory_is_searched_recursively(tmp_path: Path) -> None:
    _copy(tmp_path, "current.json", "artifacts/results-cpu/cpu-ci.json")
    _copy(tmp_path, "current-no-baseline.json", "artifacts/results-fresh/deep/x.json")
    assert sorted(baseline.load_results(tmp_path)) == ["cpu-ci", "cpu-fresh"]


def test_two_files_for_one_runner_name_both(tmp_path: Path) -> None:
    a = _copy(tmp_path, "current.json", "a/cpu.json")
    b = _copy(tmp_path, "base.json", "b/cpu.json")
    with pytest.raises(ResultsError) as err:
        baseline.load_results(tmp_path)
    assert str(a) in err.value.message and str(b) in err.value.message


def test_same_runner_in_two_sources_is_an_error() -> None:
    with pytest.raises(ResultsError, match="two results files for runner 'cpu-ci'"):
        baseline.load_many([DATA / "base.json", DATA / "current.json"])


def test_foreign_json_is_skipped_but_broken_json_is_not(tmp_path: Path) -> None:
    _copy(tmp_path, "base.json")
    (tmp_path / "report.json").write_text(json.dumps({"kind": "kcgate-report", "passed": True}))
    assert list(baseline.load_results(tmp_path)) == ["cpu-ci"]
    (tmp_path / "broken.json").write_text('{"schema_version": 1, "runner": ')
    with pytest.raises(ResultsError, match="broken.json"):
        baseline.load_results(tmp_path)


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    outside = _copy(tmp_path, "base.json", "outside/secret.json")
    (tmp_path / "art").mkdir()
    (tmp_path / "art" / "link.json").symlink_to(outside)
    (tmp_path / "art" / "linkdir").symlink_to(outside.parent, target_is_directory=True)
    assert baseline.load_results(tmp_path / "art") == {}


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        baseline.load_results(tmp_path / "nope")


# ---- writing -------------------------------------------------------------------------------------


def test_write_is_deterministic_and_drops_volatile_fields(tmp_path: Path) -> None:
    runs = baseline.load_results(DATA / "current.json")
    (first,) = baseline.write_baselines(runs, tmp_path / "one")
    (second,) = baseline.write_baselines(runs, tmp_path / "two")
    assert first.name == "cpu-ci.json" and first.read_bytes() == second.read_bytes()
    doc = json.loads(first.read_text())
    assert doc["meta"] == {} and list(doc) == sorted(set(doc) - {"cases"}) + ["cases"]  # rows come last
    assert first.read_text().count("\n  [") == len(runs["cpu-ci"].cases)  # one line per case
    assert load_run(first).cases == tuple(
        replace(c, duration_s=0.0, kernel_s=0.0, oracle_s=0.0) for c in runs["cpu-ci"].cases
    )


@pytest.mark.parametrize("name", ["../../etc/passwd", ".hidden", "a/b", "", "x" * 101, "ok\nnot"])
def test_runner_names_that_cannot_be_file_names(tmp_path: Path, name: str) -> None:
    run = replace(load_run(DATA / "base.json"), runner=name)
    with pytest.raises(UsageError, match="cannot name a baseline file"):
        baseline.write_baselines({name: run}, tmp_path)
    assert not any(tmp_path.parent.rglob("passwd"))


def test_incomplete_results_are_no_baseline(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="incomplete"):
        baseline.write_baselines(baseline.load_results(DATA / "current-incomplete.json"), tmp_path)


def test_update_command(tmp_path: Path) -> None:
    out = tmp_path / "baselines"
    result = CliRunner().invoke(app, ["baseline", "update", str(DATA / "current.json"), "--dir", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "cpu-ci.json").exists() and "wrote" in result.output


def test_update_command_rejects_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    result = CliRunner().invoke(app, ["baseline", "update", str(bad), "--dir", str(tmp_path / "b")])
    assert result.exit_code == 3 and "a results file must hold a JSON object" in result.output


def test_project_settings_default_without_contracts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    policy, directory = baseline.project_settings(None)
    assert policy == baseline.Policy() and directory is None
    with pytest.raises(UsageError, match="no such contracts file"):
        baseline.project_settings(tmp_path / "missing.toml")


# ---- git -----------------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> None:
    ident = ["-c", "user.email=t@example.invalid", "-c", "user.name=t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", *ident, *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    _git(tmp_path, "init", "-q")
    _copy(tmp_path, "base.json", "baselines/cpu-ci.json")
    (tmp_path / "baselines" / "notes.json").write_text('{"kind": "something-else"}')
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "baselines")
    (tmp_path / "baselines" / "cpu-ci.json").write_text("changed in the work tree, not committed")
    return tmp_path


def test_git_ref_reads_the_committed_version(repo: Path) -> None:
    runs = baseline.load_results("git:HEAD:baselines", repo=repo)
    assert runs["cpu-ci"] == load_run(DATA / "base.json")
    assert baseline.load_results("git:HEAD:baselines/cpu-ci.json", repo=repo).keys() == {"cpu-ci"}


@pytest.mark.parametrize(
    "spec", ["git:--output=/tmp/x:baselines", "git:HEAD;rm -rf /:baselines", "git:$(id):b"]
)
def test_git_ref_must_be_plain(repo: Path, spec: str) -> None:
    with pytest.raises(UsageError, match="not a plain ref"):
        baseline.load_results(spec, repo=repo)


def test_git_unknown_ref_or_path(repo: Path) -> None:
    with pytest.raises(UsageError, match="git ls-tree failed"):
        baseline.load_results("git:no-such-branch:baselines", repo=repo)
    with pytest.raises(UsageError, match="no \\*.json results"):
        baseline.load_results("git:HEAD:elsewhere", repo=repo)
