"""``kcgate history``: record runs in the history store and show a contract's budget over commits per
runner, the steps past the drift rule and the runners diverging from the consensus; ``--html DIR``
writes the static dashboard. ``history add`` and ``history rebuild`` fill the store. No torch."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from kcgate.commands._options import contracts_option, emit, format_option, output_option, pick_contracts
from kcgate.commands.diff import pick_format
from kcgate.errors import UsageError

if TYPE_CHECKING:
    from kcgate.history.store import Added

DEFAULT_DB = Path("kcgate-history.db")

history_app = typer.Typer(
    name="history",
    invoke_without_command=True,
    no_args_is_help=False,
    rich_markup_mode=None,
    help="A contract's budget over commits on each runner, from the history store.\n\n"
    "Example: kcgate history --db kcgate-history.db --contract gemm-bf16 --last 30\n\n"
    "Fill the store with `kcgate history add` (results files) or `kcgate history rebuild` (the data "
    "branch's log). Exit 3 on a bad option or a corrupted or hostile history file.",
)


def register(app: typer.Typer) -> None:
    app.add_typer(history_app, name="history")


def _db_option() -> Path:
    return typer.Option(DEFAULT_DB, "--db", metavar="PATH", help="The history database (SQLite).")


@history_app.callback()
def history_command(
    ctx: typer.Context,
    db: Path = _db_option(),
    contract: list[str] = typer.Option(
        [], "--contract", metavar="ID", help="Only this contract (repeatable)."
    ),
    runner: list[str] = typer.Option([], "--runner", metavar="NAME", help="Only this runner (repeatable)."),
    last: int = typer.Option(20, "--last", metavar="N", min=2, max=100_000, help="The last N commits."),
    contracts: Optional[Path] = contracts_option(
        "contracts.toml for the drift rule (default: found upward)."
    ),
    fmt: str = format_option("console", "json"),
    output: Optional[Path] = output_option(),
    html: Optional[Path] = typer.Option(
        None, "--html", metavar="DIR", help="Also write the static dashboard into DIR."
    ),
) -> None:
    """Show the history (see the example above)."""
    if ctx.invoked_subcommand:
        return
    from kcgate.history.store import open_store
    from kcgate.history.view import load_view
    from kcgate.render.history_text import FORMATS
    from kcgate.results.baseline import project_settings

    render = pick_format(fmt, FORMATS)
    contracts = pick_contracts(contracts, required=False)
    policy, _ = project_settings(contracts)
    with open_store(db, create=False) as conn:
        view = load_view(conn, last, contract, runner, policy.budget_drift)
    if html is not None:
        write_site(view, html, contracts)
    text = render(view)
    emit(text, output, verdict=text.splitlines()[0] if fmt == "console" else None)


def write_site(view: object, directory: Path, contracts: Path | None) -> None:
    from kcgate.publish.settings import Settings
    from kcgate.render.dashboard import Links, render_site
    from kcgate.results.model import write_atomic

    s = Settings.from_env()
    prefix = f"{s.server_url}/{s.repository}/" if s.repository else ""
    links = Links(
        prefix + "commit/" if prefix else "",
        prefix + "pull/" if prefix else "",
        (contracts or Path("contracts.toml")).as_posix(),
    )
    for name, text in render_site(view, links).items():  # type: ignore[arg-type]
        write_atomic(directory / name, text)


@history_app.command("add")
def add_command(
    results: list[Path] = typer.Argument(
        ..., metavar="RESULTS", help="Results files or directories of them."
    ),
    commit: str = typer.Option(
        ...,
        "--commit",
        metavar="SHA",
        envvar="GITHUB_SHA",
        help="The commit the results are of (default: $GITHUB_SHA).",
    ),
    time: str = typer.Option(
        "",
        "--time",
        metavar="TIME",
        help="The commit's time, ISO 8601 with a zone, e.g. 2026-12-01T10:00:00Z (default: now).",
    ),
    pr: Optional[int] = typer.Option(
        None, "--pr", metavar="N", min=1, help="The pull request this commit merged."
    ),
    run_id: str = typer.Option(
        "", "--run-id", metavar="ID", envvar="GITHUB_RUN_ID", help="The CI run (default: $GITHUB_RUN_ID)."
    ),
    db: Path = _db_option(),
    log: Optional[Path] = typer.Option(
        None,
        "--log",
        metavar="DIR",
        help="Also write each run's append-only log file under DIR (the data branch's checkout).",
    ),
    fmt: str = format_option("console", "json"),
    output: Optional[Path] = output_option(),
) -> None:
    """Record results in the history. Re-adding a run (same commit and runner) changes nothing.

    Example: kcgate history add results/*.json --commit 3f2a9c1 --pr 12 --log kcgate-history
    """
    from kcgate.history.log import check_entry, write_log
    from kcgate.history.records import RUN_ID, SHA, from_run, real_time
    from kcgate.history.store import add_runs, now, open_store
    from kcgate.results.artifacts import collect_results
    from kcgate.results.baseline import paused_gc

    time = utc_time(time)
    _check(SHA.fullmatch(commit.lower()), f"--commit {commit[:70]!r}: pass the commit's hex SHA")
    _check(
        real_time(time),
        f"--time {time[:40]!r}: use ISO 8601 with a zone and a date that exists, e.g. 2026-12-01T10:00:00Z",
    )
    _check(
        RUN_ID.fullmatch(run_id), f"--run-id {run_id[:70]!r}: use up to 64 letters, digits, '.', '_' or '-'"
    )
    _check(pr is None or pr < 2**31, f"--pr {pr}: a pull request number is below 2^31 (2147483648)")
    with paused_gc():
        runs = collect_results(results)
    if not runs:
        raise UsageError(
            f"no results files found in {', '.join(map(str, results))[:300]}; pass the results of `kcgate run`"
        )
    recorded = now()  # the view's order: when the runs were recorded, not the commit's (settable) date
    entries = [
        replace(from_run(run, commit.lower(), time, run_id, pr), recorded=recorded) for run in runs.values()
    ]
    for e in entries:
        check_entry(e)  # all checked before anything is written: what rebuild refuses is never written
    written = [p for e in entries if log is not None and (p := write_log(log, e))]
    with open_store(db) as conn:
        done = add_runs(conn, entries)
    _summary(done, fmt, output, len(written))


@history_app.command("rebuild")
def rebuild_command(
    logdir: Path = typer.Argument(
        ..., metavar="LOGDIR", help="The log directory (the data branch's checkout)."
    ),
    db: Path = _db_option(),
    fmt: str = format_option("console", "json"),
    output: Optional[Path] = output_option(),
) -> None:
    """Build (or complete) the database from the append-only log; every file is checked first, and runs
    are added in the order they were recorded.

    Example: kcgate history rebuild kcgate-history --db kcgate-history.db
    """
    from kcgate.history.log import read_logs
    from kcgate.history.store import add_runs, open_store, sortable

    entries = sorted(read_logs(logdir), key=lambda e: (sortable(e.recorded or e.time), e.commit, e.runner))
    with open_store(db) as conn:
        done = add_runs(conn, entries)
    _summary(done, fmt, output)


def _summary(done: Added, fmt: str, output: Path | None, logs: int | None = None) -> None:
    """What ``history add`` or ``rebuild`` did, as a console line or JSON."""
    added, cases, skipped = done.added, done.cases, done.skipped
    if pick_format(fmt, {"console": "console", "json": "json"}) == "json":
        fields = {"added": added, "cases": cases, "skipped": skipped, "replaced": done.replaced}
        emit(json.dumps(fields | ({} if logs is None else {"log_files": logs}), sort_keys=True), output)
        return
    written = "" if logs is None else f"; {logs} log files written"
    replaced = f", {done.replaced} incomplete runs replaced by complete ones" if done.replaced else ""
    emit(
        f"kcgate history: {added} runs added ({cases:,} cases){replaced}, {skipped} already recorded{written}",
        output,
    )


def utc_time(text: str) -> str:
    """An ISO 8601 time with a zone (a commit's timestamp, e.g. 2026-12-01T10:00:00+01:00) in UTC as
    YYYY-MM-DDTHH:MM:SSZ; now when empty; the text unchanged when it does not parse (then refused)."""
    if not text:
        return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        when = dt.datetime.fromisoformat(text[:40].replace("Z", "+00:00"))
        if when.tzinfo is None:
            return text
        return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError):  # no such date, or one that leaves the calendar in UTC
        return text


def _check(ok: object, message: str) -> None:
    if not ok:
        raise UsageError(message)
