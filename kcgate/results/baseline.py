"""Baseline store: results files keyed by runner, from a file, a directory or a git ref. No torch.

A baseline is a results file for one runner, committed as ``<runner>.json`` or downloaded from the base
commit's CI run. Every source is untrusted data; there is never a fallback to another runner's file.
"""

from __future__ import annotations

import contextlib
import gc
import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from kcgate.contracts.load import load_project
from kcgate.contracts.policy import Policy
from kcgate.errors import ResultsError, UsageError
from kcgate.results.artifacts import json_files
from kcgate.results.model import (
    MAX_RESULTS_BYTES,
    RunResult,
    foreign_kind,
    index_cases,
    load_member,
    load_run,
    parse_run,
    write_run,
)

GIT_PREFIX = "git:"
RUNNER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
GIT_REF = re.compile(r"[A-Za-z0-9_./@{}~^+-]{1,200}")
GIT_TIMEOUT_S = 60
DEFAULT_CONTRACTS = Path("contracts.toml")
DEFAULT_DIR = Path("baselines")

_File = tuple[Path, bool]  # a results file and whether it was named explicitly (then it must be results)


def project_settings(contracts: Path | None) -> tuple[Policy, Path | None]:
    """The gate policy and baselines directory from contracts.toml; defaults when the default file is absent."""
    policy, baselines_dir, _ = project_facts(contracts)
    return policy, baselines_dir


def project_facts(contracts: Path | None) -> tuple[Policy, Path | None, dict[str, str]]:
    """project_settings, and each contract's description (for the PR comment)."""
    path = contracts or DEFAULT_CONTRACTS
    if not path.exists():
        if contracts is not None:
            raise UsageError(
                f"{path}: no such contracts file; fix --contracts or omit it to use the default policy"
            )
        return Policy(), None, {}
    project = load_project(path, locate_kernels=False)
    descriptions = {c.id: c.description for c in project.contracts if c.description}
    return project.policy, project.baselines_dir, descriptions


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic GC while building large acyclic record trees: its repeated full scans cost ~40%."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_results(spec: str | Path, *, repo: Path | None = None) -> dict[str, RunResult]:
    """Load ``spec`` (a results file, a directory of them, or ``git:REF:PATH``), keyed by runner name."""
    return load_sources([spec], repo=repo)[0]


def load_many(specs: Iterable[str | Path], *, repo: Path | None = None) -> dict[str, RunResult]:
    """Load several sources into one index; the same runner in two sources is an error, as in a directory."""
    sources = list(specs)
    indexes = load_sources(sources, repo=repo)
    return index_by_runner((f"{spec}", run) for spec, idx in zip(sources, indexes) for run in idx.values())


def load_sources(specs: Sequence[str | Path], *, repo: Path | None = None) -> list[dict[str, RunResult]]:
    """Load each source, keyed by runner; all on-disk files are read in one batch (see ``load_files``)."""
    plans = [_plan(str(spec)) for spec in specs]
    files = list(dict.fromkeys(f for plan in plans if plan is not None for f in plan))
    loaded = dict(zip(files, load_files(files)))
    return [_index(str(spec), plan, loaded, repo or Path.cwd()) for spec, plan in zip(specs, plans)]


def _plan(spec: str) -> list[_File] | None:
    """The files a source names: None for git, the file itself (strict), or every ``*.json`` of a tree."""
    path = Path(spec)
    if spec.startswith(GIT_PREFIX) and not path.exists():
        return None
    if path.is_dir():
        return [(p, False) for p in json_files(path)]
    if not path.exists():
        raise UsageError(
            f"{path}: no such file or directory; pass a results file, a directory or git:REF:PATH"
        )
    return [(path, True)]


def _index(
    spec: str, plan: list[_File] | None, loaded: Mapping[_File, RunResult | None], repo: Path
) -> dict[str, RunResult]:
    if plan is None:
        ref, _, path = spec[len(GIT_PREFIX) :].partition(":")
        return load_git(ref, path, repo)
    runs = ((str(f[0]), loaded[f]) for f in plan)
    return index_by_runner((name, run) for name, run in runs if run is not None)


