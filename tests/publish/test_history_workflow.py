"""docs/templates/kcgate-report.yml's history and pages jobs, simulated the way GitHub runs them: pushes
to the default branch append to the kcgate-history data branch (a real bare git repository stands for
the remote) and publish the dashboard; a PR run's comment then charts the recorded commits.

Steps run for real: the template's shell steps with their env, the kcgate action's steps (test_action),
and the artifact download, checkout and Pages upload as copies of the files they move."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_action import report_env, run_action
from test_report_workflow import TEMPLATE, evaluate_if

from kcgate.render.dashboard import page_name
from kcgate.results.model import write_run
from tests.testing.fake_github import FakeGitHub
from tests.testing.history_samples import (
    DRIFT_RUNNER,
    FAIL_AT,
    RUNNERS,
    commit_sha,
    run_at,
    write_commits,
)
from tests.testing.report_samples import SHA_NEW

yaml = pytest.importorskip("yaml")
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
N_PUSHES = FAIL_AT + 1


def workflow() -> dict[str, Any]:
    return yaml.safe_load(TEMPLATE.read_text())


def context(event: str, sha: str, branch: str = "main") -> dict[str, Any]:
    run = {
        "id": 41,
        "event": event,
        "conclusion": "success",
        "head_sha": sha,
        "head_branch": branch,
        "head_commit": {"timestamp": "2026-11-01T12:00:00+01:00"},
        "head_repository": {"full_name": "acme/kernels"},
        "html_url": "https://github.com/acme/kernels/actions/runs/41",
        "pull_requests": [{"number": 5, "head": {"sha": sha}}] if event == "pull_request" else [],
    }
    repo = {"default_branch": "main", "full_name": "acme/kernels"}
    return {"github": {"event": {"workflow_run": run, "repository": repo}, "repository": "acme/kernels",
                       "server_url": "https://github.com", "token": ""}}  # fmt: skip


def value(expr: str, ctx: dict[str, Any]) -> str:
    out: Any = ctx
    for key in expr.split("."):
        out = out.get(key) if isinstance(out, dict) else None
    return "" if out is None else str(out)


def substitute(text: object, ctx: dict[str, Any]) -> str:
    return EXPR.sub(lambda m: value(m.group(1), ctx), str(text))


def run_job(
    name: str, ws: Path, ctx: dict[str, Any], artifacts: Path, remote: Path, gh: FakeGitHub
) -> list[str]:
    """Run one job's steps in a fresh workspace; the names of the steps that ran."""
    job = workflow()["jobs"][name]
    ran = []
    ws.mkdir(parents=True, exist_ok=True)  # a job's checkout of the default branch may be there already
    (ws / "event.json").write_text(json.dumps(ctx["github"]["event"]))
    for step in job["steps"]:
        uses, with_ = (
            step.get("uses", ""),
            {k: substitute(v, ctx) for k, v in (step.get("with") or {}).items()},
        )
        if uses.startswith("actions/checkout@") and with_.get("ref") == "kcgate-history":
            subprocess.run(
                ["git", "clone", "-q", "--branch", "kcgate-history", str(remote), str(ws / with_["path"])],
                check=False,
            )
        elif uses.startswith("actions/download-artifact@"):
            shutil.copytree(artifacts, ws / with_["path"])
        elif uses.startswith("actions/upload-pages-artifact@"):
            shutil.copytree(ws / with_["path"], ws.parent / "pages-artifact", dirs_exist_ok=True)
        elif uses.startswith("kcgate/kcgate@"):
            env = report_env(ws, ws / "event.json", gh.base_url)
            _outputs, procs = run_action(with_ | {"github-token": gh.token}, env, ws)
            assert procs[-1].returncode == 0, procs[-1].stdout + procs[-1].stderr
        elif "run" in step:
            env = {k: substitute(v, ctx) for k, v in (step.get("env") or {}).items()}
            if "HISTORY_REMOTE" in env:
                env["HISTORY_REMOTE"] = str(remote)  # the bare repository stands for github.com
            proc = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], cwd=ws, env=_git_env() | env,
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
            assert proc.returncode == 0, proc.stdout + proc.stderr
        ran.append(step.get("name") or uses.split("@")[0])
    return ran


def _git_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | {"GIT_TERMINAL_PROMPT": "0"}


