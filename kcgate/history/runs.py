"""Main's runs kept whole on the history data branch: ``runs/<commit>/<runner>.json`` is the full results
file of one default-branch run (append-only), and ``find_baselines`` picks, per runner, the run of a
commit or of its nearest recorded ancestor. Ancestry comes from the checked-out repository (``git
rev-list --first-parent``), never from the branch, whose files are untrusted: links, special files,
oversized or malformed files and names that are not commits or runners are refused. No torch."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kcgate.errors import IOFault, ResultsError, UsageError
from kcgate.results.baseline import GIT_REF, RUNNER_NAME
from kcgate.results.model import MAX_RESULTS_BYTES, RunResult, dumps_run, load_run, write_atomic

RUNS_DIR = "runs"
SUFFIX = ".json"
COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a full SHA-1 or SHA-256 object name
MAX_BACK = 100  # recorded ancestors looked at, along the first-parent chain
MAX_RUNNERS = 200  # files in one commit's directory: more is not a kcgate data branch
GIT_TIMEOUT_S = 60
FIX = "restore it from the data branch's history (git log -- FILE) or delete it; the next run of that commit records it again"


@dataclass(frozen=True)
class Recorded:
    """What ``record_runs`` did with one runner's run: ``written``, ``exists`` or why it was skipped."""

    runner: str
    path: Path
    outcome: str  # written | exists | incomplete | too-large


@dataclass(frozen=True)
class Found:
    """One runner's baseline: the recorded run of ``commit``, ``back`` first-parent commits before the
    commit asked for (0: that commit itself)."""

    runner: str
    commit: str
    back: int
    run: RunResult


def run_path(root: Path, commit: str, runner: str) -> Path:
    return root / RUNS_DIR / commit / f"{runner}{SUFFIX}"


# ---- recording ---------------------------------------------------------------------------------------


def record_runs(root: Path, commit: str, runs: Mapping[str, RunResult]) -> list[Recorded]:
    """Write each complete run under ``runs/<commit>/<runner>.json`` unless it is there already
    (append-only: a re-run never rewrites what was recorded). Nothing is written through a link."""
    commit = check_commit(commit, "--commit")
    if not root.is_dir():
        _mkdir(root, parents=True)
    _directory(root, RUNS_DIR, commit, create=True)
    return [_record(root, commit, run) for _, run in sorted(runs.items())]


def _record(root: Path, commit: str, run: RunResult) -> Recorded:
    path = run_path(root, commit, _runner_name(run.runner, str(root / RUNS_DIR / commit)))
    if os.path.lexists(path):
        _regular(path)  # a link planted where this run goes is refused, not overwritten or followed
        return Recorded(run.runner, path, "exists")
    if not run.complete:
        return Recorded(run.runner, path, "incomplete")
    text = dumps_run(run)
    if len(text.encode("utf-8")) > MAX_RESULTS_BYTES:
        return Recorded(run.runner, path, "too-large")
    write_atomic(path, text)
    return Recorded(run.runner, path, "written")


# ---- finding -------------------------------------------------------------------------------------


def find_baselines(
    root: Path, repo: Path, commit: str, runners: Sequence[str], max_back: int = MAX_BACK
) -> dict[str, Found]:
    """Per runner, the recorded run of ``commit`` or of its nearest first-parent ancestor within
    ``max_back`` commits; every runner recorded in that window when ``runners`` is empty. A runner with
    no recorded ancestor is absent from the answer."""
    wanted = [_runner_name(r, "--runner") for r in runners]
    found: dict[str, Found] = {}
    for back, sha in enumerate(ancestors(repo, commit, max_back)):
        names = wanted or recorded_runners(root, sha)
        for runner in names:
            if runner not in found and (run := read_recorded(root, sha, runner)) is not None:
                found[runner] = Found(runner, sha, back, run)
        if wanted and len(found) == len(wanted):
            break
    return found


def recorded_runners(root: Path, commit: str) -> list[str]:
    """The runners recorded at ``commit`` (the ``*.json`` names of its directory), each name checked."""
    where = _directory(root, RUNS_DIR, commit)
    if where is None:
        return []
    with os.scandir(where) as entries:
        names = sorted(e.name for e in entries)
    if len(names) > MAX_RUNNERS:
        raise ResultsError(f"{where}: {len(names)} entries, over the cap of {MAX_RUNNERS} runners; {FIX}")
    return [_runner_name(n[: -len(SUFFIX)], str(where / n)) for n in names if n.endswith(SUFFIX)]


