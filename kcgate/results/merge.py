"""Merge a runner's shard results into one run: `kcgate merge` and the report's artifact reader.

Never mixes runners or fingerprints, never takes a case twice, and calls the run complete only when
every shard is complete and, where shards record ``meta.shard = "i/N"``, every i from 1 to N is there.
No torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from kcgate.errors import ResultsError
from kcgate.results.model import CaseResult, RunResult


def merge_shards(parts: Sequence[tuple[Path, RunResult]]) -> RunResult:
    """One run from (file, run) pairs of the same runner and fingerprint; cases keep the files' order."""
    if not parts:
        raise ResultsError("nothing to merge: pass the shard results files")
    first_path, first = parts[0]
    for path, run in parts[1:]:
        if run.runner != first.runner or run.fingerprint.key() != first.fingerprint.key():
            raise ResultsError(
                f"{path}: runner {run.runner[:100]!r} fingerprint {run.fingerprint.key()} differs from "
                f"{first_path}: runner {first.runner[:100]!r} fingerprint {first.fingerprint.key()}; "
                "merge only shards of one runner measured on one machine (or give each machine its own name)"
            )
    if len(parts) == 1:
        _unique_cases(parts)  # one file can repeat a case too, and report would refuse the output
        return first
    complete = all(run.complete for _, run in parts) and _all_shards(run for _, run in parts)
    return first.with_cases(_unique_cases(parts), complete=complete)


def _unique_cases(parts: Sequence[tuple[Path, RunResult]]) -> tuple[CaseResult, ...]:
    seen: dict[str, Path] = {}
    out = []
    for path, run in parts:
        here: set[str] = set()
        for case in run.cases:
            if case.case_id in here:
                raise ResultsError(
                    f"{path}: case {case.case_id[:120]!r} appears twice in this file; `kcgate run` never "
                    "writes a case twice, so the file was edited or forged: run that shard again"
                )
            if case.case_id in seen:
                raise ResultsError(
                    f"case {case.case_id[:120]!r} of runner {run.runner[:100]!r} is in both {seen[case.case_id]} "
                    f"and {path}; each shard must run distinct cases (--shard i/N)"
                )
            here.add(case.case_id)
            out.append(case)
        seen.update(dict.fromkeys(here, path))
    return tuple(out)


def _all_shards(runs: Iterable[RunResult]) -> bool:
    """When shards record ``meta.shard = "i/N"``, every i from 1 to N must be present."""
    marks = [dict(run.meta).get("shard", "") for run in runs]
    if not all(marks):
        return True
    try:
        got = {int(m.split("/")[0]) for m in marks}
        total = {int(m.split("/")[1]) for m in marks}
    except (ValueError, IndexError):
        return False
    return len(total) == 1 and got == set(range(1, total.pop() + 1))
