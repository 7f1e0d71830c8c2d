"""``kcgate baseline update RESULTS... --dir DIR``: store results as committed, reviewable baselines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from kcgate.commands._options import contracts_option, emit, format_option, output_option, pick_contracts
from kcgate.commands.diff import pick_format
from kcgate.errors import UsageError

baseline_app = typer.Typer(
    help="Manage baselines: one results file per runner, RUNNER.json. Example: kcgate baseline update results/",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    baseline_app.command("update")(update_command)
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
    from kcgate.results.baseline import DEFAULT_DIR, load_many, project_settings, write_baselines

    runs = load_many(results)
    if not runs:
        raise UsageError(
            "no results files found in " + ", ".join(results)[:300] + "; pass the results of `kcgate run`"
        )
    pick_format(fmt, {"console": 0, "json": 1})
    target = directory or project_settings(pick_contracts(contracts, required=False))[1] or DEFAULT_DIR
    written = [str(p) for p in write_baselines(runs, target)]
    if fmt == "json":
        emit(json.dumps({"kind": "kcgate-baseline", "written": written}, indent=2, sort_keys=True), output)
    else:
        emit("".join(f"wrote {p}\n" for p in written), output)
