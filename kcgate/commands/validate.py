"""`kcgate validate` and `kcgate schema`: check a contracts file, print JSON Schemas. No torch."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kcgate.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("schema")(schema)


def validate(
    contracts: Path = typer.Argument(Path("contracts.toml"), help="Contracts file to check."),
    op: str = typer.Option(
        "", "--op", help="Say which classes apply to this op family, and why (no file read)."
    ),
) -> None:
    """Check contracts.toml without running anything (exit 2 and every problem listed when invalid)."""
    if op:
        _classes_for(op)
        return
    from kcgate.contracts.spec import load_project

    project = load_project(contracts)
    for warning in project.warnings:
        typer.echo(f"warning: {warning.render()}", err=True)
    n = len(project.contracts)
    waivers = len(project.policy.waivers)
    typer.echo(f"{contracts}: OK: {n} contract{'s' * (n != 1)}, {waivers} waiver{'s' * (waivers != 1)}")


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
