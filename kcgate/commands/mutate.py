"""`kcgate mutate`: how strong are the contracts? Plant realistic bugs in the repository's own kernels (AST
mutation rules) and count how many the contracts catch.

A report, not a gate: exit 0 whatever the kill rate (3 on bad usage, 2 on a bad contracts file). It prints
the summary, and writes the JSON and Markdown reports when asked (the Markdown fits a job summary).
Mutants run in isolated workers (a crashing or hanging mutant costs one case); torch is imported by the
workers, and by this process only to measure advice for survivors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from kcgate.errors import UsageError

DEFAULT_CACHE = Path(".kcgate-cache")


def register(app: typer.Typer) -> None:
    app.command("mutate")(mutate)


def mutate(
    contracts: Optional[list[Path]] = typer.Argument(
        None, help="contracts.toml files (default: ./contracts.toml)."
    ),
    budget: Optional[float] = typer.Option(
        None,
        "--budget",
        help="Seconds to spend; mutants are run in a seeded random order until it is spent (a sample).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seeds the cases and the order mutants are sampled in."),
    max_mutants: Optional[int] = typer.Option(None, "--max-mutants", help="Run at most this many mutants."),
    rule: Optional[list[str]] = typer.Option(None, "--rule", help="Only this rule (repeatable)."),
    keyword: Optional[str] = typer.Option(None, "-k", help="Only contracts whose id or class matches."),
    cache: Path = typer.Option(DEFAULT_CACHE, "--cache", help="Directory of the cache (mutate.json)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the cache."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the report as JSON here."),
    markdown_path: Optional[Path] = typer.Option(
        None, "--markdown", help="Write the report as Markdown here."
    ),
    advice: bool = typer.Option(True, "--advice/--no-advice", help="Measure what would kill each survivor."),
    advise_all: bool = typer.Option(
        False,
        "--advise-all",
        help="Also measure advice for mutants within rounding and equivalent ones (a tail block the "
        "contract's shapes never reach); an equivalent one told apart is reported as a survivor. Costs minutes.",
    ),
    include_installed: bool = typer.Option(
        False,
        "--include-installed",
        help="Also mutate kernels in installed packages (default: only the project's own modules).",
    ),
    backend: str = typer.Option("cpu", "--backend", help="Device backend the mutants run on."),
    isolation: str = typer.Option(
        "process", "--isolation", help="process (default: a crashing mutant costs one case) or none."
    ),
    timeout: Optional[float] = typer.Option(
        None,
        "--timeout",
        help="Per-case timeout in seconds (default: the contract's); a hang costs one case.",
    ),
) -> None:
    """Mutate each contract's kernel source and report which planted bugs the contracts let through."""
    from kcgate.calibration import mutate as mut
    from kcgate.contracts.load import load_project
    from kcgate.execution.executors import check_isolation
    from kcgate.execution.pool import make_executor
    from kcgate.render import mutation as render
    from kcgate.results.model import write_atomic
    from kcgate.vocab.mutation_rules import BY_NAME, RULES

    check_isolation(isolation)
    if budget is not None and budget <= 0:
        raise UsageError(f"--budget {budget:g}: give a positive number of seconds")
    if max_mutants is not None and max_mutants < 0:
        raise UsageError(f"--max-mutants {max_mutants}: give 0 or more")
    unknown = [r for r in rule or [] if r not in BY_NAME]
    if unknown:
        raise UsageError(f"--rule {', '.join(unknown)}: unknown; the rules are {', '.join(BY_NAME)}")
    rules = tuple(BY_NAME[r] for r in rule) if rule else RULES
    paths = contracts or [Path("contracts.toml")]
    projects = [load_project(p) for p in paths]
    report = mut.mutate(
        projects,
        lambda project: make_executor(isolation, project, backend, timeout=timeout),
        keyword=keyword,
        rules=rules,
        seed=seed,
        budget_s=budget,
        cache_dir=None if no_cache else cache,
        advice=advice,
        advise_all=advise_all,
        device=backend,
        max_mutants=max_mutants,
        installed=include_installed,
    )
    if not report.contracts:
        raise UsageError(f"no contract selected: -k {keyword!r} matched none in {', '.join(map(str, paths))}")
    doc = report.to_json()
    typer.echo(render.text(doc))
    if json_path:
        write_atomic(json_path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if markdown_path:
        write_atomic(markdown_path, render.markdown(doc))
