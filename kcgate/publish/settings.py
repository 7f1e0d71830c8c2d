"""Every GitHub setting kcgate uses, read once from the environment into one frozen record.

Nothing else in kcgate reads GitHub's environment variables. Tests build a Settings directly or from a
dict, so no test touches os.environ. The event payload is untrusted input: size-capped and type-checked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcgate.errors import UsageError
from kcgate.render.escape import is_sha
from kcgate.util import bounded

MAX_EVENT_BYTES = 25 * 1024 * 1024


@dataclass(frozen=True)
class Settings:
    """The GitHub side of a report run."""

    token: str = ""
    repository: str = ""  # owner/name
    event_name: str = ""
    event_path: str = ""
    sha: str = ""
    api_url: str = "https://api.github.com"
    server_url: str = "https://github.com"
    run_id: str = ""
    run_number: str = ""
    run_attempt: str = ""
    step_summary: str = ""
    output: str = ""
    comment_author: str = ""  # override the author the sticky comment is looked up by (a GitHub App bot)
    pr_number: int | None = None  # override finding the PR (KCGATE_PR_NUMBER)
    retries: int = 5
    backoff: float = 1.0  # urllib3 backoff_factor: 0, 2, 4, 8 ... seconds
    secondary_rate_wait: float = 60.0
    max_rate_wait: float = 300.0
    max_wait: float = 60.0  # the longest single wait (Retry-After, backoff, rate-limit reset) kcgate accepts
    max_total: float = 300.0  # all of publishing: requests, retries and waits
    throttle: bool = True  # PyGithub's pause between requests and writes (GitHub's advice)
    timeout: int = 15
    actions: bool = False  # running inside GitHub Actions (GITHUB_ACTIONS=true)
    actions_token: bool = False  # the token is the workflow's GITHUB_TOKEN (the action says so): no GET /user
    gate_name: str = "kcgate"  # the check run's name, the comment's title and its sticky marker

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read GITHUB_* (and KCGATE_* overrides) once; unknown or empty values fall back to defaults."""
        e = os.environ if env is None else env
        return cls(
            token=e.get("GITHUB_TOKEN", "") or e.get("INPUT_GITHUB_TOKEN", ""),
            repository=e.get("GITHUB_REPOSITORY", ""),
            event_name=e.get("GITHUB_EVENT_NAME", ""),
            event_path=e.get("KCGATE_EVENT_PATH", "") or e.get("GITHUB_EVENT_PATH", ""),  # the watchdog's
            sha=e.get("GITHUB_SHA", ""),
            api_url=(e.get("GITHUB_API_URL") or cls.api_url).rstrip("/"),
            server_url=(e.get("GITHUB_SERVER_URL") or cls.server_url).rstrip("/"),
            run_id=e.get("GITHUB_RUN_ID", ""),
            run_number=e.get("GITHUB_RUN_NUMBER", ""),
            run_attempt=e.get("GITHUB_RUN_ATTEMPT", ""),
            step_summary=e.get("GITHUB_STEP_SUMMARY", ""),
            output=e.get("GITHUB_OUTPUT", ""),
            comment_author=e.get("KCGATE_COMMENT_AUTHOR", ""),
            pr_number=_int_or_none(e.get("KCGATE_PR_NUMBER", "")),
            retries=int(_number(e, "KCGATE_GITHUB_RETRIES", cls.retries)),
            backoff=_number(e, "KCGATE_GITHUB_BACKOFF", cls.backoff),
            secondary_rate_wait=_number(e, "KCGATE_GITHUB_SECONDARY_WAIT", cls.secondary_rate_wait),
            max_rate_wait=_number(e, "KCGATE_GITHUB_MAX_RATE_WAIT", cls.max_rate_wait),
            max_wait=_number(e, "KCGATE_GITHUB_MAX_WAIT", cls.max_wait),
            max_total=_number(e, "KCGATE_GITHUB_MAX_TOTAL", cls.max_total),
            throttle=e.get("KCGATE_GITHUB_THROTTLE", "1") not in ("0", "false", "no"),
            actions=e.get("GITHUB_ACTIONS", "") == "true",
            actions_token=e.get("KCGATE_ACTIONS_TOKEN", "").lower() == "true",
        )

    def run_url(self) -> str:
        """Link to this workflow run, or "" outside Actions."""
        if not (self.repository and self.run_id.isdigit()):
            return ""
        return f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}"

    def blob_url(self, sha: str, path: str) -> str:
        """Link to a file at a commit, or "" when something is missing."""
        if not (self.repository and sha and path):
            return ""
        rel = path.removeprefix("./")
        return f"{self.server_url}/{self.repository}/blob/{sha}/{rel}"

    def load_event(self) -> dict[str, Any]:
        """The webhook payload of the triggering event ({} when there is none)."""
        return load_event(Path(self.event_path)) if self.event_path else {}


def load_event(path: Path) -> dict[str, Any]:
    """Read an event payload, capped in size; a broken one is a usage error naming the file."""
    try:
        data = bounded.loads_json(bounded.read_capped(path, MAX_EVENT_BYTES))
    except bounded.Refused as exc:
        raise UsageError(f"{path}: the event payload {exc}; check GITHUB_EVENT_PATH") from None
    except ValueError as exc:
        raise UsageError(f"{path}: the event payload is not JSON ({str(exc)[:100]})") from None
    return data if isinstance(data, dict) else {}


def head_sha(settings: Settings, event: Mapping[str, Any]) -> str:
    """The PR head commit the results are for: not GITHUB_SHA, which is a merge commit on pull_request."""
    sha = dig(event, "workflow_run", "head_sha") or dig(event, "pull_request", "head", "sha")
    return str(sha) if is_sha(sha) else settings.sha


def dig(obj: object, *keys: str) -> Any:
    """obj[k1][k2]... or None when any level is missing or not an object (payloads are not trusted)."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _number(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key, "")
    if not raw:
        return default
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise UsageError(f"{key}={raw[:40]!r} is not a number; unset it or give seconds/counts") from None


def _int_or_none(raw: str) -> int | None:
    return int(raw) if raw.strip().isdigit() else None
