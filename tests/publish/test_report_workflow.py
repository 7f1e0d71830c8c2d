"""docs/templates/kcgate-report.yml, simulated the way GitHub runs it for a workflow_run event.

The job's `if:` is evaluated against the event (a small evaluator for the expression forms the template
uses), then its steps run: the artifact download is the run's artifacts copied into place (none for a
cancelled run), and the kcgate action's steps run for real against the loopback fake GitHub.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_action import ROOT, report_env, run_action

from kcgate.publish.github_pr import STICKY_MARKER, CommentMeta
from tests.testing.fake_github import FakeGitHub
from tests.testing.report_samples import SHA_NEW, write_results_pair

yaml = pytest.importorskip("yaml")

TEMPLATE = ROOT / "docs" / "templates" / "kcgate-report.yml"
_TOKEN = re.compile(r"\s*(&&|\|\||==|!=|\(|\)|'[^']*'|[A-Za-z_][\w.-]*)")


def evaluate_if(expr: str, context: dict[str, Any]) -> bool:
    """GitHub's expression syntax, the part the template uses: contexts, 'strings', == != && || ()."""
    tokens = [t for t in _TOKEN.findall(expr.replace("${{", "").replace("}}", "")) if t]
    value, rest = _or(tokens, context)
    assert not rest, f"unparsed: {rest}"
    return bool(value)


def _or(t: list[str], ctx: dict[str, Any]) -> tuple[Any, list[str]]:
    left, t = _and(t, ctx)
    while t and t[0] == "||":
        right, t = _and(t[1:], ctx)
        left = left or right
    return left, t


def _and(t: list[str], ctx: dict[str, Any]) -> tuple[Any, list[str]]:
    left, t = _cmp(t, ctx)
    while t and t[0] == "&&":
        right, t = _cmp(t[1:], ctx)
        left = left and right
    return left, t


def _cmp(t: list[str], ctx: dict[str, Any]) -> tuple[Any, list[str]]:
    left, t = _atom(t, ctx)
    if t and t[0] in ("==", "!="):
        op, (right, t) = t[0], _atom(t[1:], ctx)
        equal = str(left).lower() == str(right).lower()  # GitHub compares strings case-insensitively
        return (equal if op == "==" else not equal), t
    return left, t


def _atom(t: list[str], ctx: dict[str, Any]) -> tuple[Any, list[str]]:
    head, rest = t[0], t[1:]
    if head == "(":
        value, rest = _or(rest, ctx)
        assert rest[0] == ")"
        return value, rest[1:]
    if head.startswith("'"):
        return head[1:-1], rest
    value: Any = ctx
    for key in head.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return ("" if value is None else value), rest


def simulate(
    tmp: Path,
    gh: FakeGitHub,
    conclusion: str,
    artifacts: Path | None,
    *,
    honor_if: bool = True,
    event: str = "pull_request",
) -> bool:
    """Run the template's report job for a completed kcgate-run run; False when its `if:` skips it."""
    workflow = yaml.safe_load(TEMPLATE.read_text())
    job = workflow["jobs"]["report"]
    payload = {
        "workflow_run": {
            "id": 41,
            "event": event,
            "conclusion": conclusion,
            "head_sha": SHA_NEW,
            "html_url": "https://github.com/acme/kernels/actions/runs/41",
            "pull_requests": [{"number": 5, "head": {"sha": SHA_NEW}}],
        }
    }
    if honor_if and not evaluate_if(job["if"], {"github": {"event": payload}}):
        return False
    (tmp / "event.json").write_text(json.dumps(payload))
    downloaded = tmp / "kcgate-artifacts"
    for step in job["steps"]:
        uses = step.get("uses", "")
        if uses.startswith("actions/download-artifact@"):
            assert step["with"]["path"] == downloaded.name and step["with"]["run-id"]
            downloaded.mkdir(exist_ok=True)  # download-artifact v4: no matching artifact is not an error
            if artifacts is not None:
                shutil.copytree(artifacts, downloaded, dirs_exist_ok=True)
        elif uses.startswith("kcgate/kcgate@"):
            with_ = {k: str(v) for k, v in step["with"].items()} | {"github-token": gh.token}
            env = report_env(tmp, tmp / "event.json", gh.base_url)
            _outputs, procs = run_action(with_, env, tmp)
            assert procs[-1].returncode == 0, procs[-1].stdout + procs[-1].stderr  # fail-job: false
    return True


def _existing_green_comment(gh: FakeGitHub) -> int:
    gh.add_pull(5, SHA_NEW)
    body = f"{STICKY_MARKER}\n{CommentMeta(SHA_NEW, 40).render()}\n## ✅ kcgate: no blocking changes\n"
    return gh.add_comment(5, body, gh.login)


