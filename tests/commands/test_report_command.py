"""``kcgate report`` end to end in a subprocess: exit codes, files, step outputs, publishing, no torch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import kcgate

from kcgate.results.model import RunResult, write_run
from tests.testing.fake_github import FakeGitHub
from tests.testing.report_samples import SHA_NEW, write_results_pair


def outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "KCGATE_"))}
    return {**env, **extra}


@pytest.mark.slow
def test_a_regression_blocks_and_everything_is_written(tmp_path: Path) -> None:
    base, artifacts = write_results_pair(tmp_path)
    out, summary = tmp_path / "out.txt", tmp_path / "summary.md"
    env = clean_env(GITHUB_OUTPUT=str(out), GITHUB_STEP_SUMMARY=str(summary), GITHUB_ACTIONS="true")
    r = kcgate(
        "report",
        str(artifacts),
        "--baseline",
        str(base),
        "--junit",
        str(tmp_path / "j.xml"),
        "--comment-out",
        str(tmp_path / "c.md"),
        "--today",
        "2026-11-01",
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 1, r.stderr
    assert "::error file=contracts.toml,line=12,title=new violation%3A gemm-bf16::" in r.stdout
    assert "kcgate report: FAIL: 1 blocking (new violation 1)" in r.stdout
    o = outputs(out)
    assert o["verdict"] == "fail" and o["blocking"] == "1"
    assert json.loads(o["counts"]) == {"new-violation": 1, "unchanged": 1}
    assert o["junit-path"] == str(tmp_path / "j.xml") and (tmp_path / "j.xml").exists()
    assert "new violation" in summary.read_text() and "new violation" in (tmp_path / "c.md").read_text()


def test_no_regression_passes_without_annotations_outside_actions(tmp_path: Path) -> None:
    base, artifacts = write_results_pair(tmp_path, regress=False)
    r = kcgate("report", str(artifacts), "--baseline", str(base), env=clean_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "::" not in r.stdout and "PASS" in r.stdout


@pytest.mark.slow
def test_a_missing_expected_runner_blocks(tmp_path: Path) -> None:
    base, artifacts = write_results_pair(tmp_path, regress=False)
    r = kcgate(
        "report",
        str(artifacts),
        "--baseline",
        str(base),
        "--expect-runner",
        "amd-mi300x",
        env=clean_env(),
        cwd=tmp_path,
    )
    assert r.returncode == 1 and "missing runner" in r.stdout


def test_fail_on_overrides_the_policy(tmp_path: Path) -> None:
    base, artifacts = write_results_pair(tmp_path)
    r = kcgate(
        "report", str(artifacts), "--baseline", str(base), "--fail-on", "error", env=clean_env(), cwd=tmp_path
    )
    assert r.returncode == 0, r.stdout + r.stderr
    bad = kcgate("report", str(artifacts), "--fail-on", "fixed,nonsense", env=clean_env(), cwd=tmp_path)
    assert bad.returncode == 3 and "cannot block" in bad.stderr


@pytest.mark.slow
def test_shards_of_one_runner_are_merged(tmp_path: Path) -> None:
    base, artifacts = write_results_pair(tmp_path, regress=False)
    from kcgate.results.model import load_run

    run = load_run(artifacts / "kcgate-results-cpu-x86" / "cpu-x86.json")
    (artifacts / "kcgate-results-cpu-x86" / "cpu-x86.json").unlink()
    write_run(artifacts / "s1" / "cpu-x86.json", RunResult(run.runner, run.fingerprint, run.cases[:1]))
    write_run(artifacts / "s2" / "cpu-x86.json", RunResult(run.runner, run.fingerprint, run.cases[1:]))
    r = kcgate("report", str(artifacts), "--baseline", str(base), env=clean_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_hostile_or_huge_artifacts_are_refused_with_exit_3(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.json").write_text('{"schema_version": 1, "runner": 5}')
    r = kcgate("report", str(tmp_path / "a"), env=clean_env(), cwd=tmp_path)
    assert r.returncode == 3 and "x.json" in r.stderr
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "link.json").symlink_to("/etc/passwd")
    r = kcgate("report", str(tmp_path / "b"), env=clean_env(), cwd=tmp_path)
    assert r.returncode == 3 and "no results files" in r.stderr


@pytest.mark.slow
def test_publishing_posts_the_comment_and_a_failure_never_changes_the_exit_code(tmp_path: Path) -> None:
    base, artifacts = write_results_pair(tmp_path)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"workflow_run": {"head_sha": SHA_NEW, "pull_requests": []}}))
    with FakeGitHub() as gh:
        gh.add_pull(3, SHA_NEW)
        env = clean_env(
            GITHUB_TOKEN=gh.token,
            GITHUB_REPOSITORY="acme/kernels",
            GITHUB_API_URL=gh.base_url,
            GITHUB_EVENT_NAME="workflow_run",
            GITHUB_EVENT_PATH=str(event),
            GITHUB_RUN_ID="9",
            KCGATE_GITHUB_THROTTLE="0",
            KCGATE_GITHUB_BACKOFF="0",
            GITHUB_STEP_SUMMARY=str(tmp_path / "s.md"),
            GITHUB_ACTIONS="true",
        )
        args = ("report", str(artifacts), "--baseline", str(base), "--publish", "--check-run")
        r = kcgate(*args, env=env, cwd=tmp_path)
        assert r.returncode == 1, r.stderr
        [comment] = gh.comments_on(3)
        assert "new violation" in comment["body"] and SHA_NEW in comment["body"]
        assert [run["conclusion"] for run in gh.check_runs.values()] == ["failure"]
        gh.read_only = True
        r = kcgate(*args, env=env, cwd=tmp_path)
        assert r.returncode == 1
        assert "::warning title=kcgate publish::GitHub refused the write (403)" in r.stdout
        assert "could not post to the pull request" in (tmp_path / "s.md").read_text()


def test_report_never_imports_torch(tmp_path: Path, no_torch_env: dict[str, str]) -> None:
    base, artifacts = write_results_pair(tmp_path)
    r = kcgate("report", str(artifacts), "--baseline", str(base), env=clean_env(**no_torch_env), cwd=tmp_path)
    assert r.returncode == 1, r.stderr
