"""`kcgate init PACKAGE...`: a first contracts.toml in one command (probe, write, validate, quick run)."""

from __future__ import annotations

import json
import secrets
import tempfile
from pathlib import Path
from typing import Any, Optional

import typer

from kcgate.commands._options import (
    QUIET,
    contracts_option,
    emit,
    format_option,
    note,
    out_alias,
    output_option,
    renamed,
    verbosity,
    warn_misread,
)
from kcgate.commands.diff import pick_format
from kcgate.errors import ExitCode

DEFAULT_RUNNERS = ("cpu-ubuntu=ubuntu-latest",)


def register(app: typer.Typer) -> None:
    app.command("init")(init)


def init(
    packages: list[str] = typer.Argument(
        ..., metavar="PACKAGES", help="Importable packages or modules holding the kernels."
    ),
    contracts: Optional[Path] = contracts_option("The contracts file to write (default: contracts.toml)."),
    out: Optional[Path] = out_alias("-c/--contracts PATH"),
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
    fmt: str = format_option("console", "json"),
    output: Optional[Path] = output_option(),
) -> None:
    """Find kernels in PACKAGES, write a commented contracts.toml, validate it and run it once (exit 0 when the
    quick run passes, 1 when it finds violations, as `kcgate run`).

    --format json: the log goes to stderr, and stdout gets what was written and the quick run's exit code.

    Examples: kcgate init mykernels; kcgate init mykernels --github --runner nvidia-h100=self-hosted,nvidia
    """
    pick_format(fmt, {"console": 0, "json": 1})
    say = _Say(fmt, output)
    warn_misread(output, ".toml", "-c/--contracts")
    written = renamed(contracts, out, "--out", "-c/--contracts PATH") or Path("contracts.toml")
    code = _init(packages, written, force, path, run, github, repo, runner, say)
    say.finish(code)
    raise typer.Exit(int(code))


class _Say:
    """init's log: stdout (console), or stderr with a JSON summary on stdout or in --output (json)."""

    def __init__(self, fmt: str, output: Optional[Path]) -> None:
        self.fmt, self.output = fmt, output
        self.lines: list[str] = []
        self.ran = False  # the quick run ran
        self.doc: dict[str, Any] = {"kind": "kcgate-init", "contracts": [], "unplaced": [], "workflows": []}

    def __call__(self, line: str, err: bool = False) -> None:
        if self.fmt == "json" or err:
            typer.echo(line, err=True)
        elif self.output is not None or verbosity() == QUIET:
            self.lines.append(line)
        else:
            typer.echo(line)

    def finish(self, code: int) -> None:
        if self.fmt == "json":
            emit(json.dumps({**self.doc, "exit_code": int(code)}, indent=2, sort_keys=True), self.output)
        elif self.output is not None or verbosity() == QUIET:
            emit("\n".join(self.lines), self.output, verdict=self.verdict(code))

    def verdict(self, code: int) -> str:
        """init's verdict line (all -q/--quiet prints): what was written and how the quick run ended."""
        if "file" not in self.doc:
            return f"kcgate init: nothing written (exit {int(code)})"
        n = len(self.doc["contracts"])
        head = f"kcgate init: wrote {self.doc['file']}: {n} contract{'s' * (n != 1)}"
        if not self.ran:
            return head
        return head + (
            "; the quick run passed" if code == ExitCode.OK else f"; the quick run exit {int(code)}"
        )


