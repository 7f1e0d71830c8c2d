"""``kcgate report RESULTS...``: the gate over every runner's results, rendered and published.

Reads downloaded artifacts as untrusted data (never imports repository code, never needs torch),
diffs them against baselines under the policy, writes the PR comment, job summary, JUnit XML, step
outputs and annotations, optionally publishes to the PR, and exits 1 when anything blocks. A
failure to publish is reported, never turned into a different exit code. The implementation is
``kcgate.commands._report_impl``, imported when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kcgate.commands._options import (
    COMMENT_MODES,
    choice_option,
    contracts_option,
    deprecated,
    format_option,
    output_option,
    pick_contracts,
)
from kcgate.commands.diff import pick_format

REPORT_FORMATS = ("console", "github", "json")


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)


def report_command(
    results: list[Path] = typer.Argument(
        ..., metavar="RESULTS", help="Results files or directories of downloaded artifacts."
    ),
    baseline: list[str] = typer.Option(
        [],
        "--baseline",
        help="Baseline results: file, directory or git:REF:PATH (repeatable; default: the project's baselines dir).",
    ),
    contracts: Optional[Path] = contracts_option(
        "contracts.toml for [policy] and waivers (default: contracts.toml found upward, if any)."
    ),
    expect_runner: list[str] = typer.Option(
        [], "--expect-runner", help="A runner that must have results (repeatable); a missing leg blocks."
    ),
    fail_on: str = typer.Option(
        "", "--fail-on", help="Comma-separated categories that block, replacing [policy] block_on."
    ),
    comment_out: Optional[Path] = typer.Option(
        None, "--comment-out", help="Write the PR comment Markdown here."
    ),
    summary_out: Optional[Path] = typer.Option(
        None, "--summary-out", help="Write the job summary Markdown here."
    ),
    junit: Optional[Path] = typer.Option(
        None, "--junit", help="Write JUnit XML here (one test case per case change)."
    ),
    fmt: Optional[str] = format_option(*REPORT_FORMATS, default=None),
    output: Optional[Path] = output_option(),
    annotations: Optional[bool] = typer.Option(
        None,
        "--annotations/--no-annotations",
        hidden=True,
        help="Deprecated: --format github / console.",
    ),
    publish: bool = typer.Option(
        False, "--publish/--no-publish", help="Post to the pull request with GITHUB_TOKEN."
    ),
    comment_mode: str = choice_option(
        "sticky",
        "--comment-mode",
        choices=COMMENT_MODES,
        help="sticky (one comment, edited in place) or off.",
    ),
    check_run: bool = typer.Option(
        False, "--check-run", help="Also create a check run with annotations (needs --publish)."
    ),
    today: str = typer.Option(
        "", "--today", help="Date for waiver expiry, YYYY-MM-DD (default: today, UTC)."
    ),
    note: list[str] = typer.Option(
        [], "--note", help="A line shown under the comment's header (repeatable), e.g. the watchdog's."
    ),
    history: Optional[Path] = typer.Option(
        None,
        "--history",
        metavar="PATH",
        help="A history database (kcgate history add): the comment's charts show the last recorded commits.",
    ),
    gate_name: str = typer.Option(
        "kcgate",
        "--gate-name",
        help="The check run's name, the comment's title and its sticky marker (several gates per repository).",
    ),
) -> None:
    """Gate a PR on every runner's results: exit 1 when a change blocks, 0 when none does, 3 on bad input.

    Format: console, or github (annotations; the default in GitHub Actions), or json (the verdict).

    Examples: kcgate report kcgate-artifacts/ --expect-runner nvidia-h100 --summary-out summary.md;
    kcgate report results/ --baseline git:origin/main:baselines --format json --output verdict.json
    """
    from kcgate.commands._report_impl import Options, report

    if annotations is not None:
        deprecated("--annotations/--no-annotations", "--format github / --format console")
    if fmt is not None:
        annotations = pick_format(fmt, {f: f for f in REPORT_FORMATS}) == "github"
    options = Options(
        tuple(results),
        tuple(baseline),
        pick_contracts(contracts, required=False),
        tuple(expect_runner),
        fail_on,
        comment_out,
        summary_out,
        junit,
        annotations,
        publish,
        comment_mode,
        check_run,
        today,
        tuple(note),
        gate_name,
        history,
        fmt or "",
        output,
    )
    code = report(options)
    if code:
        raise typer.Exit(code)
