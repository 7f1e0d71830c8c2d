"""The publisher against a real HTTP fake of GitHub: sticky comment, staleness, retries, fallbacks, size."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kcgate.publish import github_pr
from kcgate.publish.github_pr import STICKY_MARKER, CommentMeta, publish_check_run, publish_comment
from kcgate.publish.settings import Settings
from kcgate.render.annotations import check_annotation, make_annotations
from kcgate.render.markdown import COMMENT_BUDGET, COMMENT_LIMIT, RenderContext, render_comment
from tests.testing.fake_github import BOT, FakeGitHub
from tests.testing.report_samples import SHA_NEW, SHA_NEWER, SHA_OLD, big_verdict, sample_verdict

NOW = dt.datetime(2026, 11, 2, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        fake.add_pull(7, SHA_OLD)
        yield fake


def settings(fake: FakeGitHub, **kw: object) -> Settings:
    base: dict[str, object] = {
        "token": fake.token,
        "repository": f"{fake.owner}/{fake.repo}",
        "api_url": fake.base_url,
        "event_name": "workflow_run",
        "run_id": "100",
        "retries": 4,
        "backoff": 0.0,
        "secondary_rate_wait": 0.0,
        "throttle": False,
        "timeout": 5,
    }
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


def workflow_run(sha: str, prs: list[dict[str, object]] | None = None) -> dict[str, object]:
    return {"workflow_run": {"head_sha": sha, "pull_requests": prs or []}}


def post(fake: FakeGitHub, sha: str, text: str = "report", **kw: object) -> github_pr.Outcome:
    return publish_comment(settings(fake, **kw), workflow_run(sha), text, NOW)


def move_head(fake: FakeGitHub, number: int, sha: str) -> None:
    fake.pulls[number]["head_sha"] = sha
    if sha not in fake.history:
        fake.history.append(sha)


def test_first_run_creates_one_comment_and_the_second_edits_it(gh: FakeGitHub) -> None:
    first = post(gh, SHA_OLD, "first")
    assert first.action == "created", first.detail
    move_head(gh, 7, SHA_NEW)
    second = post(gh, SHA_NEW, "second", run_id="101")
    assert second.action == "updated", second.detail
    [comment] = gh.comments_on(7)
    assert comment["body"].startswith(STICKY_MARKER) and comment["body"].endswith("second")
    assert CommentMeta.parse(comment["body"]) == CommentMeta(SHA_NEW, 101, "2026-11-02T12:00:00Z")
    assert len(gh.requests("POST", "/comments")) == 1 and len(gh.requests("PATCH", "/issues/comments/")) == 1


def test_a_comment_by_someone_else_with_the_marker_is_left_alone(gh: FakeGitHub) -> None:
    other = gh.add_comment(7, f"{STICKY_MARKER}\nquoted by a reviewer", "mallory")
    outcome = post(gh, SHA_OLD, "ours")
    assert outcome.action == "created"
    assert gh.comments[other]["body"].endswith("quoted by a reviewer")
    assert len(gh.comments_on(7)) == 2


def test_the_sticky_comment_is_found_beyond_the_first_page(gh: FakeGitHub) -> None:
    for i in range(45):
        gh.add_comment(7, f"chatter {i}", "someone")
    ours = gh.add_comment(7, f"{STICKY_MARKER}\n{CommentMeta(SHA_OLD, 1).render()}\nold", gh.login)
    assert post(gh, SHA_OLD, "new").action == "updated"
    assert gh.comments[ours]["body"].endswith("new")


def test_installation_token_comments_as_github_actions_bot(gh: FakeGitHub) -> None:
    gh.user = None  # GITHUB_TOKEN: GET /user is 403
    assert post(gh, SHA_OLD, "one").action == "created"
    assert post(gh, SHA_OLD, "two", run_id="101").action == "updated"
    [comment] = gh.comments_on(7)
    assert comment["login"] == BOT and comment["body"].endswith("two")
    assert any(r.path == "/user" and r.status == 403 for r in gh.log)


def test_an_older_commit_never_overwrites_a_newer_one(gh: FakeGitHub) -> None:
    move_head(gh, 7, SHA_NEW)
    assert post(gh, SHA_NEW, "new").action == "created"
    event = workflow_run(SHA_OLD, [{"number": 7, "head": {"sha": SHA_OLD}}])
    late = publish_comment(settings(gh), event, "old, finished late", NOW)  # the PR head is now SHA_NEW
    assert late.action == "skipped" and "stale" in late.detail
    assert post(gh, SHA_OLD, "old again").action == "skipped"  # no open PR has SHA_OLD as head any more
    assert gh.comments_on(7)[0]["body"].endswith("new")


def test_compare_says_behind_so_the_comment_stays(gh: FakeGitHub) -> None:
    # The comment already reports on a newer commit than ours (a race with the PR head lookup).
    gh.history += [SHA_NEW, SHA_NEWER]
    gh.add_comment(7, f"{STICKY_MARKER}\n{CommentMeta(SHA_NEWER, 5).render()}\nnewer", gh.login)
    move_head(gh, 7, SHA_NEW)
    outcome = post(gh, SHA_NEW, "older")
    assert outcome.action == "skipped" and "newer commit" in outcome.detail
    assert gh.requests("GET", f"/compare/{SHA_NEWER}...{SHA_NEW}")
    assert gh.comments_on(7)[0]["body"].endswith("newer")


def test_a_later_run_on_the_same_commit_is_not_overwritten(gh: FakeGitHub) -> None:
    gh.add_comment(7, f"{STICKY_MARKER}\n{CommentMeta(SHA_OLD, 200).render()}\nlater run", gh.login)
    assert post(gh, SHA_OLD, "earlier run", run_id="150").action == "skipped"


def test_500_and_502_are_retried(gh: FakeGitHub) -> None:
    gh.fail("GET", r"/issues/7/comments$", 500, times=2)
    gh.fail("POST", r"/issues/7/comments$", 502, times=1)
    outcome = post(gh, SHA_OLD)
    assert outcome.action == "created", outcome.detail
    assert [r.status for r in gh.requests("POST", "/comments")] == [502, 201]
    assert [r.status for r in gh.requests("GET", "/issues/7/comments")][:3] == [500, 500, 200]


def test_edit_is_retried_on_503(gh: FakeGitHub) -> None:
    gh.add_comment(7, f"{STICKY_MARKER}\nold", gh.login)
    gh.fail("PATCH", r"/issues/comments/", 503, times=1)
    assert post(gh, SHA_OLD, "new").action == "updated"


def test_secondary_rate_limit_is_retried(gh: FakeGitHub) -> None:
    gh.fail(
        "POST",
        r"/comments$",
        403,
        times=1,
        message="You have exceeded a secondary rate limit.",
        headers={"Retry-After": "0"},
    )
    assert post(gh, SHA_OLD).action == "created"


@pytest.mark.parametrize(("status", "after"), [(429, "3600"), (429, "100000"), (503, "3600"), (403, "3600")])
def test_a_retry_after_beyond_the_cap_returns_at_once_with_a_warning(
    gh: FakeGitHub, status: int, after: str
) -> None:
    gh.fail(
        "POST", r"/comments$", status, times=1, message="secondary rate limit", headers={"Retry-After": after}
    )
    t0 = time.monotonic()
    outcome = post(gh, SHA_OLD, max_wait=5.0)
    assert time.monotonic() - t0 < 5.0
    assert outcome.failed and "asked to wait" in outcome.detail and "KCGATE_GITHUB_MAX_WAIT" in outcome.detail


@pytest.mark.slow
def test_retries_stop_at_the_total_cap(gh: FakeGitHub) -> None:
    gh.fail("GET", r"/issues/7/comments$", 503, times=100, headers={"Retry-After": "1"})
    t0 = time.monotonic()
    outcome = post(gh, SHA_OLD, retries=50, max_wait=5.0, max_total=1.5)
    assert time.monotonic() - t0 < 2.5
    assert outcome.failed and "KCGATE_GITHUB_MAX_TOTAL" in outcome.detail, outcome.detail


@pytest.mark.slow
def test_a_server_that_never_answers_is_abandoned_at_the_total_cap(gh: FakeGitHub) -> None:
    gh.delay = 30.0  # every answer takes 30 s; the request timeout is longer still
    t0 = time.monotonic()
    outcome = post(gh, SHA_OLD, timeout=60, max_total=1.0)
    assert time.monotonic() - t0 < 2.5
    assert outcome.failed and "cap of 1 s in all" in outcome.detail


def test_retries_run_out_into_a_fallback(gh: FakeGitHub) -> None:
    gh.fail("GET", r"/issues/7/comments$", 500, times=100)
    outcome = post(gh, SHA_OLD, retries=2)
    assert outcome.action == "fallback" and outcome.failed


def test_403_falls_back_with_a_reason(gh: FakeGitHub) -> None:
    gh.read_only = True
    outcome = post(gh, SHA_OLD)
    assert outcome.action == "fallback" and "403" in outcome.detail
    assert not gh.comments


def test_a_fork_pull_request_does_not_even_try(gh: FakeGitHub) -> None:
    event = {
        "pull_request": {"number": 7, "head": {"sha": SHA_OLD, "repo": {"full_name": "someone/kernels"}}}
    }
    outcome = publish_comment(settings(gh, event_name="pull_request"), event, "x", NOW)
    assert outcome.action == "fallback" and "fork" in outcome.detail
    assert gh.log == []


def test_workflow_run_from_a_fork_finds_the_pr_by_head_sha(gh: FakeGitHub) -> None:
    gh.add_pull(9, SHA_NEW, fork=True)  # pull_requests is empty and commits/{sha}/pulls finds nothing
    outcome = post(gh, SHA_NEW)
    assert outcome.action == "created", outcome.detail
    assert (
        gh.comments_on(9)
        and gh.requests("GET", f"/commits/{SHA_NEW}/pulls")
        and gh.requests("GET", "/pulls$")
    )


def test_workflow_run_uses_the_payloads_pull_request(gh: FakeGitHub) -> None:
    event = workflow_run(SHA_OLD, [{"number": 7, "head": {"sha": SHA_OLD}}])
    assert publish_comment(settings(gh), event, "x", NOW).action == "created"
    assert not gh.requests("GET", "/commits/")


def test_no_pull_request_is_skipped(gh: FakeGitHub) -> None:
    outcome = post(gh, SHA_NEWER)
    assert outcome.action == "skipped" and "no open pull request" in outcome.detail


def test_5000_failing_cases_never_hit_the_422(gh: FakeGitHub) -> None:
    text = render_comment(big_verdict(5000, contracts=5000), RenderContext(head_sha=SHA_OLD), COMMENT_BUDGET)
    assert post(gh, SHA_OLD, text).action == "created"
    [comment] = gh.comments_on(7)
    assert len(comment["body"]) <= COMMENT_LIMIT
    assert "more rows" in comment["body"] and "see the job summary" in comment["body"]
    assert not [r for r in gh.log if r.status == 422]


def test_the_fake_rejects_oversized_bodies_like_github(gh: FakeGitHub) -> None:
    # Proves the test above would catch an unbudgeted body; comment_body's own guard keeps us under it.
    assert len(github_pr.comment_body("x" * 70_000, CommentMeta(SHA_OLD))) <= COMMENT_LIMIT
    import requests

    r = requests.post(
        f"{gh.base_url}/repos/acme/kernels/issues/7/comments",
        json={"body": "x" * 70_000},
        headers={"Authorization": f"token {gh.token}"},
        timeout=5,
    )
    assert r.status_code == 422


def test_check_run_sends_annotations_50_per_request(gh: FakeGitHub) -> None:
    notes = [check_annotation(a) for a in make_annotations(sample_verdict())] * 20  # 140 records
    outcome = publish_check_run(settings(gh), workflow_run(SHA_OLD), "summary", notes, passed=False)
    assert outcome.action == "created", outcome.detail
    [run] = gh.check_runs.values()
    assert run["conclusion"] == "failure" and run["head_sha"] == SHA_OLD and len(run["annotations"]) == 140
    sizes = [len(r.body["output"]["annotations"]) for r in gh.log if "check-runs" in r.path]
    assert sizes == [50, 50, 40]


def test_settings_come_from_the_environment_once(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps(workflow_run(SHA_NEW)))
    env = {
        "GITHUB_TOKEN": "t",
        "GITHUB_REPOSITORY": "acme/kernels",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_RUN_ID": "42",
        "KCGATE_GITHUB_BACKOFF": "0",
    }
    s = Settings.from_env(env)
    assert s.backoff == 0.0 and s.run_url() == "https://github.com/acme/kernels/actions/runs/42"
    assert github_pr.head_sha(s, s.load_event()) == SHA_NEW