def _init(
    packages: list[str],
    out: Path,
    force: bool,
    path: Optional[list[Path]],
    run: bool,
    github: bool,
    repo: Optional[str],
    runner: Optional[list[str]],
    say: _Say,
) -> int:
    from kcgate.adopt import scaffold
    from kcgate.contracts.load import load_project

    root = out.resolve().parent
    if repo is not None:
        scaffold.check_repo(repo)  # before anything is written: it goes into the workflow files
    if out.exists() and not force:
        scaffold.write_new(out, "", force)  # raises: never overwrite without --force
    paths = list(path) if path else [p for p in (root, root / "src") if p.is_dir()]
    note(f"probing {', '.join(packages)} (in a worker process) ...")
    probed = scaffold.probe(packages, paths)
    rel = [_relative(p, root) for p in paths]
    text = scaffold.render_contracts(probed, packages, root.name, rel, scaffold.features())
    placed = [p for p in probed.placements if p.op]
    if not placed:
        _report_unplaced(probed, say)
        say("no kernel could be placed in an op family; nothing written", err=True)
        return ExitCode.NOTHING_SELECTED
    scaffold.write_new(out, text, force)
    say.doc["file"] = str(out)
    say(f"wrote {out}: {len(placed)} contract{'s' * (len(placed) != 1)}")
    for p in placed:
        extra = f" — {p.note}" if p.note else ""
        say(f"  {p.kernel} -> {p.op} ({', '.join(p.dtypes)}; by {p.by}){extra}")
        say.doc["contracts"].append({"kernel": p.kernel, "op": p.op, "dtypes": list(p.dtypes), "by": p.by})
    _report_unplaced(probed, say)
    load_project(out)  # validate: a ContractsError exits 2 with every problem
    say(f"validate: {out} OK")
    if github:
        _write_workflows(root, repo, runner or list(DEFAULT_RUNNERS), force, say)
    return _quick_run(out, say) if run else ExitCode.OK


def _relative(p: Path, root: Path) -> str:
    try:
        return str(p.resolve().relative_to(root)) or "."
    except ValueError:
        return str(p.resolve())


def _report_unplaced(probed: object, say: _Say) -> None:
    errors = getattr(probed, "package_errors", ())
    unplaced = [p for p in getattr(probed, "placements", ()) if not p.op]
    if not (errors or unplaced):
        return
    say("not placed (write these by hand; they are listed at the end of the file):")
    for e in errors:
        say(f"  {e}")
        say.doc["unplaced"].append({"kernel": "", "reason": str(e)})
    for p in unplaced:
        say(f"  {p.kernel} ({p.kind}): {p.reason}")
        say.doc["unplaced"].append({"kernel": p.kernel, "reason": p.reason})


def _write_workflows(root: Path, repo: Optional[str], runners: list[str], force: bool, say: _Say) -> None:
    from kcgate.adopt import scaffold

    parsed = [scaffold.parse_runner(r) for r in runners]
    action, why = scaffold.action_ref(scaffold.installed_direct_url())
    if why:
        say(f"warning: {why}; the workflows keep the release tag", err=True)
    files = scaffold.render_workflows(
        repo or scaffold.repo_name(root), parsed, scaffold.templates_dir(), action
    )
    for name, text in files.items():
        target = root / ".github" / "workflows" / name
        scaffold.write_new(target, text, force)
        say(f"wrote {target}")
        say.doc["workflows"].append(str(target))
    if action:
        say(f"uses: {action} (the commit this kcgate was installed from)")
    else:
        say("uses: kcgate/kcgate@v0.1.0, the tag the first release creates: until then pin a commit SHA")


def _quick_run(out: Path, say: _Say) -> int:
    """The written file, run once as `kcgate run` would (results in a temporary file); its exit code is
    init's, and each contract that did not pass is named with what its failure says to edit."""
    from kcgate.adopt.scaffold import quick_run_advice
    from kcgate.commands._run_impl import Options, run_command
    from kcgate.results.model import load_run

    say("quick run:")
    say.ran = True
    with tempfile.TemporaryDirectory(prefix="kcgate-init-") as tmp:
        results = Path(tmp) / "init.json"
        table = None if say.fmt == "console" and say.output is None else Path(tmp) / "table.txt"
        opts = Options(
            out, results, None, None, None, None, [], False, None, False,
            secrets.randbits(62), "process", None, 0.0, QUIET, keep_results=False, output=table,
        )  # fmt: skip
        code = run_command(opts)
        advice = quick_run_advice(load_run(results).cases, str(out)) if results.is_file() else []
        if table is not None and table.is_file():
            for line in table.read_text(encoding="utf-8").splitlines():
                say(line)
    if code != ExitCode.OK:
        say(
            f"the quick run did not pass (exit {int(code)}): {out} is written and valid; "
            "each contract below is a kernel that breaks its contract, or a draft that says something the "
            "kernel does not do:"
        )
        for line in advice:
            say(line)
    return code