def branch_files(remote: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(remote), "ls-tree", "-r", "--name-only", "kcgate-history"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return out.stdout.split()


def commits_on(remote: Path) -> int:
    out = subprocess.run(
        ["git", "-C", str(remote), "rev-list", "--count", "kcgate-history"], capture_output=True, text=True
    )
    return int(out.stdout or 0)


@pytest.fixture()
def remote(tmp_path: Path) -> Path:
    path = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


def test_only_default_branch_pushes_record_and_only_pages_may_deploy() -> None:
    jobs = workflow()["jobs"]
    for event, branch, runs in (
        ("push", "main", True),
        ("push", "feature", False),
        ("pull_request", "main", False),
    ):
        assert evaluate_if(jobs["history"]["if"], context(event, "a" * 40, branch)) is runs
        assert evaluate_if(jobs["report"]["if"], context(event, "a" * 40, branch)) is (
            event == "pull_request"
        )
    assert jobs["pages"]["needs"] == "history" and jobs["pages"]["environment"]["name"] == "github-pages"
    assert jobs["pages"]["permissions"] == {"pages": "write", "id-token": "write"}
    for name in ("report", "history"):
        assert not {"pages", "id-token"} & set(jobs[name]["permissions"]), name
    assert jobs["report"]["permissions"]["contents"] == "read"


@pytest.mark.slow
def test_pushes_append_to_the_history_publish_the_site_and_a_pr_comment_charts_it(
    tmp_path: Path, remote: Path
) -> None:
    dirs = write_commits(tmp_path / "runs", N_PUSHES)
    with FakeGitHub() as gh:
        for i, artifacts in enumerate(dirs):
            ran = run_job(
                "history", tmp_path / f"push-{i}", context("push", commit_sha(i)), artifacts, remote, gh
            )
            assert "Push the history" in ran and "actions/upload-pages-artifact" in ran
        # a re-run of the last push: the same files, so nothing new on the branch
        run_job("history", tmp_path / "rerun", context("push", commit_sha(FAIL_AT)), dirs[-1], remote, gh)
        assert commits_on(remote) == N_PUSHES
        files = branch_files(remote)
        logs, runs = [f for f in files if f.endswith(".jsonl")], [f for f in files if f.startswith("runs/")]
        assert len(logs) == len(runs) == N_PUSHES * len(RUNNERS) and len(files) == 2 * len(logs)
        assert f"{commit_sha(FAIL_AT)}/{DRIFT_RUNNER}.jsonl" in files
        assert (
            f"runs/{commit_sha(FAIL_AT)}/{DRIFT_RUNNER}.json" in files
        )  # the whole run: later PRs' baseline

        site = tmp_path / "pages-artifact"
        index = (site / "index.html").read_text()
        cell = re.search(
            rf'<td class="cell" style="background:(#\w+);color:#\w+" data-contract="gemm-bf16" data-runner="{DRIFT_RUNNER}" data-band="fails"',
            index,
        )
        assert cell, "the planted failure is not coloured as one at the head"
        assert f'data-kind="drift" data-commit="{commit_sha(FAIL_AT - 1)}"' in index
        assert (site / page_name("gemm-bf16")).is_file() and (site / "history.txt").is_file()

        # a PR that breaks gemm-bf16 on nvidia-h100, judged against the last default-branch commit
        pr = tmp_path / "pr"
        base_dir = pr / "baselines"
        for runner in RUNNERS:
            write_run(base_dir / f"{runner}.json", run_at(FAIL_AT, runner), stable=True)
        artifacts = pr / "artifacts"
        for runner in RUNNERS:
            now = run_at(FAIL_AT, runner)
            if runner == "nvidia-h100":
                now = now.with_cases(
                    [
                        c
                        if c.contract_id != "gemm-bf16"
                        else type(c)(
                            **{
                                **c.__dict__,
                                "status": "fail",
                                "metrics": type(c.metrics)(budget_used=3.0, max_abs_err=1e-3),
                            }
                        )
                        for c in now.cases
                    ]
                )
            write_run(artifacts / f"kcgate-results-{runner}" / f"{runner}.json", now)
        ws = tmp_path / "report"  # the default branch's checkout: its policy and baselines
        ws.mkdir()
        (ws / "contracts.toml").write_text(
            '[project]\nbaselines = "baselines"\n\n[[contract]]\nid = "gemm-bf16"\nclass = "C-PRC-01"\n'
            'kernel = "kcgate.kernels.builtin:matmul"\nop = "matmul"\n'
        )
        shutil.copytree(base_dir, ws / "baselines")
        gh.add_pull(5, SHA_NEW)
        ctx = context("pull_request", SHA_NEW)
        job = workflow()["jobs"]["report"]
        assert evaluate_if(job["if"], ctx)
        run_job("report", ws, ctx, artifacts, remote, gh)
        [comment] = gh.comments_on(5)
        body = comment["body"]
        assert "### Severity over commits" in body and "```mermaid" in body and "xychart-beta" in body
        recorded = ", ".join(f'"{commit_sha(i)[:7]}"' for i in range(N_PUSHES - 1))
        # the baselines are the last push's runs, found in the history case for case: that commit is drawn
        # once, as the base (it was drawn twice: "5555555 (3.5 capped)", then "base (3.5 capped)");
        # amd's failure has its value written, not just 2
        base = f'"base {commit_sha(N_PUSHES - 1)[:7]} (3.5 capped)"'
        assert f'x-axis [{recorded}, {base}, "head (3.5 / 3 capped)"]' in body
        assert "nvidia-h100 0.05 → 3.00× fails (before: 0.05, 0.05, 0.05, 0.05)" in body  # the text line
