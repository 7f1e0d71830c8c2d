"""Merge shard results into one runner's result; never mixes runners or fingerprints. No torch."""

from __future__ import annotations

from kcgate.errors import UsageError
from kcgate.results import CaseResult, RunResult


def merge_runs(runs: list[RunResult], names: list[str]) -> RunResult:
    if not runs:
        raise UsageError("nothing to merge: pass the shard results files")
    first = runs[0]
    for run, name in zip(runs[1:], names[1:]):
        if run.runner != first.runner or run.fingerprint.key() != first.fingerprint.key():
            raise UsageError(
                f"{name}: runner {run.runner!r} fingerprint {run.fingerprint.key()} differs from {names[0]}: "
                f"runner {first.runner!r} fingerprint {first.fingerprint.key()}; merge only shards of one runner"
            )
    cases: dict[str, CaseResult] = {}
    for run, name in zip(runs, names):
        for c in run.cases:
            if c.case_id in cases and cases[c.case_id] != c:
                raise UsageError(f"{name}: case {c.case_id!r} also appears, with another result, in an earlier "
                                 "file; shards must not overlap (use the same --shard N for all of them)")
            cases[c.case_id] = c
    return first.with_cases(tuple(cases[k] for k in sorted(cases)), complete=all(r.complete for r in runs))
