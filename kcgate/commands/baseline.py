"""``kcgate baseline``: committed, reviewable baselines (``update``), and main's runs kept on the history
data branch (``record`` adds a default-branch run, ``fetch`` picks the run of a PR's merge base or of its
nearest recorded ancestor and writes it where ``kcgate run`` and ``kcgate report`` read baselines)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from kcgate.commands._options import (
    contracts_option,
    emit,
    format_option,
    out_alias,
    output_option,
    pick_contracts,
    renamed,
)
from kcgate.commands.diff import pick_format
from kcgate.errors import ResultsError, UsageError

if TYPE_CHECKING:
    from kcgate.history.runs import Found
    from kcgate.history.source import BaselineSource, Origin
    from kcgate.results.model import RunResult

baseline_app = typer.Typer(
    help="Manage baselines: one results file per runner, RUNNER.json. Example: kcgate baseline update results/",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    baseline_app.command("update")(update_command)
    baseline_app.command("record")(record_command)
    baseline_app.command("fetch")(fetch_command)
    app.add_typer(baseline_app, name="baseline")


def update_command(
    results: list[str] = typer.Argument(
        ..., metavar="RESULTS", help="Results files or directories to store as baselines."
    ),
    directory: Path | None = typer.Option(
        None, "--dir", help="Baselines directory (default: [baselines] in contracts.toml, else ./baselines)."
    ),
    contracts: Path | None = contracts_option(
        "contracts.toml naming the baselines directory (default: found upward)."
    ),
    fmt: str = format_option("console", "json"),
    output: Optional[Path] = output_option(),
) -> None:
    """Write each runner's results to DIR/<runner>.json with sorted keys and no timestamps.

    Examples: kcgate baseline update results/; kcgate baseline update kcgate-artifacts/ --dir baselines
    """
    from kcgate.results.baseline import load_many, write_baselines

    runs = load_many(results)
    if not runs:
        raise UsageError(
            "no results files found in " + ", ".join(results)[:300] + "; pass the results of `kcgate run`"
        )
    pick_format(fmt, {"console": 0, "json": 1})
    target = directory or committed_dir(contracts)
    written = [str(p) for p in write_baselines(runs, target)]
    if fmt == "json":
        emit(json.dumps({"kind": "kcgate-baseline", "written": written}, indent=2, sort_keys=True), output)
    else:
        emit("".join(f"wrote {p}\n" for p in written), output)  # one line per runner: -q prints them too


def committed_dir(contracts: Path | None) -> Path:
    """The repository's baselines directory: [project] baselines in contracts.toml, else ./baselines."""
    from kcgate.results.baseline import DEFAULT_DIR, project_settings

    return project_settings(pick_contracts(contracts, required=False))[1] or DEFAULT_DIR


def _history_option() -> Path:
    return typer.Option(
        ..., "--history", metavar="DIR", help="The checkout of the history data branch (kcgate-history)."
    )


def record_command(
    results: list[Path] = typer.Argument(..., help="Results files or directories of them."),
    commit: str = typer.Option(
        ..., "--commit", metavar="SHA", envvar="GITHUB_SHA", help="The full SHA the results are of."
    ),
    history: Path = _history_option(),
    fmt: str = format_option("console", "json"),
    output: Optional[Path] = output_option(),
) -> None:
    """Keep a default-branch run whole in the data branch, as runs/<commit>/<runner>.json (append-only:
    a file that is there already is kept). A runner's shards are merged first; an incomplete run is not
    kept. The action's history mode does this on every push to the default branch.

    Example: kcgate baseline record kcgate-artifacts --commit 3f2a...c1 --history kcgate-history
    """
    from kcgate.history.runs import record_runs
    from kcgate.results.artifacts import collect_results
    from kcgate.results.baseline import paused_gc

    render = pick_format(fmt, {"console": "console", "json": "json"})
    with paused_gc():
        runs = collect_results(results)
    if not runs:
        raise UsageError(
            f"no results files found in {', '.join(map(str, results))[:300]}; pass the results of `kcgate run`"
        )
    done = record_runs(history, commit.lower(), runs)
    if render == "json":
        rows = [{"runner": r.runner, "path": str(r.path), "outcome": r.outcome} for r in done]
        emit(json.dumps({"kind": "kcgate-baseline-record", "runs": rows}, indent=1, sort_keys=True), output)
        return
    emit("".join(f"kcgate baseline: {r.runner}: {RECORDED[r.outcome]} {r.path}\n" for r in done), output)


RECORDED = {
    "written": "recorded",
    "exists": "already recorded, kept as it is:",
    "incomplete": "not recorded (the run is incomplete: a shard is missing or it stopped early):",
    "too-large": "not recorded (over the results files' size cap):",
}


