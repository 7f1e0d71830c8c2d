"""Publish a report to a pull request with PyGithub: one sticky comment, and optionally a check run.

The sticky comment is found by a hidden marker AND by its author, edited in place, and never
overwritten by a run for an older commit. Every failure (403 on a fork, 5xx after retries, no PR)
becomes an Outcome for the caller to show: publishing never changes the verdict or the exit code.
Every wait has a cap (``max_wait``) and publishing as a whole has one (``max_total``): a server that
says ``Retry-After: 3600`` gets a warning naming the cap, not an hour of the job's time.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from github import Auth, Github, GithubException, GithubRetry
from github.IssueComment import IssueComment
from github.Repository import Repository

from kcgate.publish.outcome import Outcome
from kcgate.publish.settings import Settings, dig, head_sha
from kcgate.render.annotations import batches
from kcgate.render.escape import is_sha
from kcgate.render.markdown import CHECK_RUN_LIMIT, COMMENT_LIMIT

STICKY_MARKER = "<!-- kcgate:sticky -->"  # the default gate's; another gate's adds its name
BOT_LOGIN = "github-actions[bot]"  # who GITHUB_TOKEN comments as; GET /user is 403 for it
CHECK_NAME = "kcgate"  # the default gate's check run; settings.gate_name names another
INSTALLATION_TOKEN_PREFIX = "ghs_"  # GITHUB_TOKEN and GitHub App installation tokens: /user is 403
MAX_SCANNED_PRS = 300
__all__ = ["Outcome", "publish_check_run", "publish_comment"]
_META = re.compile(r"<!-- kcgate:meta (\{[^<>]{0,400}\}) -->")


@dataclass(frozen=True)
class CommentMeta:
    """The hidden facts in a sticky comment: which commit it reports on, from which run, when."""

    sha: str
    run_id: int = 0
    at: str = ""

    def render(self) -> str:
        return "<!-- kcgate:meta " + json.dumps({"sha": self.sha, "run": self.run_id, "at": self.at}) + " -->"

    @classmethod
    def parse(cls, body: str) -> CommentMeta | None:
        """The meta of an existing comment; None when it is absent or not well formed."""
        m = _META.search(body or "")
        try:
            d = json.loads(m.group(1)) if m else None
        except ValueError:
            return None
        if not isinstance(d, dict) or not is_sha(d.get("sha")):
            return None
        run = d.get("run")
        return cls(sha=d["sha"], run_id=run if isinstance(run, int) else 0, at=str(d.get("at", ""))[:40])


# ---- connecting -----------------------------------------------------------------------------------


class Budget:
    """The time publishing may still take: one per report, shared by the comment and the check run."""

    def __init__(self, total: float) -> None:
        self.total = total
        self.end = time.monotonic() + total

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())


class WaitRefused(Exception):
    """GitHub asked for a wait beyond one of kcgate's caps; the message names the cap and its setting."""


def check_wait(wait: float, max_wait: float, budget: Budget) -> None:
    """Refuse a wait over the per-wait cap or past the end of the publishing budget."""
    if wait > max_wait:
        raise WaitRefused(
            f"GitHub asked to wait {wait:g} s before retrying, over kcgate's cap of {max_wait:g} s per wait "
            "(KCGATE_GITHUB_MAX_WAIT); gave up"
        )
    if wait > budget.left():
        raise WaitRefused(
            f"a {wait:g} s wait before retrying would pass publishing's cap of {budget.total:g} s in all "
            "(KCGATE_GITHUB_MAX_TOTAL); gave up"
        )


class CappedRetry(GithubRetry):
    """GithubRetry whose every sleep (Retry-After, backoff, rate-limit reset) is checked against the caps."""

    def __init__(self, *, max_wait: float, budget: Budget, **kw: Any) -> None:
        super().__init__(**kw)
        self.max_wait, self.budget = max_wait, budget

    def new(self, **kw: Any) -> CappedRetry:
        kw.update(max_wait=self.max_wait, budget=self.budget)
        return super().new(**kw)  # type: ignore[return-value]

    def sleep(self, response: Any = None) -> None:
        wait = self.get_retry_after(response) if response is not None else None
        if wait is None:
            wait = self.get_backoff_time()
        check_wait(wait, self.max_wait, self.budget)
        if wait > 0:
            time.sleep(wait)


