"""`kcgate merge`: combine `--shard i/N` results of one runner. No torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from kcgate.commands._options import emit, format_option, out_alias, output_option, renamed, results_option
from kcgate.commands.diff import pick_format
from kcgate.errors import UsageError
from kcgate.render.escape import console_text


def register(app: typer.Typer) -> None:
    app.command("merge")(merge)


def merge(
    files: list[Path] = typer.Argument(..., metavar="FILES", help="Shard results files of one runner."),
    results: Optional[Path] = results_option("The merged results file to write (required)."),
    out: Optional[Path] = out_alias("--results PATH"),
    fmt: str = format_option("console", "json"),
    output: Optional[Path] = output_option(),
) -> None:
    """Merge shard results into one runner's results; refuses to mix runners or fingerprints.

    Example: kcgate merge results/gpu.shard-1-of-2.json results/gpu.shard-2-of-2.json --results results/gpu.json
    """
    from kcgate.results.merge import merge_shards
    from kcgate.results.model import load_run, write_run

    pick_format(fmt, {"console": 0, "json": 1})
    out = renamed(results, out, "--out", "--results PATH")
    if out is None:
        raise UsageError("kcgate merge needs --results PATH: the merged results file to write")
    merged = merge_shards([(f, load_run(f)) for f in files])
    write_run(out, merged)
    if fmt == "json":
        doc = {"kind": "kcgate-merge", "files": len(files), "cases": len(merged.cases), "out": str(out)}
        emit(json.dumps(doc, indent=2, sort_keys=True), output)
    else:
        emit(console_text(f"merged {len(files)} files, {len(merged.cases)} cases -> {out}"), output)
