"""`kcgate run`'s two steps around the baseline: replay its seeds (the same inputs on both sides), and rerun a
new failure on the base commit's code (attribution). docs/diff.md#same-inputs-on-both-sides."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer

from kcgate import plan as planning
from kcgate.contracts.load import load_project
from kcgate.errors import ContractsError, IOFault, ResultsError, UsageError
from kcgate.execution import attribution
from kcgate.execution.pool import make_executor
from kcgate.render.escape import console_text
from kcgate.results.baseline import DEFAULT_DIR
from kcgate.results.model import RunResult, load_run, write_run
from kcgate.util import worktree

OFF = "none"  # --baseline none / --base-ref none: no replay / no rerun
PR_EVENTS = ("pull_request", "pull_request_target")


def find_baseline(choice: str, seed_given: bool, project: Any, runner: str) -> tuple[RunResult | None, str]:
    """The baseline whose seeds this run replays, and where it came from: ``--baseline PATH``, else (unless
    --seed asks for an exact rerun) ``<[project] baselines>/<runner>.json`` where ``kcgate baseline
    update`` writes it. None: no replay."""
    if choice == OFF or (seed_given and not choice):
        return None, ""
    path = Path(choice) if choice else (project.baselines_dir or DEFAULT_DIR) / f"{runner}.json"
    if not choice and not path.is_file():
        return None, ""
    try:
        return load_run(path), str(path)
    except (ResultsError, IOFault) as exc:
        if choice:
            raise
        _warn(f"warning: {path}: not replayed ({exc.message}); every seed of this run is fresh")
        return None, ""


def replay(
    cases: list[planning.Case], baseline: RunResult | None, source: str, keyword: str | None = None
) -> tuple[list[Any], list[Any]]:
    """The plan on the baseline's seeds, with its fresh cases; the meta entries saying so. A fresh case
    selected by its exact id (a reproduce command: ``-k ID/f0 --seed S``) runs without a baseline too."""
    if baseline is None:
        if keyword and planning.is_fresh(keyword):
            return cases, []
        return planning.replay(cases, None), []
    t = baseline.table
    held = dict(zip(t.column("case_id"), t.column("seed")))
    out = planning.replay(cases, held)
    fresh = sum(planning.is_fresh(c.case_id) for c in out)
    replayed = sum(c.case_id in held and not planning.is_fresh(c.case_id) for c in out)
    meta = [("replay.baseline", source), ("replay.cases", str(replayed)), ("replay.fresh", str(fresh))]
    return out, meta


def base_ref(choice: str, contracts: Path, env: Mapping[str, str] = os.environ) -> tuple[Path, str] | None:
    """The repository and the base commit to rerun new failures on: ``--base-ref REF``, or at the defaults
    in a GitHub pull_request event the merge base of HEAD and the PR's base branch. None: no rerun."""
    if choice == OFF:
        return None
    if not choice:
        branch = env.get("GITHUB_BASE_REF", "")
        if env.get("GITHUB_EVENT_NAME") not in PR_EVENTS or not branch:
            return None
    try:
        repo = worktree.repo_root(contracts)
        if choice:
            return repo, worktree.commit_of(repo, choice)
        return repo, worktree.merge_base(repo, f"origin/{branch}")
    except UsageError as exc:
        if choice:
            raise
        _warn(
            f"warning: no base commit to attribute failures to ({exc.message}); fetch the base branch "
            "(actions/checkout with fetch-depth: 0) or pass --base-ref; new failures stay new violations"
        )
        return None


def attribute(
    run: RunResult,
    baseline: RunResult | None,
    where: tuple[Path, str],
    contracts: Path,
    executor_args: dict[str, Any],
    shapes: dict[str, tuple[tuple[int, ...], ...]],
    out: Path,
    held_out: int | None = None,
) -> RunResult:
    """Rerun each new failure on the base commit's code with its seed; stamp and rewrite the results."""
    todo = attribution.to_rerun(run, baseline)
    if not todo:
        return run
    repo, commit = where
    _warn(f"attribution: rerunning {len(todo)} new failure(s) on base {commit[:12]}")
    with worktree.worktree(repo, commit) as tree:
        base_contracts = tree / contracts.resolve().relative_to(repo)
        try:
            base = load_project(base_contracts)
        except (
            ContractsError,
            UsageError,
        ) as exc:  # base's contracts do not load: nothing is attributed to it
            _warn(f"warning: base {commit[:12]}'s contracts do not load ({exc.message}); nothing attributed")
            return run
        cases = planning.with_held_out(attribution.base_cases(todo, base, shapes), held_out)
        executor = make_executor(project=base, **executor_args)
        try:
            found = attribution.rerun(cases, executor) if cases else {}
        finally:
            executor.close()
    result = attribution.attribute(run, todo, found, commit)
    write_run(out, result)
    return result


def _warn(text: str) -> None:
    typer.echo(console_text(text), err=True)
