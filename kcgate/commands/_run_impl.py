"""The body of `kcgate run`, kept out of the CLI module so the CLI starts without torch."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import typer

from kcgate import plan as planning
from kcgate.commands import _attribute
from kcgate.commands._options import QUIET, VERBOSE, emit, verbosity
from kcgate.contracts.load import load_project
from kcgate.devices.base import TORCH_FIX, import_torch
from kcgate.errors import ExitCode, IOFault, UsageError
from kcgate.execution.executors import check_isolation
from kcgate.execution.pool import make_executor, worker_count
from kcgate.execution.runloop import execute_plan, new_run, resume_from
from kcgate.render.console import (
    CiProgress,
    TerminalBar,
    progress_interval,
    render_plan,
    render_run,
    summary_line,
    timing,
)
from kcgate.render.escape import console_text
from kcgate.render.junit import render_junit
from kcgate.results.model import check_writable, load_run, write_atomic
from kcgate.results.records import OVERRIDES
from kcgate.vocab.catalogue import default_shapes


@dataclass(frozen=True)
class Options:
    contracts: Path
    results: Path | None  # --results: the results file (default: <[project] results>/<runner>.json)
    runner: str | None
    device: str | None
    junit: Path | None
    keyword: str | None
    dtypes: list[str]
    list_only: bool
    shard: str | None
    resume: bool
    seed: int
    isolation: str
    timeout: float | None
    memory_limit_gb: float
    level: int  # -q/--quiet, -v/--verbose: _options.QUIET, NORMAL or VERBOSE
    held_out: int | None = None
    workers: str = "auto"
    ci_progress: bool = False  # a line every 10% or 30 s (render.console.CiProgress) instead of one per case
    shrink_s: float = 0.0  # kcgate.engine.shrink: the CLI's default is 5 s
    shape: str | None = None  # --shape: every contract of that arity runs it alone (a shrunk reproduction)
    keep_results: bool = True  # False: init's quick run, whose results file is temporary and not named
    fmt: str = "console"  # json: the results document instead of the table (and the plan's case ids)
    output: Path | None = None  # --output: what --format renders, instead of stdout
    baseline: str = ""  # --baseline: the results whose seeds are replayed ("": found, "none": off)
    seed_given: bool = False  # --seed was given: an exact rerun, no replay unless --baseline names one
    base_ref: str = ""  # --base-ref: the commit new failures are rerun on ("": the PR's merge base in CI)


def run_command(o: Options) -> int:
    check_isolation(o.isolation)
    workers = worker_count(o.workers, o.isolation, o.device)
    if not o.list_only:
        check_torch(o.isolation)
    project = planning.with_shape(load_project(o.contracts), o.shape)
    # with several workers, the plan as the catalogue's default shapes make it says how many to start at once
    early = _plan(o, project, _default_shapes()) if workers > 1 and not o.list_only else None
    executor = (  # with isolation the worker starts now and makes the run's one torch import
        None
        if o.list_only
        else make_executor(
            o.isolation,
            project,
            o.device,
            o.memory_limit_gb,
            o.timeout,
            workers,
            o.workers == "auto",
            sum(not planning.is_fresh(c.case_id) for c in early or ()),  # fresh ones only beside a baseline
        )
    )
    try:
        shapes = executor.default_shapes() if executor else _default_shapes()
        cases = early if early is not None and shapes == _default_shapes() else _plan(o, project, shapes)
        if o.list_only:
            if o.fmt == "json":
                emit(
                    json.dumps({"kind": "kcgate-plan", "cases": [c.case_id for c in cases]}, indent=2),
                    o.output,
                )
            else:
                emit(render_plan(cases), o.output, verdict=f"{len(cases)} cases")
            return ExitCode.OK if cases else ExitCode.NOTHING_SELECTED
        if not cases:
            typer.echo(
                "nothing selected: no case matches the filters (-k, --dtype, --shard); try --list", err=True
            )
            return ExitCode.NOTHING_SELECTED
        return _execute(o, project, cases, executor)
    finally:
        if executor is not None:
            executor.close()


def _plan(o: Options, project: Any, shapes: dict[str, tuple[tuple[int, ...], ...]]) -> list[Any]:
    """The cases to run: the plan at ``shapes`` (the op families' default shapes), selected, sharded."""
    full = planning.make_plan(project, o.seed, shapes, boundary=True, fresh=not o.list_only)
    cases = planning.shard(
        planning.select(full, o.keyword, o.dtypes),
        planning.parse_shard(o.shard),
    )
    return planning.with_shrink(planning.with_held_out(cases, o.held_out), o.shrink_s)  # type: ignore[no-any-return]


def check_torch(isolation: str) -> None:
    """Before planning, in this process: torch must be importable here (the worker runs this interpreter).

    With --isolation none torch is imported now; with workers only found, so the parent stays light and a
    torch that fails at import shows its error in the worker's start-up message."""
    if isolation == "none":
        import_torch()
        return
    if importlib.util.find_spec("torch") is None:
        raise UsageError(
            f"kcgate run needs torch, but {sys.executable} cannot import it (no module named 'torch'); "
            f"fix: {TORCH_FIX}"
        )


def _default_shapes() -> dict[str, tuple[tuple[int, ...], ...]]:
    return default_shapes()


def _execute(o: Options, project, cases, executor) -> int:  # type: ignore[no-untyped-def]
    device, fingerprint = executor.handshake()  # from the process that runs the kernels
    cases, left = planning.for_device(cases, project, device)
    if left:
        typer.echo(  # even under -q: a contract asked for that does not run is not a detail
            f"not run on {device}: {', '.join(left)} (their contract's devices leaves {device} out)", err=True
        )
    if not cases:
        typer.echo(f"nothing selected: no contract applies to {device} (each contract's devices)", err=True)
        return ExitCode.NOTHING_SELECTED
    runner = o.runner or f"{device}-{fingerprint.arch or 'generic'}".lower()
    baseline, source = _attribute.find_baseline(o.baseline, o.seed_given, project, runner)
    cases, replayed = _attribute.replay(cases, baseline, source, o.keyword)
    out = o.results or beside_fuller(project.results_dir / f"{runner}.json", cases, o.resume)
    fingerprint = fingerprint.with_tracked(tracked_versions(project.track))
    run = new_run(runner, fingerprint, str(o.contracts), o.shard, (*overrides(o), *replayed))
    resumed = resume_from(out, run, cases) if o.resume else None
    if resumed and resumed.notice():
        typer.echo(console_text(resumed.notice()), err=True)
    done = resumed.done if resumed else {}
    _check_outputs(out, o.junit)
    if o.level == QUIET:
        result = execute_plan(cases, executor, run, out, done, None)
    elif o.level == VERBOSE:  # a line per case, wherever stderr goes
        result = execute_plan(cases, executor, run, out, done, _progress)
    elif o.ci_progress:
        todo = sum(c.case_id not in done for c in cases)
        with CiProgress(todo, _echo_err, progress_interval(os.environ)) as ci:
            result = execute_plan(cases, executor, run, out, done, ci.case_done)
    elif sys.stderr.isatty():
        with TerminalBar(_write_err) as bar:
            result = execute_plan(cases, executor, run, out, done, bar.case_done)
    else:  # a pipe outside CI (a script, a test): a line per case
        result = execute_plan(cases, executor, run, out, done, _progress)
    where = _attribute.base_ref(o.base_ref, o.contracts)
    if where is not None:
        args = {  # in fresh workers even under --isolation none: this process holds the PR's modules
            "isolation": "process",
            "device": device,
            "memory_limit_gb": o.memory_limit_gb,
            "timeout": o.timeout,
        }
        shapes = executor.default_shapes()
        result = _attribute.attribute(result, baseline, where, o.contracts, args, shapes, out, o.held_out)
    if o.fmt == "json":
        emit(out.read_text(encoding="utf-8"), o.output)
    else:
        table = render_run(result) + (console_text(f"\nresults: {out}") if o.keep_results else "")
        emit(table, o.output, verdict=console_text(summary_line(result)))
    if o.junit:
        _write_junit(o.junit, result)
    return ExitCode.OK if all(c.ok for c in result.cases) else ExitCode.VIOLATION


def tracked_versions(names: tuple[str, ...]) -> dict[str, str]:
    """``[project] track``: each distribution's installed version, as this interpreter (the workers') sees it."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def overrides(o: Options) -> tuple[tuple[str, str], ...]:
    """The flags given that override the contracts' protocol, as the run's meta records them."""
    given = {"--held-out": o.held_out, "--timeout": o.timeout}
    return tuple((key, f"{given[flag]:g}") for flag, key in OVERRIDES if given[flag] is not None)


def beside_fuller(path: Path, cases, resume: bool) -> Path:  # type: ignore[no-untyped-def]
    """The default results path, unless a run of fewer cases would replace a fuller file there.

    A reproduce command (``-k CASE_ID``) selects one case; written over ``results/<runner>.json`` it would
    drop every other case of the full run. Such a run writes ``results/repro/<runner>.json`` instead and
    says so; an explicit ``--results`` and ``--resume`` are taken as given."""
    if resume or not path.is_file():
        return path
    try:
        held = load_run(path)
    except (UsageError, IOFault, OSError):  # not a results file we can read: the run replaces it, as before
        return path
    planned = {c.case_id for c in cases}  # a fresh case runs only beside a baseline: not a dropped one
    dropped = sum(cid not in planned and not planning.is_fresh(cid) for cid in held.table.column("case_id"))
    if not dropped:
        return path
    beside = path.parent / "repro" / path.name
    typer.echo(
        console_text(
            f"note: writing {beside}, not {path}: that file holds {dropped:,} "
            f"{'case' if dropped == 1 else 'cases'} this run did not select (pass --results to choose)"
        ),
        err=True,
    )
    return beside


def _check_outputs(out: Path, junit: Path | None) -> None:
    """Before any case runs: every file the run will write can be written (exit 3 naming it if not)."""
    check_writable(out, "choose a writable --results (or [project].results)")
    if junit:
        check_writable(junit, "choose a writable --junit path")


def _write_junit(path: Path, result) -> None:  # type: ignore[no-untyped-def]
    """JUnit is a report of a finished run: failing to write it is a warning, never a new exit code."""
    try:
        write_atomic(path, render_junit(result))
    except IOFault as exc:
        typer.echo(
            console_text(f"warning: JUnit not written: {exc.message}; the run's verdict stands"), err=True
        )
        return
    if verbosity() != QUIET:
        typer.echo(console_text(f"junit: {path}"))


def _echo_err(line: str) -> None:
    typer.echo(console_text(line), err=True)


def _write_err(text: str) -> None:  # TerminalBar's: carriage returns and erase-line codes kept
    sys.stderr.write(text)
    sys.stderr.flush()


def _progress(i: int, n: int, result) -> None:  # type: ignore[no-untyped-def]
    line = f"[{i}/{n}] {result.status:<7} {result.case_id} ({timing(result)})"
    typer.echo(console_text(line), err=True)
