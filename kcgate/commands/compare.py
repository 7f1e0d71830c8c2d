"""``kcgate compare RESULTS...``: the contract x runner matrix with consensus outliers (and an optional PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kcgate.commands._options import emit, format_option, output_option
from kcgate.commands.diff import pick_format
from kcgate.errors import UsageError

if TYPE_CHECKING:
    from kcgate.gate.compare import Comparison


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)


def compare_command(
    results: list[str] = typer.Argument(
        ..., metavar="RESULTS", help="Results files or directories, one results file per runner."
    ),
    fmt: str = format_option("console", "markdown", "json", "github"),
    output: Path | None = output_option(),
    png: Path | None = typer.Option(
        None, "--png", help="Also write a PNG heatmap and K curves (needs kcgate[plot])."
    ),
) -> None:
    """Compare runners side by side: verdict and budget used per contract, and who disagrees with the rest.

    Examples: kcgate compare results/; kcgate compare kcgate-artifacts/ --format markdown --output matrix.md
    """
    from kcgate.gate.compare import compare_runs
    from kcgate.render.compare_formats import FORMATS
    from kcgate.results.baseline import load_many, paused_gc

    render = pick_format(fmt, FORMATS)
    with paused_gc():
        runs = load_many(results)
        if not runs:
            raise UsageError(
                "no results files found in " + ", ".join(results)[:300] + "; pass the results of `kcgate run`"
            )
        comparison = compare_runs(runs)
    if png is not None:
        write_png(comparison, png)
    text = render(comparison)
    emit(text, output, verdict=text.splitlines()[0] if fmt == "console" else None)


def write_png(comparison: Comparison, path: Path) -> None:
    from kcgate.render.plot import render_png

    data = render_png(comparison)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