def make_retry(settings: Settings, budget: Budget | None = None) -> GithubRetry:
    """Retry 5xx, 429 and secondary rate limits with exponential backoff; PATCH too (editing is idempotent)."""
    return CappedRetry(
        total=settings.retries,
        backoff_factor=settings.backoff,
        secondary_rate_wait=settings.secondary_rate_wait,
        max_rate_limit_wait=min(settings.max_rate_wait, settings.max_wait),
        status_forcelist=[429, 500, 502, 503, 504],
        allowed_methods=frozenset({"GET", "HEAD", "POST", "PATCH", "PUT", "DELETE"}),
        max_wait=settings.max_wait,
        budget=budget or Budget(settings.max_total),
    )


def connect(settings: Settings, budget: Budget | None = None) -> Github:
    """A PyGithub client for settings.api_url (a GitHub Enterprise server or the test fake)."""
    return Github(
        auth=Auth.Token(settings.token),
        base_url=settings.api_url,
        timeout=settings.timeout,
        retry=make_retry(settings, budget),
        user_agent="kcgate",
        seconds_between_requests=0.25 if settings.throttle else None,
        seconds_between_writes=1.0 if settings.throttle else None,
    )


# ---- finding the pull request -------------------------------------------------------------------


def is_fork_pr(settings: Settings, event: Mapping[str, Any]) -> bool:
    """A pull_request event from a fork gets a read-only token: don't even try to write."""
    if settings.event_name not in ("pull_request", "pull_request_review"):
        return False
    head_repo = dig(event.get("pull_request"), "head", "repo", "full_name")
    return bool(head_repo) and head_repo != settings.repository


def find_pull_number(repo: Repository, settings: Settings, event: Mapping[str, Any], sha: str) -> int | None:
    """The open PR whose head is ``sha``: from settings, the event, the commit's PRs, then a scan."""
    if settings.pr_number:
        return settings.pr_number
    return _event_pull_number(event, sha) or _pull_by_commit(repo, sha) or _pull_by_scan(repo, sha)


def _event_pull_number(event: Mapping[str, Any], sha: str) -> int | None:
    pr = event.get("pull_request")
    if isinstance(pr, dict) and isinstance(pr.get("number"), int):
        return int(pr["number"])
    run = event.get("workflow_run")
    prs = run.get("pull_requests") if isinstance(run, dict) else None
    for item in prs if isinstance(prs, list) else []:  # empty for forks
        if dig(item, "head", "sha") == sha and isinstance(dig(item, "number"), int):
            return int(item["number"])
    return None


def _pull_by_commit(repo: Repository, sha: str) -> int | None:
    try:
        for pr in repo.get_commit(sha).get_pulls():
            if pr.state == "open" and pr.head.sha == sha:
                return int(pr.number)
    except GithubException as exc:
        if exc.status not in (404, 422):  # a commit this repository does not know: keep looking
            raise
    return None


def _pull_by_scan(repo: Repository, sha: str) -> int | None:
    """Forks' commits are not linked to the base repo's PRs: look through recent open PRs."""
    for i, pr in enumerate(repo.get_pulls(state="open", sort="updated", direction="desc")):
        if i >= MAX_SCANNED_PRS:
            break
        if pr.head.sha == sha:
            return int(pr.number)
    return None


# ---- the sticky comment -------------------------------------------------------------------------


def sticky_marker(gate_name: str) -> str:
    """The hidden marker of one gate's comment: two gates in one repository never edit each other's."""
    return STICKY_MARKER if gate_name == CHECK_NAME else f"<!-- kcgate:sticky:{gate_name} -->"


def comment_author(gh: Github, settings: Settings) -> str:
    """The login our comments carry: the token's user, or github-actions[bot] for GITHUB_TOKEN.

    An Actions or installation token is never sent to GET /user (it answers 403, and logs say so)."""
    if settings.comment_author:
        return settings.comment_author
    if settings.actions_token or settings.token.startswith(INSTALLATION_TOKEN_PREFIX):
        return BOT_LOGIN
    try:
        return str(gh.get_user().login)
    except GithubException as exc:
        if exc.status in (401, 403, 404):  # installation tokens may not read /user
            return BOT_LOGIN
        raise


def find_sticky(
    comments: Iterable[IssueComment], author: str, marker: str = STICKY_MARKER
) -> IssueComment | None:
    """Our comment: it has the marker and we wrote it (someone else quoting the marker is left alone)."""
    for comment in comments:
        if marker in (comment.body or "") and comment.user is not None and comment.user.login == author:
            return comment
    return None


