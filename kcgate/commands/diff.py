"""``kcgate diff BASE CURRENT``: every case's change against its baseline, and the gate's exit code."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import typer

from kcgate.commands._options import contracts_option, emit, format_option, output_option, pick_contracts
from kcgate.errors import UsageError

T = TypeVar("T")


def register(app: typer.Typer) -> None:
    app.command("diff")(diff_command)


def diff_command(
    base: str = typer.Argument(
        ..., metavar="BASE", help="Baseline results: a file, a directory of results, or git:REF:PATH."
    ),
    current: str = typer.Argument(
        ..., metavar="CURRENT", help="Current results: a file or a directory of results."
    ),
    contracts: Path | None = contracts_option(
        "contracts.toml with [policy] and waivers (default: contracts.toml found upward, if any)."
    ),
    fmt: str = format_option("console", "markdown", "json", "github"),
    output: Path | None = output_option(),
    today: str = typer.Option(
        "", "--today", help="Date for waiver expiry, YYYY-MM-DD (default: today, UTC)."
    ),
    expect_runner: list[str] = typer.Option(
        [], "--expect-runner", help="A runner that must have results (repeatable); a missing leg blocks."
    ),
) -> None:
    """Diff CURRENT against BASE per case. Exit 1 when a change blocks, 0 when none does, 3 on bad input.

    Examples: kcgate diff baselines/cpu-ubuntu.json results/cpu-ubuntu.json;
    kcgate diff git:origin/main:baselines results/ --format markdown --output diff.md
    """
    from kcgate.gate.decide import decide
    from kcgate.render.diff_formats import FORMATS
    from kcgate.results.baseline import load_sources, paused_gc, project_settings

    contracts = pick_contracts(contracts, required=False)
    render = pick_format(fmt, {**FORMATS, "github": _github(contracts)})
    policy, _ = project_settings(contracts)
    with paused_gc():
        runs, baselines = load_sources([current, base])
        if not runs:
            raise UsageError(f"{current}: no results files found; pass the results of `kcgate run`")
        verdict, gate = decide(runs, baselines, policy, parse_today(today), expect_runner)
        emit(render(verdict), output, *_levels(fmt, verdict))
    if gate.exit_code:
        raise typer.Exit(gate.exit_code)


def _levels(fmt: str, verdict) -> tuple[str | None, str | None]:  # type: ignore[no-untyped-def]
    """The console's -q line (its headline) and -v table (every case, unchanged ones too)."""
    from kcgate.render.diff_formats import headline, render_console

    if fmt != "console":
        return None, None
    return f"kcgate diff: {headline(verdict)}", render_console(verdict, every=True)


def _github(contracts: Path | None) -> Callable[..., str]:
    """Annotations on the contracts file's lines (GitHub's per-step caps applied), then the headline."""

    def render(verdict) -> str:  # type: ignore[no-untyped-def]
        from kcgate.render.annotations import make_annotations, render_workflow_commands, select
        from kcgate.render.diff_formats import count_line, headline

        kept, _omitted = select(make_annotations(verdict, str(contracts or "contracts.toml")))
        return render_workflow_commands(kept) + f"kcgate diff: {headline(verdict)}; {count_line(verdict)}\n"

    return render


def pick_format(name: str, formats: Mapping[str, T]) -> T:
    """Look a format up in a registry (a renderer, or the name itself); an unknown name lists the choices."""
    if name not in formats:
        raise UsageError(f"--format {name[:40]!r} is not one of: {', '.join(formats)}")
    return formats[name]


def parse_today(text: str) -> dt.date:
    if not text:
        return dt.datetime.now(dt.timezone.utc).date()
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--today {text[:40]!r} is not a date; use YYYY-MM-DD") from None
