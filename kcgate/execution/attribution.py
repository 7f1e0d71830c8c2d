"""Attribution of a new failure (``kcgate run --base-ref``): a case that fails or errors now, and did not on
the same inputs in the baseline, is rerun on the base commit's code with the same seed before the gate
decides. Base fails alike: the failure is pre-existing (main's, never this PR's); base passes or does not
plan the case: introduced. ClusterFuzz reruns a new crash on the base revision before it blames a change;
this is that step for numerical contracts (docs/diff.md#attribution)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from kcgate import plan as planning
from kcgate.contracts.records import Project
from kcgate.execution.executors import Executor
from kcgate.results.model import RunResult, Status
from kcgate.results.records import ABSENT, INTRODUCED, PRE_EXISTING, CaseResult, fails_alike

SUMMARY_CHARS = 300


def to_rerun(run: RunResult, baseline: RunResult | None) -> list[CaseResult]:
    """The cases whose failure (or error, or refusal) needs base's evidence: not passing now, not already
    failing alike in the baseline on the same seed (pre-existing without a rerun), and not a failure the
    baseline also failed, on any seed (still failing: the diff never blocks it by default)."""
    held: dict[str, tuple[str, int]] = {}
    if baseline is not None:
        t = baseline.table
        held = {
            cid: (s, seed) for cid, s, seed in zip(t.column("case_id"), t.column("status"), t.column("seed"))
        }
    out = []
    for c in run.cases:
        base = held.get(c.case_id)
        same = base is not None and base[1] == c.seed and fails_alike(c.status, base[0])
        still = base is not None and c.status == base[0] == Status.FAIL
        if c.status != Status.PASS and not same and not still:
            out.append(c)
    return out


def base_cases(
    todo: Iterable[CaseResult], base: Project, shapes: dict[str, tuple[tuple[int, ...], ...]]
) -> list[planning.Case]:
    """Base's plan of the cases in ``todo`` (its contracts, kernels and shapes), each at the seed it ran with
    here; a case base does not plan is left out (it is ``absent`` there)."""
    planned = {c.case_id: c for c in planning.make_plan(base, 0, shapes, boundary=True, fresh=True)}
    return [replace(planned[c.case_id], seed=c.seed) for c in todo if c.case_id in planned]


def rerun(cases: list[planning.Case], executor: Executor) -> dict[str, CaseResult]:
    """Base's results of ``cases``, by case id."""
    return {r.case_id: r for r in executor.run_many(cases)}


def attribute(
    run: RunResult, todo: Iterable[CaseResult], found: Mapping[str, CaseResult], commit: str
) -> RunResult:
    """The run with each case of ``todo`` stamped with base's evidence (``found``: base's results)."""
    stamped = {c.case_id: stamp(c, found.get(c.case_id), commit) for c in todo}
    return run.with_cases(tuple(stamped.get(c.case_id, c) for c in run.cases))


def stamp(case: CaseResult, base: CaseResult | None, commit: str) -> CaseResult:
    """One case with its attribution: pre-existing when base fails alike, else introduced."""
    if base is None:
        return replace(
            case,
            attribution=INTRODUCED,
            base_commit=commit,
            base_rerun=ABSENT,
            base_summary="base does not plan this case (its contract, dtype or shape is new)",
        )
    verdict = PRE_EXISTING if fails_alike(case.status, base.status) else INTRODUCED
    return replace(
        case, attribution=verdict, base_commit=commit, base_rerun=base.status, base_summary=summary(base)
    )


def summary(base: CaseResult) -> str:
    """Base's result in one line: its signature's summary, else its message."""
    text = (base.signature.summary if base.signature else "") or base.message
    return " ".join(text.split())[:SUMMARY_CHARS]
