"""`kcgate mutate`: how strong are the contracts? Plant realistic bugs in the repository's own kernels (AST
mutation rules) and count how many the contracts catch.

A report, not a gate: exit 0 whatever the kill rate (3 on bad usage, 2 on a bad contracts file). It prints
the report in ``--format`` (console, json or markdown; ``--output`` writes it to a file), and the Markdown
for a job summary with ``--summary-out``.
Mutants run in isolated workers (a crashing or hanging mutant costs one case); torch is imported by the
workers, and by this process only to measure advice for survivors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from kcgate.commands._options import (
    choice_option,
    contracts_file,
    deprecated,
    device_option,
    emit,
    format_option,
    isolation_option,
    output_option,
)
from kcgate.commands.diff import pick_format
from kcgate.errors import UsageError
from kcgate.vocab.mutation_rules import BY_NAME, RULES

DEFAULT_CACHE = Path(".kcgate-cache")


def register(app: typer.Typer) -> None:
    app.command("mutate")(mutate)


def mutate(
    contracts: Optional[list[Path]] = typer.Option(
        None,
        "--contracts",
        "-c",
        metavar="PATH",
        help="A contracts file (repeatable; default: contracts.toml, found upward).",
    ),
    fmt: str = format_option("console", "json", "markdown"),
    output: Optional[Path] = output_option(),
    summary_out: Optional[Path] = typer.Option(
        None, "--summary-out", metavar="PATH", help="Also write the report as Markdown here (a job summary)."
    ),
    budget: Optional[float] = typer.Option(
        None,
        "--budget",
        help="Seconds to spend; mutants are run in a seeded random order until it is spent (a sample).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seeds the cases and the order mutants are sampled in."),
    max_mutants: Optional[int] = typer.Option(None, "--max-mutants", help="Run at most this many mutants."),
    rule: Optional[list[str]] = choice_option(
        None, "--rule", choices=tuple(BY_NAME), help="Only this rule (repeatable)."
    ),
    keyword: Optional[str] = typer.Option(None, "-k", help="Only contracts whose id or class matches."),
    cache: Path = typer.Option(DEFAULT_CACHE, "--cache", help="Directory of the cache (mutate.json)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the cache."),
    json_path: Optional[Path] = typer.Option(
        None, "--json", hidden=True, help="Deprecated: --format json --output PATH."
    ),
    markdown_path: Optional[Path] = typer.Option(
        None, "--markdown", hidden=True, help="Deprecated: --summary-out."
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
    device: str = device_option("--device", "-d", help="The device the mutants run on.", default="cpu"),
    backend: Optional[str] = typer.Option(None, "--backend", hidden=True, help="Deprecated: --device."),
    isolation: str = isolation_option("process (default: a crashing mutant costs one case) or none."),
    timeout: Optional[float] = typer.Option(
        None,
        "--timeout",
        help="Per-case timeout in seconds (default: the contract's); a hang costs one case.",
    ),
    positional: Optional[list[Path]] = typer.Argument(
        None, metavar="CONTRACTS", hidden=True, help="Deprecated: -c/--contracts PATH."
    ),
) -> None:
    """Mutate each contract's kernel source and report which planted bugs the contracts let through.

    Examples: kcgate mutate --budget 600; kcgate mutate -c contracts.toml --rule tail-dropped -k softmax;
    kcgate mutate --format json --output mutate.json --summary-out mutate.md
    """
    from kcgate.calibration import mutate as mut
    from kcgate.contracts.load import load_project
    from kcgate.execution.executors import check_isolation
    from kcgate.execution.pool import make_executor
    from kcgate.render import mutation as render
    from kcgate.results.model import write_atomic

    check_isolation(isolation)
    pick_format(fmt, {"console": 0, "json": 1, "markdown": 2})
    if backend is not None:
        deprecated("--backend", "--device")
        device = backend
    if json_path:
        deprecated("--json PATH", "--format json --output PATH")
    if markdown_path:
        deprecated("--markdown PATH", "--summary-out PATH")
    if budget is not None and budget <= 0:
        raise UsageError(f"--budget {budget:g}: give a positive number of seconds")
    if max_mutants is not None and max_mutants < 0:
        raise UsageError(f"--max-mutants {max_mutants}: give 0 or more")
    unknown = [r for r in rule or [] if r not in BY_NAME]
    if unknown:
        raise UsageError(f"--rule {', '.join(unknown)}: unknown; the rules are {', '.join(BY_NAME)}")
    rules = tuple(BY_NAME[r] for r in rule) if rule else RULES
    if positional:
        deprecated("a positional contracts file", "-c/--contracts PATH")
    paths = [*(contracts or []), *(positional or [])] or [contracts_file(None)]
    projects = [load_project(p) for p in paths]
    report = mut.mutate(
        projects,
        lambda project: make_executor(isolation, project, device, timeout=timeout),
        keyword=keyword,
        rules=rules,
        seed=seed,
        budget_s=budget,
        cache_dir=None if no_cache else cache,
        advice=advice,
        advise_all=advise_all,
        max_mutants=max_mutants,
        installed=include_installed,
    )
    if not report.contracts:
        raise UsageError(f"no contract selected: -k {keyword!r} matched none in {', '.join(map(str, paths))}")
    doc = report.to_json()
    as_json = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    text = {"console": render.text(doc), "json": as_json, "markdown": render.markdown(doc)}[fmt]
    emit(text, output, verdict=render.headline(doc) if fmt == "console" else None)
    if json_path:
        write_atomic(json_path, as_json)
    for path in (summary_out, markdown_path):
        if path:
            write_atomic(path, render.markdown(doc))
