"""Another commit's tree beside this one: a detached ``git worktree`` in a temporary directory, removed after
use (``kcgate run --base-ref`` reruns a failure on the base commit's code). Git through an argument list,
never a shell; its fsmonitor hook off."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kcgate.errors import UsageError

GIT_TIMEOUT_S = 300  # a worktree of a large repository checks out every file


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo``; its stdout, stripped. A failure is a UsageError naming the command."""
    cmd = ["git", "-c", "core.fsmonitor=false", "--no-pager", *args]
    try:
        done = subprocess.run(
            cmd, cwd=repo, capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"cannot run git in {repo}: {exc}; install git, or leave --base-ref out") from None
    if done.returncode != 0:
        err = done.stderr.strip()[:300]
        raise UsageError(f"git {' '.join(args[:2])} failed in {repo}: {err}")
    return done.stdout.strip()


def repo_root(path: Path) -> Path:
    """The top of the git repository that holds ``path`` (a file or a directory)."""
    where = path if path.is_dir() else path.parent
    return Path(git(where.resolve(), "rev-parse", "--show-toplevel"))


def commit_of(repo: Path, ref: str) -> str:
    """The full commit id ``ref`` names (a branch, a tag, a sha); refuses an option-like ref."""
    if not ref or ref.startswith("-"):
        raise UsageError(f"--base-ref {ref[:100]!r} is not a ref; pass a branch, a tag or a commit")
    return git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


def merge_base(repo: Path, ref: str) -> str:
    """The merge base of HEAD and ``ref`` (a pull request's base branch): the commit the PR is judged against."""
    return git(repo, "merge-base", "HEAD", commit_of(repo, ref))


@contextlib.contextmanager
def worktree(repo: Path, commit: str) -> Iterator[Path]:
    """A detached checkout of ``commit`` (its files only: no submodules, LFS objects as their pointers),
    removed with its registration on exit."""
    tmp = Path(tempfile.mkdtemp(prefix="kcgate-base-"))
    path = tmp / "tree"
    try:
        git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
        yield path
    finally:
        with contextlib.suppress(UsageError):
            git(repo, "worktree", "remove", "--force", str(path))
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(UsageError):
            git(repo, "worktree", "prune")
