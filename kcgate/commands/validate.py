"""`kcgate validate` and `kcgate schema`: check a contracts file, print JSON Schemas. No torch.

``validate --format github`` prints one workflow annotation per problem, at its line, so a contracts error
shows on the pull request's diff; ``--format json`` prints one object with every problem. Both exit 2 on
problems, as the console format does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import typer

from kcgate.commands._options import format_option
from kcgate.commands.diff import pick_format
from kcgate.errors import ContractsError, ExitCode, Problem, UsageError

VALIDATE_FORMATS = ("console", "json", "github")


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("schema")(schema)


def validate(
    contracts: Path = typer.Argument(Path("contracts.toml"), help="Contracts file to check."),
    fmt: str = format_option(*VALIDATE_FORMATS),
    op: str = typer.Option(
        "", "--op", help="Say which classes apply to this op family, and why (no file read)."
    ),
) -> None:
    """Check contracts.toml without running anything (exit 2 and every problem listed when invalid)."""
    if op:
        _classes_for(op)
        return
    from kcgate.contracts.load import load_project

    render = pick_format(fmt, {f: f for f in VALIDATE_FORMATS})
    if render == "console":
        _console(load_project(contracts), contracts)
        return
    try:
        project = load_project(contracts)
    except ContractsError as exc:
        problems = exc.problems or (Problem(str(contracts), None, "", exc.message),)
        typer.echo(_machine(render, contracts, problems, (), None), nl=False)
        raise typer.Exit(int(ExitCode.BAD_CONTRACTS)) from None
    counts = (len(project.contracts), len(project.policy.waivers))
    typer.echo(_machine(render, contracts, (), project.warnings, counts), nl=False)


def _console(project, contracts: Path) -> None:  # type: ignore[no-untyped-def]
    for warning in project.warnings:
        typer.echo(f"warning: {warning.render()}", err=True)
    typer.echo(_ok_line(contracts, len(project.contracts), len(project.policy.waivers)))


def _machine(
    fmt: str,
    contracts: Path,
    problems: Sequence[Problem],
    warnings: Sequence[Problem],
    counts: tuple[int, int] | None,
) -> str:
    """The json document, or the github annotations (one per problem and warning, errors first)."""
    if fmt == "json":
        doc = {
            "kind": "kcgate-validate",
            "file": str(contracts),
            "ok": not problems,
            "contracts": counts[0] if counts else None,
            "waivers": counts[1] if counts else None,
            "problems": [_problem_json(p) for p in problems],
            "warnings": [_problem_json(p) for p in warnings],
        }
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"
    from kcgate.render.annotations import Annotation, render_workflow_commands

    def note(level: str, p: Problem) -> Annotation:
        text = f"{p.where}: {p.message}" if p.where else p.message
        return Annotation(
            level, p.file, p.line, "kcgate validate", f"{text} (fix: {p.fix})" if p.fix else text
        )

    out = render_workflow_commands(
        [note("error", p) for p in problems] + [note("warning", w) for w in warnings]
    )
    if counts:
        out += _ok_line(contracts, *counts) + "\n"
    return out


def _ok_line(contracts: Path, n: int, waivers: int) -> str:
    return f"{contracts}: OK: {n} contract{'s' * (n != 1)}, {waivers} waiver{'s' * (waivers != 1)}"


def _problem_json(p: Problem) -> dict[str, object]:
    return {"file": p.file, "line": p.line, "where": p.where, "message": p.message, "fix": p.fix}


def _classes_for(op: str) -> None:
    """Each class, whether it applies to ``op`` and why (the catalogue traits, kcgate.vocab.classes)."""
    from kcgate.vocab.catalogue import CATALOGUE
    from kcgate.vocab.classes import CLASSES, PLAIN, suggest, why

    if op not in CATALOGUE:
        raise UsageError(f"unknown op {op!r}; {suggest(op, list(CATALOGUE))}")
    for cid, c in CLASSES.items():
        plain = " (plain correctness)" if cid == PLAIN else ""
        typer.echo(f"{cid}  {c.name}{plain}: {why(cid, op)}")


def schema(
    kind: str = typer.Argument("contracts", help="contracts (the TOML file) or results (the JSON file)."),
) -> None:
    """Print a JSON Schema: of contracts.toml (for editors) or of results files."""
    from kcgate.render import schema as schemas

    makers = {"contracts": schemas.contracts_schema, "results": schemas.results_schema}
    if kind not in makers:
        raise UsageError(f"unknown schema {kind!r}; choose one of: {', '.join(makers)}")
    typer.echo(json.dumps(makers[kind](), indent=2, sort_keys=True))
