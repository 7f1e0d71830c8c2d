"""`kcgate validate` and `kcgate schema`: check a contracts file, print JSON Schemas. No torch.

``validate --format github`` prints one workflow annotation per problem, at its line, so a contracts error
shows on the pull request's diff; ``--format json`` prints one object with every problem. Both exit 2 on
problems, as the console format does. A kernel in a package not installed here is a warning (the pre-commit
hook's environment has no torch), an error with ``--strict-imports``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import typer

from kcgate.commands._options import (
    choice_option,
    contracts_argument,
    contracts_file,
    contracts_option,
    emit,
    format_option,
    output_option,
)
from kcgate.commands.diff import pick_format
from kcgate.errors import ContractsError, ExitCode, Problem, UsageError
from kcgate.render.escape import console_text
from kcgate.vocab.catalogue import CATALOGUE

VALIDATE_FORMATS = ("console", "json", "github")


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("schema")(schema)


def validate(
    contracts: Optional[Path] = contracts_option(
        "The contracts file to check (default: contracts.toml, found upward)."
    ),
    fmt: str = format_option(*VALIDATE_FORMATS),
    output: Optional[Path] = output_option(),
    strict_imports: bool = typer.Option(
        False,
        "--strict-imports",
        help="A kernel in a package not installed here is an error (default: a warning, so a torch-free "
        "environment such as the pre-commit hook's checks everything else).",
    ),
    op: str = choice_option(
        "",
        "--op",
        choices=tuple(CATALOGUE),
        help="Say which classes apply to this op family, and why (no file read).",
    ),
    positional: Optional[Path] = contracts_argument(),
) -> None:
    """Check contracts.toml without running anything (exit 2 and every problem listed when invalid).

    Examples: kcgate validate; kcgate validate -c ci/contracts.toml --format github; kcgate validate --op matmul
    """
    if op:
        _classes_for(op)
        return
    from kcgate.contracts.load import load_project

    render = pick_format(fmt, {f: f for f in VALIDATE_FORMATS})
    path = contracts_file(contracts, positional)
    if render == "console":
        _console(load_project(path, strict_imports=strict_imports), path, output)
        return
    try:
        project = load_project(path, strict_imports=strict_imports)
    except ContractsError as exc:
        problems = exc.problems or (Problem(str(path), None, "", exc.message),)
        emit(_machine(render, path, problems, (), None), output)
        raise typer.Exit(int(ExitCode.BAD_CONTRACTS)) from None
    counts = (len(project.contracts), len(project.policy.waivers))
    emit(_machine(render, path, (), project.warnings, counts), output)


def _console(project, contracts: Path, output: Path | None) -> None:  # type: ignore[no-untyped-def]
    for warning in project.warnings:
        typer.echo(f"warning: {warning.render()}", err=True)
    line = _ok_line(contracts, len(project.contracts), len(project.policy.waivers))
    each = [
        console_text(f"  {c.id}: {c.klass} {c.op} {c.kernel} ({', '.join(c.dtypes)})")
        for c in project.contracts
    ]
    emit(line, output, detail="\n".join([line, *each]))  # -v: each contract, its class, op, kernel and dtypes


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
    from kcgate.vocab.classes import CLASSES, PLAIN, suggest, why

    if op not in CATALOGUE:
        raise UsageError(f"unknown op {op!r}; {suggest(op, list(CATALOGUE))}")
    for cid, c in CLASSES.items():
        plain = " (plain correctness)" if cid == PLAIN else ""
        typer.echo(f"{cid}  {c.name}{plain}: {why(cid, op)}")


SCHEMAS = ("contracts", "results")


def schema(
    kind: str = typer.Argument(
        "contracts",
        metavar="[contracts|results]",
        help="contracts (the TOML file) or results (the JSON file).",
    ),
    fmt: str = format_option("json", default="json"),
    output: Optional[Path] = output_option(),
) -> None:
    """Print a JSON Schema: of contracts.toml (for editors) or of results files.

    Examples: kcgate schema > contracts.schema.json; kcgate schema results --output results.schema.json
    """
    from kcgate.render import schema as schemas

    pick_format(fmt, {"json": 0})
    makers = {"contracts": schemas.contracts_schema, "results": schemas.results_schema}
    if kind not in makers:
        raise UsageError(f"unknown schema {kind!r}; choose one of: {', '.join(makers)}")
    emit(json.dumps(makers[kind](), indent=2, sort_keys=True), output)