def read_recorded(root: Path, commit: str, runner: str) -> RunResult | None:
    """The run recorded for ``runner`` at ``commit``; None when none is; a ResultsError (exit 3) naming
    the file and the fix when what is there is a link, a special file, oversized, malformed or another
    runner's results."""
    if _directory(root, RUNS_DIR, commit) is None:
        return None
    path = run_path(root, commit, runner)
    if not os.path.lexists(path):
        return None
    _regular(path)
    try:
        run = load_run(path)
    except ResultsError as exc:
        raise ResultsError(f"{exc.message}; {FIX}") from None
    if run.runner != runner:
        raise ResultsError(
            f"{path}: holds runner {run.runner[:100]!r}, not {runner!r} as its name says; {FIX}"
        )
    return run


def _directory(root: Path, *parts: str, create: bool = False) -> Path | None:
    """``root/parts...`` when each step is a real directory (None when one is absent); a link or a file
    on the way is refused: the data branch must not steer a read or a write elsewhere."""
    where = root
    for part in parts:
        where = where / part
        try:
            mode = os.lstat(where).st_mode
        except FileNotFoundError:
            if not create:
                return None
            _mkdir(where)
            continue
        except OSError as exc:
            raise IOFault(where, exc) from None
        if not stat.S_ISDIR(mode):
            kind = "symbolic link" if stat.S_ISLNK(mode) else "file"
            raise ResultsError(f"{where}: is a {kind}, not a directory; {FIX}")
    return where


def _mkdir(where: Path, parents: bool = False) -> None:
    try:
        where.mkdir(parents=parents)
    except OSError as exc:
        raise IOFault(where, exc) from None


def _regular(path: Path) -> None:
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = "symbolic link" if stat.S_ISLNK(mode) else "special file or directory"
        raise ResultsError(f"{path}: is a {kind}, not a regular results file; {FIX}")


def _runner_name(name: str, where: str) -> str:
    if not RUNNER_NAME.fullmatch(name):
        raise ResultsError(
            f"{where}: {name[:100]!r} is not a runner name (letters, digits, '.', '_', '+', '-', "
            f"starting with a letter or digit); {FIX}"
        )
    return name


def check_commit(commit: str, what: str) -> str:
    if not COMMIT.fullmatch(commit):
        raise UsageError(f"{what} {commit[:80]!r}: pass a full lowercase commit SHA (40 or 64 hex digits)")
    return commit


# ---- git (the checked-out repository: the one source of ancestry) -----------------------------------


def ancestors(repo: Path, ref: str, max_back: int) -> list[str]:
    """``ref`` and its first-parent ancestors, newest first, at most ``max_back`` + 1 of them."""
    sha = resolve(repo, ref)
    out = git(repo, "rev-list", "--first-parent", f"--max-count={max_back + 1}", sha, "--")
    return [line for line in out.split() if COMMIT.fullmatch(line)]


def merge_base(repo: Path, base: str, head: str) -> str:
    """The best common ancestor of two commits, as ``git merge-base`` finds it."""
    return git(repo, "merge-base", resolve(repo, base), resolve(repo, head)).strip()


def resolve(repo: Path, ref: str) -> str:
    if not GIT_REF.fullmatch(ref) or ref.startswith("-"):
        raise UsageError(f"{ref[:100]!r} is not a plain git ref; pass a commit SHA, a branch or HEAD")
    sha = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check_ref=ref).strip()
    return check_commit(sha, f"{ref} resolved to")


def git(repo: Path, *args: str, check_ref: str = "") -> str:
    """Run git plumbing (an argument list, no shell, fsmonitor off: no repository hook runs)."""
    cmd = ["git", "-c", "core.fsmonitor=false", "--no-pager", *args]
    try:
        done = subprocess.run(cmd, cwd=repo, capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"cannot run git in {repo}: {exc}; install git or pass --repo-dir") from None
    if done.returncode != 0:
        if check_ref:
            raise UsageError(
                f"{repo}: commit {check_ref[:80]!r} is not in this repository; fetch the default branch's "
                "history (actions/checkout with fetch-depth: 0) or pass --repo-dir"
            )
        err = done.stderr.decode("utf-8", "replace").strip()[:300]
        raise UsageError(f"git {args[0]} failed in {repo}: {err}; check --repo-dir and the commits")
    return done.stdout.decode("utf-8", "replace")
