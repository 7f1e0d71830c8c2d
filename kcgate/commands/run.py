"""`kcgate run`: load, plan, execute (isolated by default) and write results, JUnit and a table."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Optional

import typer

from kcgate.commands._options import (
    choice_option,
    contracts_file,
    contracts_option,
    device_option,
    format_option,
    isolation_option,
    out_alias,
    output_option,
    renamed,
    results_option,
    verbosity,
    warn_misread,
)
from kcgate.commands.diff import pick_format
from kcgate.vocab.dtypes import TENSOR_DTYPES


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    contracts: Optional[Path] = contracts_option(),
    fmt: str = format_option("console", "json"),
    output: Optional[Path] = output_option(),
    results: Optional[Path] = results_option("The results file to write (default results/<runner>.json)."),
    out: Optional[Path] = out_alias("--results PATH"),
    runner: Optional[str] = typer.Option(None, "--runner", envvar="KCGATE_RUNNER", help="Runner name."),
    device: Optional[str] = device_option(
        "--device", "-d", help="The device kind (default: the best detected)."
    ),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Also write JUnit XML here."),
    keyword: Optional[str] = typer.Option(None, "-k", help="Select cases by id substring/glob or class id."),
    dtype: Optional[list[str]] = choice_option(
        None, "--dtype", choices=TENSOR_DTYPES, help="Only these dtypes (repeatable)."
    ),
    list_only: bool = typer.Option(False, "--list", help="Show the plan and exit without running."),
    shard: Optional[str] = typer.Option(None, "--shard", help="Run shard i of N, e.g. 2/3."),
    resume: bool = typer.Option(False, "--resume", help="Finish an interrupted run in --results."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Base seed (default: unpredictable, recorded)."),
    isolation: str = isolation_option("process (default) or none."),
    workers: str = typer.Option(
        "auto",
        "--workers",
        "-n",
        envvar="KCGATE_WORKERS",
        help="Worker processes running cases at once: a number, or auto (on the CPU one per 250 cases, up to "
        "one per CPU, 8, and one per 4 GiB of half the RAM; on an accelerator 1).",
    ),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Per-case timeout in seconds."),
    memory_limit_gb: float = typer.Option(
        0.0, "--memory-limit-gb", help="Address-space cap per worker (0: half of RAM, shared by the workers)."
    ),
    held_out: Optional[int] = typer.Option(
        None, "--held-out", help="C-CMP-03: held-out shapes per case besides the class's extremes."
    ),
    shrink_s: float = typer.Option(
        5.0,
        "--shrink-s",
        help="Seconds a failed case searches for its smallest failing shape, then its fewest nonzero "
        "inputs (0: none).",
    ),
    shape: Optional[str] = typer.Option(
        None, "--shape", help="Run every contract of that arity at this shape alone, e.g. 3x1021."
    ),
    baseline: str = typer.Option(
        "",
        "--baseline",
        help="Results whose seeds the run replays, with fresh seeds beside them (default: <[project] "
        "baselines>/<runner>.json when it exists and no --seed is given; none: no replay).",
    ),
    base_ref: str = typer.Option(
        "",
        "--base-ref",
        envvar="KCGATE_BASE_REF",
        help="Rerun each new failure on this commit's code, same seed, and record it pre-existing or "
        "introduced (default: the merge base in a GitHub pull_request event; none: off).",
    ),
) -> None:
    """Run the contracts on this machine's device and write results (exit 1 on a violation).

    Progress goes to stderr: a live bar in a terminal; under CI=true, a line every 10% of the cases or 30 s;
    else, and with -v, a line per case; none with -q. --format json prints the results document (the file
    --results names) instead of the table; -o/--output writes what would be printed to a file.

    Examples: kcgate run; kcgate run --runner laptop -k gemm --dtype bfloat16; kcgate run -c ci/contracts.toml
    --device cuda --shard 1/2 --results results/gpu.json --junit junit.xml
    """
    from kcgate.commands._run_impl import Options, run_command
    from kcgate.render.console import in_ci

    pick_format(fmt, {"console": 0, "json": 1})
    if fmt == "console":
        warn_misread(output, ".json", "--results")
    opts = Options(
        contracts_file(contracts),
        renamed(results, out, "--out", "--results PATH"),
        runner,
        device,
        junit,
        keyword,
        dtype or [],
        list_only,
        shard,
        resume,
        seed if seed is not None else secrets.randbits(62),
        isolation,
        timeout,
        memory_limit_gb,
        verbosity(),
        held_out,
        workers,
        shrink_s=shrink_s,
        shape=shape,
        ci_progress=in_ci(os.environ) and not sys.stderr.isatty(),
        fmt=fmt,
        output=output,
        baseline=baseline,
        seed_given=seed is not None,
        base_ref=base_ref,
    )
    raise typer.Exit(run_command(opts))