def index_by_runner(loaded: Iterable[tuple[str, RunResult]]) -> dict[str, RunResult]:
    """Index by runner; two files for one runner name both, because picking one would be a silent fallback."""
    runs: dict[str, RunResult] = {}
    origin: dict[str, str] = {}
    for name, run in loaded:
        index_cases(run, name)
        if run.runner in origin:
            raise ResultsError(
                f"two results files for runner {run.runner[:100]!r}: {origin[run.runner]} and {name}; "
                "keep one file per runner (merge shards first) or point at a narrower directory"
            )
        runs[run.runner], origin[run.runner] = run, name
    return runs


def check_runner_name(runner: str) -> str:
    """Runner names become file names, so they must be plain (no path separators, no leading dot)."""
    if not RUNNER_NAME.fullmatch(runner):
        raise UsageError(
            f"runner name {runner[:100]!r} cannot name a baseline file; "
            "use letters, digits, '.', '_', '+' and '-' (at most 100 characters)"
        )
    return runner


def write_baselines(runs: Mapping[str, RunResult], directory: Path) -> list[Path]:
    """Write ``<runner>.json`` per run with sorted keys and no volatile fields, so reviews diff cleanly."""
    paths = []
    for runner, run in sorted(runs.items()):
        if not run.complete:
            raise UsageError(f"results of runner {runner!r} are incomplete; a baseline must cover every case")
        path = directory / f"{check_runner_name(runner)}.json"
        write_run(path, run, stable=True)
        paths.append(path)
    return paths


# ---- files ---------------------------------------------------------------------------------------


def load_files(files: Sequence[_File]) -> list[RunResult | None]:
    """Load files in order, in this process.

    A forked helper loading every other file was tried twice and removed: sending the records back
    pickled cost as much as the parse it saved (25% slower on a busy 2-core machine), and as marshalled
    tuples it gained 3% (median of 5, benchmarks/diff_compare_speed.py): allocating the records dominates.
    """
    with paused_gc():
        return [load_run(path) if strict else load_member(path) for path, strict in files]


# ---- git -------------------------------------------------------------------------------------------


def load_git(ref: str, path: str, repo: Path) -> dict[str, RunResult]:
    """Read results committed at ``ref`` with git plumbing (no checkout, no filters, no repo code run)."""
    if not GIT_REF.fullmatch(ref) or ref.startswith("-"):
        raise UsageError(
            f"git ref {ref[:100]!r} is not a plain ref; use a branch, tag or commit (git:REF:PATH)"
        )
    listed = _git(repo, "ls-tree", "-r", "-z", "--full-name", "--name-only", ref, "--", path or ".")
    names = [n for n in listed if n.endswith(".json")]
    if not names:
        raise UsageError(f"git:{ref}:{path}: no *.json results at that ref; check the ref and the path")
    return index_by_runner(_load_blobs(repo, ref, names, single=len(names) == 1))


def _load_blobs(repo: Path, ref: str, names: list[str], single: bool) -> Iterator[tuple[str, RunResult]]:
    for name in names:
        label = f"git:{ref}:{name}"
        data = _git_blob(repo, f"{ref}:{name}", label)
        if not single and foreign_kind(data):
            continue
        yield label, _parse_blob(data, label)


def _git_blob(repo: Path, obj: str, label: str) -> bytes:
    size = int(_git_bytes(repo, "cat-file", "-s", obj).strip() or b"0")
    if size > MAX_RESULTS_BYTES:
        raise ResultsError(f"{label}: {size} bytes, over the {MAX_RESULTS_BYTES}-byte cap for results files")
    return _git_bytes(repo, "cat-file", "blob", obj)


def _parse_blob(data: bytes, label: str) -> RunResult:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ResultsError(f"{label}: not UTF-8 text; it is not a kcgate results file") from None
    return parse_run(text, label)


def _git(repo: Path, *args: str) -> list[str]:
    out = _git_bytes(repo, *args)
    return [n.decode("utf-8", "replace") for n in out.split(b"\0") if n]


def _git_bytes(repo: Path, *args: str) -> bytes:
    # An argument list (no shell); fsmonitor off because it is the one config hook plumbing could run.
    cmd = ["git", "-c", "core.fsmonitor=false", "--no-pager", *args]
    try:
        done = subprocess.run(cmd, cwd=repo, capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(
            f"cannot run git in {repo}: {exc}; install git or pass a directory instead"
        ) from None
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip()[:300]
        raise UsageError(f"git {args[0]} failed in {repo}: {err}; check the ref and the path")
    return done.stdout
