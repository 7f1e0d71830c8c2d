"""``kcgate baseline update RESULTS... --dir DIR``: store results as committed, reviewable baselines."""

from __future__ import annotations

from pathlib import Path

import typer

from kcgate.errors import UsageError

baseline_app = typer.Typer(
    help="Manage baselines: one results file per runner, <runner>.json.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    baseline_app.command("update")(update_command)
    app.add_typer(baseline_app, name="baseline")


def update_command(
    results: list[str] = typer.Argument(..., help="Results files or directories to store as baselines."),
    directory: Path | None = typer.Option(
        None, "--dir", help="Baselines directory (default: [baselines] in contracts.toml, else ./baselines)."
    ),
    contracts: Path | None = typer.Option(
        None, "--contracts", help="contracts.toml naming the baselines directory."
    ),
) -> None:
    """Write each runner's results to DIR/<runner>.json with sorted keys and no timestamps."""
    from kcgate.results.baseline import DEFAULT_DIR, load_many, project_settings, write_baselines

    runs = load_many(results)
    if not runs:
        raise UsageError(
            "no results files found in " + ", ".join(results)[:300] + "; pass the results of `kcgate run`"
        )
    target = directory or project_settings(contracts)[1] or DEFAULT_DIR
    for path in write_baselines(runs, target):
        typer.echo(f"wrote {path}")
