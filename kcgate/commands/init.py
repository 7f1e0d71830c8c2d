"""`kcgate init PACKAGE...`: a first contracts.toml in one command (probe, write, validate, quick run)."""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path
from typing import Optional

import typer

from kcgate.errors import ExitCode

DEFAULT_RUNNERS = ("cpu-ubuntu=ubuntu-latest",)


def register(app: typer.Typer) -> None:
    app.command("init")(init)


def init(
    packages: list[str] = typer.Argument(..., help="Importable packages or modules holding the kernels."),
    out: Path = typer.Option(Path("contracts.toml"), "--out", "-o", help="The contracts file to write."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing files."),
    path: Optional[list[Path]] = typer.Option(
        None,
        "--path",
        help="Directory added to sys.path to import the packages (default: . and src/ if present).",
    ),
    run: bool = typer.Option(True, "--run/--no-run", help="Run the written file once (quick run)."),
    github: bool = typer.Option(
        False, "--github", help="Also write .github/workflows/kcgate-{run,report}.yml."
    ),
    repo: Optional[str] = typer.Option(
        None, "--repo", help="owner/name for the workflows (default: git origin)."
    ),
    runner: Optional[list[str]] = typer.Option(
        None,
        "--runner",
        help="NAME=LABEL[,LABEL...] per CI leg (repeatable; default cpu-ubuntu=ubuntu-latest).",
    ),
) -> None:
    """Find kernels in PACKAGES, write a commented contracts.toml, validate it and run it once (exit 0 when the
    quick run passes, 1 when it finds violations, as `kcgate run`)."""
    from kcgate.adopt import scaffold
    from kcgate.contracts.load import load_project

    root = out.resolve().parent
    if out.exists() and not force:
        scaffold.write_new(out, "", force)  # raises: never overwrite without --force
    paths = list(path) if path else [p for p in (root, root / "src") if p.is_dir()]
    typer.echo(f"probing {', '.join(packages)} (in a worker process) ...", err=True)
    probed = scaffold.probe(packages, paths)
    rel = [_relative(p, root) for p in paths]
    text = scaffold.render_contracts(probed, packages, root.name, rel, scaffold.features())
    placed = [p for p in probed.placements if p.op]
    if not placed:
        _report_unplaced(probed)
        typer.echo("no kernel could be placed in an op family; nothing written", err=True)
        raise typer.Exit(int(ExitCode.NOTHING_SELECTED))
    scaffold.write_new(out, text, force)
    typer.echo(f"wrote {out}: {len(placed)} contract{'s' * (len(placed) != 1)}")
    for p in placed:
        extra = f" — {p.note}" if p.note else ""
        typer.echo(f"  {p.kernel} -> {p.op} ({', '.join(p.dtypes)}; by {p.by}){extra}")
    _report_unplaced(probed)
    load_project(out)  # validate: a ContractsError exits 2 with every problem
    typer.echo(f"validate: {out} OK")
    if github:
        _write_workflows(root, repo, runner or list(DEFAULT_RUNNERS), force)
    raise typer.Exit(int(_quick_run(out) if run else ExitCode.OK))


def _relative(p: Path, root: Path) -> str:
    try:
        return str(p.resolve().relative_to(root)) or "."
    except ValueError:
        return str(p.resolve())


def _report_unplaced(probed: object) -> None:
    errors = getattr(probed, "package_errors", ())
    unplaced = [p for p in getattr(probed, "placements", ()) if not p.op]
    if not (errors or unplaced):
        return
    typer.echo("not placed (write these by hand; they are listed at the end of the file):")
    for e in errors:
        typer.echo(f"  {e}")
    for p in unplaced:
        typer.echo(f"  {p.kernel} ({p.kind}): {p.reason}")


def _write_workflows(root: Path, repo: Optional[str], runners: list[str], force: bool) -> None:
    from kcgate.adopt import scaffold

    parsed = [scaffold.parse_runner(r) for r in runners]
    files = scaffold.render_workflows(repo or scaffold.repo_name(root), parsed, scaffold.templates_dir())
    for name, text in files.items():
        target = root / ".github" / "workflows" / name
        scaffold.write_new(target, text, force)
        typer.echo(f"wrote {target}")


def _quick_run(out: Path) -> int:
    """The written file, run once as `kcgate run` would (results in a temporary file); its exit code is
    init's, and each contract that did not pass is named with what its failure says to edit."""
    from kcgate.adopt.scaffold import quick_run_advice
    from kcgate.commands._run_impl import Options, run_command
    from kcgate.results.model import load_run

    typer.echo("quick run:")
    with tempfile.TemporaryDirectory(prefix="kcgate-init-") as tmp:
        results = Path(tmp) / "init.json"
        opts = Options(
            out, results, None, None, None, None, [], False, None, False,
            secrets.randbits(62), "process", None, 0.0, True, keep_results=False,
        )  # fmt: skip
        code = run_command(opts)
        advice = quick_run_advice(load_run(results).cases, str(out)) if results.is_file() else []
    if code != ExitCode.OK:
        typer.echo(
            f"the quick run did not pass (exit {int(code)}): {out} is written and valid; "
            "each contract below is a kernel that breaks its contract, or a draft that says something the "
            "kernel does not do:"
        )
        for line in advice:
            typer.echo(line)
    return code
