"""`kcgate calibrate`: three-state calibration — every contract accepts good, rejects bad and baseline.

Runs the built-in class contracts (and, with --contracts, the user's contracts that name good/bad/
baseline kernels). Exit 0 when calibrated, 6 when a bad kernel passes (under-specified), 1 when a good
kernel is rejected. torch is imported inside the command only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kcgate.commands._options import (
    contracts_option,
    deprecated,
    device_option,
    emit,
    format_option,
    isolation_option,
    output_option,
)
from kcgate.commands.diff import pick_format
from kcgate.errors import ExitCode, UsageError


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)


def calibrate(
    contracts: Optional[Path] = contracts_option(
        "Also calibrate this contracts.toml's contracts that name good/bad/baseline kernels."
    ),
    fmt: str = format_option("console", "json"),
    output: Optional[Path] = output_option(),
    json_path: Optional[Path] = typer.Option(
        None, "--json", help="Deprecated: --format json > PATH. Writes the matrix as JSON here.", hidden=True
    ),
    keyword: Optional[str] = typer.Option(None, "-k", help="Only contracts whose id or class matches."),
    builtin: bool = typer.Option(True, "--builtin/--no-builtin", help="Include the twelve built-in classes."),
    device: str = device_option("--device", "-d", help="The device to calibrate on.", default="cpu"),
    backend: Optional[str] = typer.Option(None, "--backend", hidden=True, help="Deprecated: --device."),
    isolation: str = isolation_option("process (default: a crashing kernel costs one state) or none."),
) -> None:
    """Prove each contract accepts its good kernel and rejects its bad and baseline kernels.

    Examples: kcgate calibrate; kcgate calibrate -c contracts.toml --no-builtin --format json --output cal.json
    """
    from kcgate.calibration import calibrate as cal
    from kcgate.contracts.load import load_project
    from kcgate.execution.executors import check_isolation
    from kcgate.execution.pool import make_executor
    from kcgate.results.model import write_atomic

    check_isolation(isolation)
    pick_format(fmt, {"console": 0, "json": 1})
    if json_path:
        deprecated("--json PATH", "--format json --output PATH")
    if backend is not None:
        deprecated("--backend", "--device")
        device = backend
    rows = []
    projects = ([load_project(cal.BUILTIN)] if builtin else []) + (
        [load_project(contracts)] if contracts else []
    )
    for project in projects:
        executor = make_executor(isolation, project, device)
        try:
            rows += cal.calibrate(
                project, executor, keyword, make=lambda p: make_executor(isolation, p, device)
            )
        finally:
            executor.close()
    if not rows:
        raise UsageError(
            "no contract to calibrate: none names good/bad/baseline kernels or -k matched nothing; "
            'add good = "pkg.mod:fn" (and bad, baseline) to a contract'
        )
    if fmt == "json":
        emit(cal.to_json(rows), output)
    else:
        emit(cal.render_matrix(rows), output, verdict=cal.verdict_line(rows))
    if json_path:
        write_atomic(json_path, cal.to_json(rows))
    if any(r.under_specified for r in rows):
        raise typer.Exit(int(ExitCode.UNDER_SPECIFIED))
    if any(r.good_rejected for r in rows):
        raise typer.Exit(int(ExitCode.VIOLATION))
