"""Collect results from CI artifacts for ``kcgate report``: untrusted files, capped, shards merged.

Downloaded artifacts are data from another (possibly hostile) workflow: symlinks are not followed, the
number of files and their total size are capped, every file is validated by ``load_run``, and a
runner's shards are merged only when their fingerprints agree.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from kcgate.errors import ResultsError, UsageError
from kcgate.results.merge import merge_shards
from kcgate.results.model import RunResult, load_member

MAX_FILES = 1000
MAX_TOTAL_BYTES = 512 * 1024 * 1024


def collect_results(
    paths: Sequence[Path], *, max_files: int = MAX_FILES, max_total: int = MAX_TOTAL_BYTES
) -> dict[str, RunResult]:
    """Every results file under ``paths``, keyed by runner, a runner's shards merged into one run."""
    files = [f for p in paths for f in result_files(p)]
    check_caps(files, max_files, max_total)
    groups: dict[str, list[tuple[Path, RunResult]]] = {}
    for path in files:
        run = load_member(path)
        if run is not None:
            groups.setdefault(run.runner, []).append((path, run))
    return {runner: merge_shards(parts) for runner, parts in sorted(groups.items())}


def result_files(path: Path) -> list[Path]:
    """A file stands for itself; a directory gives every regular ``*.json`` below it, sorted."""
    if path.is_symlink():
        raise UsageError(
            f"{path}: is a symbolic link; pass the real file or directory (artifacts are untrusted)"
        )
    if path.is_file():
        return [path]
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"{path}: is not a regular file or a directory; pass results files or the artifacts directory"
        )
    if not path.is_dir():
        raise UsageError(f"{path}: no such file or directory; pass results files or the artifacts directory")
    return json_files(path)


def json_files(root: Path) -> list[Path]:
    """Every regular ``*.json`` below root, sorted; symlinks are not followed (artifacts are untrusted)."""
    found = []
    for top, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [Path(top, n) for n in names if n.endswith(".json") and not Path(top, n).is_symlink()]
    return sorted(found)


def check_caps(files: Sequence[Path], max_files: int, max_total: int) -> None:
    """Refuse an artifact set too large to be kcgate results before reading any of it."""
    if len(files) > max_files:
        raise ResultsError(
            f"{len(files)} JSON files found, over the cap of {max_files}; point at the results directory only"
        )
    total = sum(f.stat().st_size for f in files)
    if total > max_total:
        raise ResultsError(
            f"results add up to {total} bytes, over the cap of {max_total}; these are not kcgate results"
        )