def fetch_command(
    history: Path = _history_option(),
    commit: str = typer.Option(
        "HEAD",
        "--commit",
        metavar="REF",
        help="The merge base (with --head: the base side, e.g. the default branch's head).",
    ),
    head: str = typer.Option(
        "", "--head", metavar="SHA", help="The PR's head: look up the merge base of --commit and it."
    ),
    repo_dir: Path = typer.Option(
        Path("."), "--repo-dir", metavar="DIR", help="The checked-out repository whose history is walked."
    ),
    runner: list[str] = typer.Option(
        [], "--runner", metavar="NAME", help="Only this runner (repeatable; default: every recorded one)."
    ),
    max_back: int = typer.Option(
        100, "--max-back", metavar="N", min=0, max=100_000, help="First-parent ancestors looked at."
    ),
    directory: Optional[Path] = typer.Option(
        None, "--dir", metavar="DIR", help="Write RUNNER.json here (default: the baselines directory)."
    ),
    out: Optional[Path] = out_alias("--dir DIR"),
    contracts: Optional[Path] = contracts_option(
        "contracts.toml naming the committed baselines directory (default: found upward)."
    ),
    fmt: str = format_option("console", "json"),
    output: Optional[Path] = output_option(),
) -> None:
    """Write, per runner, the recorded run of the merge base or of its nearest recorded ancestor (along
    the first-parent chain of the checked-out repository) as DIR/RUNNER.json, and
    DIR/kcgate-baseline-source.json saying which commit each came from. A committed baselines file
    (contracts.toml's [project] baselines, else ./baselines) wins over the recorded run. Nothing recorded
    (a first run) is not an error: it says so and writes no baseline.

    Example: kcgate baseline fetch --history kcgate-history --commit origin/main --head $PR_HEAD_SHA
    """
    from kcgate.history.runs import find_baselines, merge_base, resolve
    from kcgate.history.source import SOURCE_FILE, BaselineSource, read_source, write_source
    from kcgate.render.baseline_source import source_lines

    render = pick_format(fmt, {"console": "console", "json": "json"})
    base = merge_base(repo_dir, commit, head) if head else resolve(repo_dir, commit)
    found = find_baselines(history, repo_dir, base, runner, max_back)
    committed = committed_dir(contracts)
    target = renamed(directory, out, "--out", "--dir DIR") or committed
    ours = _fetched_before(read_source(committed) if (committed / SOURCE_FILE).is_file() else None)
    names = sorted(set(runner) | set(found) | (set() if runner else _committed_names(committed)))
    origins = [_place(name, found.get(name), committed, target, ours) for name in names]
    source = BaselineSource(base, max_back, tuple(origins))
    write_source(target, source)
    lines = source_lines(source)
    if render == "json":
        doc = {"kind": "kcgate-baseline-fetch", "merge_base": base, "out": str(target), "lines": list(lines)}
        emit(json.dumps(doc | {"runners": [vars(o) for o in origins]}, indent=1, sort_keys=True), output)
        return
    last = f"kcgate baseline: wrote {target}\n"
    emit("".join(f"kcgate baseline: {line}\n" for line in lines) + last, output, verdict=last)


def _fetched_before(source: BaselineSource | None) -> set[str]:
    """Runners whose file in the output directory an earlier fetch wrote (so not a committed one)."""
    return {o.runner for o in source.origins if o.how == "recorded"} if source else set()


def _committed_names(directory: Path) -> set[str]:
    from kcgate.results.baseline import RUNNER_NAME

    if not directory.is_dir():
        return set()
    from kcgate.history.source import SOURCE_FILE

    files = (p for p in directory.glob("*.json") if p.name != SOURCE_FILE and p.is_file())
    return {p.stem for p in files if RUNNER_NAME.fullmatch(p.stem)}


def _place(name: str, found: Found | None, committed: Path, target: Path, ours: set[str]) -> Origin:
    """Write one runner's baseline into ``target``: a committed file wins (copied when ``target`` is
    elsewhere), else the recorded run. ``ours``: the committed directory's files an earlier fetch wrote
    there (its source file says so): those are replaced, never taken for committed ones."""
    from kcgate.history.source import Origin
    from kcgate.results.model import write_run

    own, mine = committed / f"{name}.json", target / f"{name}.json"
    if own.is_file() and not own.is_symlink() and name not in ours:
        if own.resolve() != mine.resolve():
            write_run(mine, _committed_run(own, name))
        return Origin(name, "committed")
    if found is None:
        if name in ours and own.resolve() == mine.resolve():  # an earlier fetch's file, stale now
            mine.unlink(missing_ok=True)
        return Origin(name, "none")
    write_run(mine, found.run)
    return Origin(name, "recorded", found.commit, found.back)


def _committed_run(path: Path, name: str) -> RunResult:
    from kcgate.results.model import load_run

    run = load_run(path)
    if run.runner != name:
        raise ResultsError(f"{path}: holds runner {run.runner[:100]!r}, not {name!r} as its name says")
    return run