def stale_reason(repo: Repository, pr_head: str, ours: CommentMeta, existing: CommentMeta | None) -> str:
    """Why this run must not write ("" when it may): the PR moved on, or the comment is for a newer commit."""
    if pr_head != ours.sha:
        return (
            f"the pull request's head is now {pr_head[:12]}; this run is for {ours.sha[:12]}, so it is stale"
        )
    if existing is None:
        return ""
    if existing.sha == ours.sha:
        return "a later run already reported on this commit" if existing.run_id > ours.run_id else ""
    if _compare(repo, existing.sha, ours.sha) == "behind":
        return f"the comment reports on {existing.sha[:12]}, a newer commit than {ours.sha[:12]}"
    return ""


def _compare(repo: Repository, base: str, head: str) -> str:
    """ahead, behind, identical or diverged; "" when the old commit is gone (a force push)."""
    try:
        return str(repo.compare(base, head).status)
    except GithubException as exc:
        if exc.status in (404, 422):
            return ""
        raise


def comment_body(markdown: str, meta: CommentMeta, marker: str = STICKY_MARKER) -> str:
    """Markers first, then the report; cut hard at GitHub's limit as a last guard (the renderer budgets)."""
    body = f"{marker}\n{meta.render()}\n{markdown}"
    if len(body) <= COMMENT_LIMIT:
        return body
    note = "\n\n**… cut at GitHub's comment size limit; see the job summary.**\n"
    return body[: COMMENT_LIMIT - len(note)] + note


def publish_comment(
    settings: Settings,
    event: Mapping[str, Any],
    markdown: str,
    now: dt.datetime,
    budget: Budget | None = None,
) -> Outcome:
    """Create or update the sticky comment; every failure is an Outcome, never an exception."""
    if not (settings.token and settings.repository):
        return Outcome("skipped", "no GITHUB_TOKEN or GITHUB_REPOSITORY, so no PR comment was posted")
    if is_fork_pr(settings, event):
        return Outcome("fallback", "this pull request comes from a fork and its token is read-only")
    budget = budget or Budget(settings.max_total)
    return _guarded(
        lambda: _upsert_comment(connect(settings, budget), settings, event, markdown, now), budget
    )


