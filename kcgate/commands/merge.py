"""`kcgate merge`: combine `--shard i/N` results of one runner. No torch."""

from __future__ import annotations

from pathlib import Path

import typer

from kcgate.render.escape import console_text


def register(app: typer.Typer) -> None:
    app.command("merge")(merge)


def merge(
    files: list[Path] = typer.Argument(..., help="Shard results files of one runner."),
    out: Path = typer.Option(..., "--out", "-o", help="Merged results file."),
) -> None:
    """Merge shard results into one runner's results; refuses to mix runners or fingerprints."""
    from kcgate.results.merge import merge_shards
    from kcgate.results.model import load_run, write_run

    merged = merge_shards([(f, load_run(f)) for f in files])
    write_run(out, merged)
    typer.echo(console_text(f"merged {len(files)} files, {len(merged.cases)} cases -> {out}"))
