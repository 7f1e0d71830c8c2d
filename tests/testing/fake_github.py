"""A fake GitHub REST API: a real HTTP server on 127.0.0.1 that PyGithub talks to over the wire.

It speaks the endpoints kcgate's publisher calls, keeps state in memory, logs every request, can be
scripted to fail (500/502 N times, 403, secondary rate limits) or to hang (``delay``), and validates like GitHub does: a
comment body over 65,536 characters or a check-run request with more than 50 annotations is a 422.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

COMMENT_LIMIT = 65_536
BOT = "github-actions[bot]"


@dataclass
class Failure:
    """A scripted failure: the next ``times`` requests matching method and path get ``status``."""

    method: str
    path: re.Pattern[str]
    status: int
    times: int
    message: str = "scripted failure"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Logged:
    method: str
    path: str
    status: int
    body: Any = None


class FakeGitHub:
    """In-memory GitHub for one repository. Use as a context manager; ``base_url`` is for PyGithub."""

    def __init__(
        self,
        owner: str = "acme",
        repo: str = "kernels",
        token: str = "t0ken",
        user: str | None = "kcgate-bot",
    ):
        self.owner, self.repo, self.token = owner, repo, token
        self.user = user  # None: an installation token (GITHUB_TOKEN), for which GET /user is 403
        self.read_only = False  # a fork's token: every write is 403
        self.pulls: dict[int, dict[str, Any]] = {}
        self.comments: dict[int, dict[str, Any]] = {}
        self.check_runs: dict[int, dict[str, Any]] = {}
        self.workflow_jobs: dict[int, list[str]] = {}  # workflow run id -> its jobs' names
        self.history: list[str] = []  # commits in order, oldest first (for compare)
        self.failures: list[Failure] = []
        self.log: list[Logged] = []
        self.delay = 0.0  # seconds every answer is held back (a server that hangs); cut short on exit
        self._closing = threading.Event()
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    # ---- lifecycle ----

    def __enter__(self) -> FakeGitHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    @property
    def base_url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}"

    @property
    def login(self) -> str:
        return self.user or BOT

    # ---- scripting ----

    def add_pull(self, number: int, head_sha: str, *, fork: bool = False, state: str = "open") -> None:
        repo = f"someone/{self.repo}" if fork else f"{self.owner}/{self.repo}"
        self.pulls[number] = {"head_sha": head_sha, "state": state, "head_repo": repo}
        if head_sha not in self.history:
            self.history.append(head_sha)

    def add_comment(self, number: int, body: str, login: str) -> int:
        cid = next(self._ids)
        self.comments[cid] = {"id": cid, "issue": number, "body": body, "login": login}
        return cid

    def fail(self, method: str, path: str, status: int, times: int = 1, **kw: Any) -> None:
        self.failures.append(Failure(method, re.compile(path), status, times, **kw))

    def requests(self, method: str | None = None, path: str = "") -> list[Logged]:
        return [r for r in self.log if (method is None or r.method == method) and re.search(path, r.path)]

    def comments_on(self, number: int) -> list[dict[str, Any]]:
        return [c for c in self.comments.values() if c["issue"] == number]

    # ---- JSON shapes PyGithub reads ----

    def api(self, path: str) -> str:
        return f"{self.base_url}/repos/{self.owner}/{self.repo}{path}"

    def user_json(self, login: str) -> dict[str, Any]:
        kind = "Bot" if login.endswith("[bot]") else "User"
        return {
            "login": login,
            "id": abs(hash(login)) % 10**6,
            "type": kind,
            "url": f"{self.base_url}/users/{login}",
        }

    def repo_json(self) -> dict[str, Any]:
        return {
            "id": 1,
            "name": self.repo,
            "full_name": f"{self.owner}/{self.repo}",
            "url": self.api(""),
            "owner": self.user_json(self.owner),
            "private": False,
        }

    def pull_json(self, number: int) -> dict[str, Any]:
        p = self.pulls[number]
        return {
            "number": number,
            "state": p["state"],
            "url": self.api(f"/pulls/{number}"),
            "issue_url": self.api(f"/issues/{number}"),
            "html_url": f"{self.base_url}/{self.owner}/{self.repo}/pull/{number}",
            "head": {"sha": p["head_sha"], "ref": f"pr-{number}", "repo": {"full_name": p["head_repo"]}},
            "base": {"sha": self.history[0] if self.history else "", "ref": "main", "repo": self.repo_json()},
        }

    def comment_json(self, c: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": c["id"],
            "body": c["body"],
            "user": self.user_json(c["login"]),
            "url": self.api(f"/issues/comments/{c['id']}"),
            "issue_url": self.api(f"/issues/{c['issue']}"),
            "html_url": f"{self.base_url}/{self.owner}/{self.repo}/pull/{c['issue']}#issuecomment-{c['id']}",
        }

    def check_json(self, run: dict[str, Any]) -> dict[str, Any]:
        return {
            **{k: v for k, v in run.items() if k != "annotations"},
            "url": self.api(f"/check-runs/{run['id']}"),
            "html_url": f"https://github.com/{self.owner}/{self.repo}/runs/{run['id']}",
        }

    # ---- request handling (called on the server's threads) ----

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: Any, auth: str
    ) -> tuple[int, Any, dict[str, str]]:
        with self._lock:
            scripted = self._scripted(method, path)
            if scripted is not None:
                return scripted
            if auth not in (f"token {self.token}", f"Bearer {self.token}"):
                return 401, {"message": "Bad credentials"}, {}
            if self.read_only and method in ("POST", "PATCH", "PUT", "DELETE"):
                return 403, {"message": "Resource not accessible by integration"}, {}
            return self._route(method, path, query, body)

    def _scripted(self, method: str, path: str) -> tuple[int, Any, dict[str, str]] | None:
        for f in self.failures:
            if f.times > 0 and f.method == method and f.path.search(path):
                f.times -= 1
                return f.status, {"message": f.message}, dict(f.headers)
        return None

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any, dict[str, str]]:
        prefix = f"/repos/{self.owner}/{self.repo}"
        if method == "GET" and path == "/user":
            return self._get_user()
        if not (path == prefix or path.startswith(prefix + "/")):
            return 404, {"message": "Not Found"}, {}
        rest = path[len(prefix) :]
        for verb, pattern, fn in _ROUTES:
            m = re.fullmatch(pattern, rest)
            if verb == method and m:
                return fn(self, query, body, *m.groups())
        return 404, {"message": f"no route for {method} {path}"}, {}

    def _get_user(self) -> tuple[int, Any, dict[str, str]]:
        if self.user is None:
            return 403, {"message": "Resource not accessible by integration"}, {}
        return 200, self.user_json(self.user), {}

    def _get_repo(self, q: Any, b: Any) -> tuple[int, Any, dict[str, str]]:
        return 200, self.repo_json(), {}

    def _get_run(self, q: Any, b: Any, run_id: str) -> tuple[int, Any, dict[str, str]]:
        if int(run_id) not in self.workflow_jobs:
            return 404, {"message": "Not Found"}, {}
        return 200, self.run_json(int(run_id)), {}

    def _list_jobs(self, q: Any, b: Any, run_id: str) -> tuple[int, Any, dict[str, str]]:
        names = self.workflow_jobs.get(int(run_id))
        if names is None:
            return 404, {"message": "Not Found"}, {}
        jobs = [
            {
                "id": 9000 + i,
                "run_id": int(run_id),
                "name": name,
                "status": "completed",
                "url": self.api(f"/actions/jobs/{9000 + i}"),
                "html_url": f"https://github.com/{self.owner}/{self.repo}/actions/runs/{run_id}/job/{9000 + i}",
            }
            for i, name in enumerate(names)
        ]
        return 200, {"total_count": len(jobs), "jobs": jobs}, {}

    def run_json(self, run_id: int) -> dict[str, Any]:
        return {
            "id": run_id,
            "url": self.api(f"/actions/runs/{run_id}"),
            "jobs_url": self.api(f"/actions/runs/{run_id}/jobs"),
            "html_url": f"{self.base_url}/{self.owner}/{self.repo}/actions/runs/{run_id}",
        }

    def _get_pull(self, q: Any, b: Any, number: str) -> tuple[int, Any, dict[str, str]]:
        if int(number) not in self.pulls:
            return 404, {"message": "Not Found"}, {}
        return 200, self.pull_json(int(number)), {}

    def _list_pulls(self, q: dict[str, list[str]], b: Any) -> tuple[int, Any, dict[str, str]]:
        state = q.get("state", ["open"])[0]
        items = [
            self.pull_json(n) for n, p in sorted(self.pulls.items()) if state == "all" or p["state"] == state
        ]
        return self._page(items, q, "/pulls")

    def _get_commit(self, q: Any, b: Any, sha: str) -> tuple[int, Any, dict[str, str]]:
        if sha not in self.history:
            return 404, {"message": "No commit found for SHA"}, {}
        return 200, {"sha": sha, "url": self.api(f"/commits/{sha}"), "commit": {"message": "change"}}, {}

    def _commit_pulls(self, q: dict[str, list[str]], b: Any, sha: str) -> tuple[int, Any, dict[str, str]]:
        # Like GitHub: a fork's commit is not associated with the base repository's pull requests.
        items = [
            self.pull_json(n)
            for n, p in sorted(self.pulls.items())
            if p["head_sha"] == sha and "someone/" not in p["head_repo"]
        ]
        return 200, items, {}

    def _list_comments(self, q: dict[str, list[str]], b: Any, number: str) -> tuple[int, Any, dict[str, str]]:
        items = [self.comment_json(c) for c in sorted(self.comments_on(int(number)), key=lambda c: c["id"])]
        return self._page(items, q, f"/issues/{number}/comments")

    def _create_comment(self, q: Any, body: Any, number: str) -> tuple[int, Any, dict[str, str]]:
        if int(number) not in self.pulls:
            return 404, {"message": "Not Found"}, {}
        error = _body_error(body)
        if error:
            return 422, error, {}
        cid = self.add_comment(int(number), body["body"], self.login)
        return 201, self.comment_json(self.comments[cid]), {}

    def _edit_comment(self, q: Any, body: Any, cid: str) -> tuple[int, Any, dict[str, str]]:
        c = self.comments.get(int(cid))
        if c is None:
            return 404, {"message": "Not Found"}, {}
        if c["login"] != self.login:
            return 403, {"message": "You can only edit your own comments"}, {}
        error = _body_error(body)
        if error:
            return 422, error, {}
        c["body"] = body["body"]
        return 200, self.comment_json(c), {}

    def _compare(self, q: Any, b: Any, base: str, head: str) -> tuple[int, Any, dict[str, str]]:
        if base not in self.history or head not in self.history:
            return 404, {"message": "No commit found for SHA"}, {}
        i, j = self.history.index(base), self.history.index(head)
        status = "identical" if i == j else ("ahead" if j > i else "behind")
        payload = {
            "status": status,
            "ahead_by": max(j - i, 0),
            "behind_by": max(i - j, 0),
            "total_commits": abs(j - i),
        }
        return 200, {**payload, "url": self.api(f"/compare/{base}...{head}"), "commits": [], "files": []}, {}

    def _create_check_run(self, q: Any, body: Any) -> tuple[int, Any, dict[str, str]]:
        error = _check_error(body)
        if error:
            return 422, error, {}
        rid = next(self._ids)
        notes = list(body.get("output", {}).get("annotations", []))
        self.check_runs[rid] = {**body, "id": rid, "annotations": notes}
        return 201, self.check_json(self.check_runs[rid]), {}

    def _edit_check_run(self, q: Any, body: Any, rid: str) -> tuple[int, Any, dict[str, str]]:
        run = self.check_runs.get(int(rid))
        if run is None:
            return 404, {"message": "Not Found"}, {}
        error = _check_error(body)
        if error:
            return 422, error, {}
        run["annotations"] += list(body.get("output", {}).get("annotations", []))
        run.update({k: v for k, v in body.items() if k != "output"})
        return 200, self.check_json(run), {}

    def _page(self, items: list[Any], q: dict[str, list[str]], path: str) -> tuple[int, Any, dict[str, str]]:
        per_page = int(q.get("per_page", ["30"])[0])
        page = int(q.get("page", ["1"])[0])
        chunk = items[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(items):
            state = q.get("state", [""])[0]
            extra = f"&state={state}" if state else ""
            headers["Link"] = f'<{self.api(path)}?page={page + 1}&per_page={per_page}{extra}>; rel="next"'
        return 200, chunk, headers


def _body_error(body: Any) -> dict[str, Any] | None:
    text = body.get("body") if isinstance(body, dict) else None
    if not isinstance(text, str):
        return {"message": "Invalid request: body is required"}
    if len(text) > COMMENT_LIMIT:
        return {
            "message": "Validation Failed",
            "errors": [
                {
                    "resource": "IssueComment",
                    "code": "custom",
                    "field": "body",
                    "message": "body is too long (maximum is 65536 characters)",
                }
            ],
        }
    return None


def _check_error(body: Any) -> dict[str, Any] | None:
    output = body.get("output", {}) if isinstance(body, dict) else {}
    if len(output.get("annotations", [])) > 50:
        return {"message": "Validation Failed: at most 50 annotations per request"}
    if len(str(output.get("summary", "")).encode("utf-8")) > 65_535:
        return {"message": "Validation Failed: output.summary is too long"}
    return None


_SHA = r"([0-9a-f]{7,64})"
_ROUTES: list[tuple[str, str, Any]] = [
    ("GET", r"", FakeGitHub._get_repo),
    ("GET", r"/pulls", FakeGitHub._list_pulls),
    ("GET", r"/pulls/(\d+)", FakeGitHub._get_pull),
    ("GET", rf"/commits/{_SHA}", FakeGitHub._get_commit),
    ("GET", rf"/commits/{_SHA}/pulls", FakeGitHub._commit_pulls),
    ("GET", r"/issues/(\d+)/comments", FakeGitHub._list_comments),
    ("POST", r"/issues/(\d+)/comments", FakeGitHub._create_comment),
    ("PATCH", r"/issues/comments/(\d+)", FakeGitHub._edit_comment),
    ("GET", rf"/compare/{_SHA}\.\.\.{_SHA}", FakeGitHub._compare),
    ("POST", r"/check-runs", FakeGitHub._create_check_run),
    ("PATCH", r"/check-runs/(\d+)", FakeGitHub._edit_check_run),
    ("GET", r"/actions/runs/(\d+)", FakeGitHub._get_run),
    ("GET", r"/actions/runs/(\d+)/jobs", FakeGitHub._list_jobs),
]


def _handler(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            fake._closing.wait(fake.delay)
            status, payload, headers = fake.handle(
                self.command, url.path, parse_qs(url.query), body, self.headers.get("Authorization", "")
            )
            fake.log.append(Logged(self.command, url.path, status, body))
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

    return Handler