def _upsert_comment(
    gh: Github, settings: Settings, event: Mapping[str, Any], markdown: str, now: dt.datetime
) -> Outcome:
    repo = gh.get_repo(settings.repository)
    sha = head_sha(settings, event)
    number = find_pull_number(repo, settings, event, sha)
    if number is None:
        return Outcome("skipped", f"no open pull request has head commit {sha[:12]}")
    pr = repo.get_pull(number)
    ours = CommentMeta(sha=sha, run_id=_int(settings.run_id), at=now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    marker = sticky_marker(settings.gate_name)
    existing = find_sticky(pr.get_issue_comments(), comment_author(gh, settings), marker)
    reason = stale_reason(repo, pr.head.sha, ours, CommentMeta.parse(existing.body) if existing else None)
    if reason:
        return Outcome("skipped", reason)
    body = comment_body(markdown, ours, marker)
    if existing is not None:
        existing.edit(body)
        return Outcome("updated", f"updated the kcgate comment on PR #{number}", existing.html_url)
    created = pr.create_issue_comment(body)
    return Outcome("created", f"commented on PR #{number}", created.html_url)


# ---- the vendor legs' job logs ------------------------------------------------------------------

JOB_LOOKUP_S = 30.0  # the job-log links are a convenience: never hold the report up for long


def job_urls(settings: Settings, event: Mapping[str, Any], runners: Iterable[str]) -> dict[str, str]:
    """Runner -> the html_url of its leg's job in the triggering run ({} when unknown or on any failure).

    A leg is matched by its job name, "contracts (RUNNER)" or "contracts (RUNNER 1/2)" as in the
    templates; a runner with several matching jobs (shards) links the first."""
    run_id = dig(event, "workflow_run", "id")
    if not (settings.token and settings.repository and isinstance(run_id, int)):
        return {}
    names = list(runners)
    budget = Budget(min(settings.max_total, JOB_LOOKUP_S))
    found: dict[str, str] = {}

    def lookup() -> Outcome:
        run = connect(settings, budget).get_repo(settings.repository).get_workflow_run(run_id)
        jobs = [(str(j.name), str(j.html_url or "")) for _, j in zip(range(MAX_SCANNED_PRS), run.jobs())]
        found.update(match_jobs(jobs, names, settings.server_url))
        return Outcome("created", f"{len(found)} job links")

    _guarded(lookup, budget)
    return dict(found)


def match_jobs(jobs: Sequence[tuple[str, str]], runners: Sequence[str], server_url: str) -> dict[str, str]:
    """Runner -> job URL, for jobs named "<anything> (RUNNER[ shard][, ...])" whose URL is on the server."""
    out: dict[str, str] = {}
    for runner in runners:
        pattern = re.compile(r"\(\s*" + re.escape(runner) + r"(?:[\s,)]|$)")
        for name, url in jobs:
            if pattern.search(name) and url.startswith(server_url + "/"):
                out[runner] = url
                break
    return out


# ---- the check run ------------------------------------------------------------------------------


def publish_check_run(
    settings: Settings,
    event: Mapping[str, Any],
    summary: str,
    annotations: Sequence[dict[str, str | int]],
    passed: bool,
    budget: Budget | None = None,
) -> Outcome:
    """A completed check run on the head commit, its annotations sent 50 per request."""
    if not (settings.token and settings.repository):
        return Outcome("skipped", "no GITHUB_TOKEN or GITHUB_REPOSITORY, so no check run was created")
    budget = budget or Budget(settings.max_total)
    return _guarded(
        lambda: _create_check_run(connect(settings, budget), settings, event, summary, annotations, passed),
        budget,
    )


def _create_check_run(
    gh: Github,
    settings: Settings,
    event: Mapping[str, Any],
    summary: str,
    annotations: Sequence[dict[str, str | int]],
    passed: bool,
) -> Outcome:
    repo = gh.get_repo(settings.repository)
    title = "all contracts hold" if passed else "blocking contract changes"
    parts = batches(annotations) or [[]]
    output: dict[str, Any] = {"title": title, "summary": _clip_bytes(summary, CHECK_RUN_LIMIT)}
    run = repo.create_check_run(
        name=settings.gate_name,
        head_sha=head_sha(settings, event),
        status="completed",
        conclusion="success" if passed else "failure",
        output={**output, "annotations": parts[0]},
    )
    for part in parts[1:]:
        run.edit(output={**output, "annotations": part})
    return Outcome(
        "created", f"check run with {len(annotations)} annotations", run.html_url or "", "check-run"
    )


# ---- failures -------------------------------------------------------------------------------------


def _guarded(action: Any, budget: Budget) -> Outcome:
    """Run a publishing action within the budget; turn any failure into a fallback Outcome (the verdict
    stands). The action runs in a daemon thread, so a request that outlives the budget (a server that
    trickles its answer, many slow pages) is abandoned rather than waited for."""
    if budget.left() <= 0:
        return Outcome("fallback", _over_budget(budget))
    box: list[Outcome] = []
    worker = threading.Thread(target=lambda: box.append(_outcome(action)), daemon=True)
    worker.start()
    worker.join(budget.left())
    return box[0] if box else Outcome("fallback", _over_budget(budget))


def _over_budget(budget: Budget) -> str:
    return (
        f"publishing took longer than its cap of {budget.total:g} s in all (KCGATE_GITHUB_MAX_TOTAL); gave up"
    )


def _outcome(action: Any) -> Outcome:
    try:
        result: Outcome = action()
        return result
    except GithubException as exc:
        return Outcome("fallback", _explain(exc))
    except WaitRefused as exc:
        return Outcome("fallback", str(exc))
    except Exception as exc:  # network down, retries exhausted: report it, never change the exit code
        return Outcome("fallback", f"could not reach GitHub ({type(exc).__name__}: {str(exc)[:200]})")


def _explain(exc: GithubException) -> str:
    if exc.status == 403:
        return "GitHub refused the write (403): a fork's read-only token, or the workflow lacks `pull-requests: write`"
    if exc.status == 404:
        return "GitHub answered 404: the repository or pull request is not visible to this token"
    return f"GitHub answered {exc.status} after retries"


def _clip_bytes(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    return text if len(data) <= limit else data[: limit - 4].decode("utf-8", "ignore") + "\n…\n"


def _int(raw: str) -> int:
    return int(raw) if raw.isdigit() else 0
