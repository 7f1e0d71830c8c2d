"""A real git repository with a default branch and a PR branch, and a history data branch checkout with
main's runs recorded at some of its commits, for the baseline tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kcgate.history.runs import record_runs
from tests.testing.history_samples import run_at

GIT_ENV = {
    "GIT_AUTHOR_NAME": "a",
    "GIT_AUTHOR_EMAIL": "a@example.com",
    "GIT_COMMITTER_NAME": "a",
    "GIT_COMMITTER_EMAIL": "a@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | GIT_ENV
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def make_repo(
    path: Path, n_main: int, n_pr: int = 0, fork_at: int | None = None
) -> tuple[list[str], list[str]]:
    """``n_main`` commits on main (oldest first) and ``n_pr`` on branch ``pr`` forked from main's commit
    ``fork_at`` (default: the last); main's SHAs and the PR's SHAs, oldest first. The checkout is main."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    main = [_commit(path, f"main {i}") for i in range(n_main)]
    pr: list[str] = []
    if n_pr:
        git(path, "checkout", "-q", "-b", "pr", main[-1 if fork_at is None else fork_at])
        pr = [_commit(path, f"pr {i}") for i in range(n_pr)]
        git(path, "checkout", "-q", "main")
    return main, pr


def _commit(repo: Path, message: str) -> str:
    (repo / "file.txt").write_text(message)
    git(repo, "add", "file.txt")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def record(
    history: Path, commit: str, index: int, runners: tuple[str, ...] = ("cpu-x86", "amd-mi300x")
) -> None:
    """Record main's run of ``commit`` (the sample run of commit ``index``) for each runner."""
    record_runs(history, commit, {r: run_at(index, r) for r in runners})