def test_a_cancelled_run_with_no_artifacts_leaves_the_comment_alone(tmp_path: Path) -> None:
    with FakeGitHub() as gh:
        cid = _existing_green_comment(gh)
        before = dict(gh.comments[cid])
        assert simulate(tmp_path, gh, "cancelled", None) is False
        assert gh.comments[cid] == before and not gh.check_runs and not gh.log


@pytest.mark.slow
def test_without_the_guard_the_same_run_would_turn_the_comment_red(tmp_path: Path) -> None:
    """What the guard prevents: judged anyway, the cancelled run's missing artifacts read as missing runners."""
    (tmp_path / "contracts.toml").unlink(missing_ok=True)
    with FakeGitHub() as gh:
        cid = _existing_green_comment(gh)
        assert simulate(tmp_path, gh, "cancelled", None, honor_if=False) is True
        assert "missing runner" in gh.comments[cid]["body"] and "no results" in gh.comments[cid]["body"]


@pytest.mark.parametrize(
    ("conclusion", "event", "runs"),
    [
        ("skipped", "pull_request", False),
        ("success", "push", False),
        ("failure", "pull_request", True),
        ("success", "pull_request", True),
    ],
)
def test_the_guard_admits_finished_pull_request_runs_only(
    tmp_path: Path, conclusion: str, event: str, runs: bool
) -> None:
    job = yaml.safe_load(TEMPLATE.read_text())["jobs"]["report"]
    context = {"github": {"event": {"workflow_run": {"event": event, "conclusion": conclusion}}}}
    assert evaluate_if(job["if"], context) is runs


@pytest.mark.slow
def test_a_finished_run_updates_the_comment_and_the_job_stays_green(tmp_path: Path) -> None:
    _base, artifacts = write_results_pair(tmp_path, runner="cpu-ubuntu")
    shutil.copytree(tmp_path / "baselines", tmp_path / "baselines-default-branch")
    (tmp_path / "contracts.toml").write_text(  # the default branch's: policy, baselines, descriptions
        '[project]\nbaselines = "baselines-default-branch"\n\n[[contract]]\nid = "gemm-bf16"\n'
        'class = "C-PRC-01"\nkernel = "kcgate.kernels.builtin:matmul"\nop = "matmul"\n'
        'description = "bf16 GEMM, fp32 accumulation"\n'
    )
    with FakeGitHub() as gh:
        gh.workflow_jobs[41] = ["contracts (nvidia-h100 1/2)", "contracts (cpu-ubuntu)", "kcgate legs"]
        cid = _existing_green_comment(gh)
        assert simulate(tmp_path, gh, "success", artifacts) is True
        body = gh.comments[cid]["body"]
        assert "new violation" in body and "no results" in body  # nvidia-h100 and amd-mi300x never ran
        assert (
            "bf16 GEMM, fp32 accumulation" in body
            and "[runner jobs](https://github.com/acme/kernels/actions/runs/41)" in body
        )
        cpu_log = "[job log](https://github.com/acme/kernels/actions/runs/41/job/9001)"
        assert f"| {cpu_log} |" in body  # the runners table links each leg's own job
        [check] = gh.check_runs.values()
        assert check["name"] == "kcgate" and check["conclusion"] == "failure"
        assert f"[check run](https://github.com/acme/kernels/runs/{check['id']})" in body


def test_the_template_has_a_concurrency_group_per_pull_request() -> None:
    workflow = yaml.safe_load(TEMPLATE.read_text())
    group = workflow["concurrency"]["group"]
    assert "workflow_run.head_repository.full_name" in group and "workflow_run.head_branch" in group
    assert workflow["jobs"]["report"]["steps"][-1]["with"]["fail-job"] == "false"


def test_legs_are_matched_to_jobs_by_name() -> None:
    from kcgate.publish.github_pr import match_jobs

    jobs = [
        ("contracts (nvidia-h100x)", "https://github.com/a/b/actions/runs/1/job/1"),
        ("contracts (nvidia-h100 2/2)", "https://github.com/a/b/actions/runs/1/job/2"),
        ("contracts (cpu)", "https://github.com/a/b/actions/runs/1/job/3"),
        ("contracts (amd-mi300x)", "https://evil.example/job/4"),
    ]
    found = match_jobs(jobs, ["nvidia-h100", "cpu-ubuntu", "amd-mi300x"], "https://github.com")
    assert found == {"nvidia-h100": "https://github.com/a/b/actions/runs/1/job/2"}
