"""The docs agree with the code and with each other (issue 43): one statement of the required checks,
getting-started's figures as its script makes them, absolute links in the README (it is the PyPI page),
action.yml's worker rule as the pool's, the paths docs/github.md names, templates that pin no missing ref."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest

from kcgate.execution.pool import AUTO_CASES_PER_WORKER
from tests.conftest import ROOT

REQUIRED = "**Required checks:** `kcgate legs` and `kcgate`"
TEMPLATE_REQUIRED = "# Required checks: kcgate legs"
DOCS = ("README.md", "docs/getting-started.md", "docs/github.md")
TEMPLATES = sorted((ROOT / "docs" / "templates").glob("*.yml"))


@pytest.mark.parametrize("name", DOCS)
def test_one_statement_of_the_required_checks(name: str) -> None:
    text = (ROOT / name).read_text()
    assert REQUIRED in text, f"{name} does not say {REQUIRED!r}"
    assert not re.search(r"kcgate report\*\* checks? required|require[^.]*`kcgate report` job\b(?! )", text)


@pytest.mark.parametrize("name", ["kcgate-run.yml", "kcgate-report.yml"])
def test_the_templates_say_the_same(name: str) -> None:
    assert TEMPLATE_REQUIRED in (ROOT / "docs" / "templates" / name).read_text()


def test_the_readme_links_are_absolute() -> None:
    """PyPI renders README.md without the repository beside it: a relative link would break there."""
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    assert links and [link for link in links if not link.startswith("https://")] == []
    base = "https://github.com/kcgate/kcgate/"
    for link in links:
        if link.startswith(base + "blob/main/") or link.startswith(base + "tree/main/"):
            path = link.split("/main/", 1)[1].split("#")[0]
            assert (ROOT / path).exists(), link


def test_action_yml_states_the_pools_worker_rule() -> None:
    text = (ROOT / "action.yml").read_text()
    assert f"one per {AUTO_CASES_PER_WORKER} cases" in text
    assert re.findall(r"one per ([\d,]+) cases", text) == [str(AUTO_CASES_PER_WORKER)]


def test_docs_github_names_files_that_exist() -> None:
    text = (ROOT / "docs" / "github.md").read_text()
    assert "tests/testing/fake_github.py" in text
    for path in re.findall(r"`((?:tests|kcgate|action|docs)/[\w./-]+\.(?:py|sh|txt|yml|md))`", text):
        assert (ROOT / path).exists(), path


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_templates_carry_no_ignore_that_silences_the_users_zizmor(path) -> None:  # type: ignore[no-untyped-def]
    for line in path.read_text().splitlines():
        if "kcgate/kcgate@" in line:
            assert "zizmor: ignore" not in line, line
            ref = line.split("kcgate/kcgate@", 1)[1].split()[0].rstrip('"')
            assert (
                re.fullmatch(r"[0-9a-f]{40}", ref)
                or "the first release creates" in line
                or "first release" in line
            ), line


@pytest.mark.slow
def test_getting_started_figures_are_what_the_script_makes() -> None:
    """examples/getting-started/figures.py reruns the guide's steps and compares every figure (decimal
    numbers and the machine masked): 12 cases, 3 blocking changes and the cause must be as printed."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "getting-started" / "figures.py")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_readme_cli_table_has_a_row_per_command() -> None:
    """README's CLI table (one Markdown table: a blank line ends it) names every top-level command."""
    import typer

    from kcgate.cli import app

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## The CLI") :]
    table = section[section.index("| command |") :].split("\n\n")[0]
    rows = set(re.findall(r"^\| `kcgate (\w+)", table, re.M))
    commands = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert commands - rows == set(), f"README's CLI table lacks {sorted(commands - rows)}"


_EAGER = ("--install-completion", "--show-completion", "--version", "--help")


def _cli_examples(text: str) -> list[str]:
    """Every ``kcgate ...`` in an inline code span or a code block line (a comment after two spaces cut)."""
    spans = re.findall(r"`(kcgate [^`\n]+)`", text)
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    lines = [ln.split("  #")[0].strip().removeprefix("$ ") for b in blocks for ln in b.splitlines()]
    return spans + [ln for ln in lines if ln.startswith("kcgate ")]


def _parse_failure(example: str) -> str:
    """How kcgate's own parser refuses ``example`` ("" when it parses, or is a template or a mention): an
    unknown option or an extra argument is a broken example; a placeholder value (``--seed S``), a flag
    named on its own (``kcgate run --workers``) or a command named without its arguments is prose."""
    import shlex

    import typer

    from kcgate.cli import app, click

    if any(c in example for c in "[]|…<>{}$") or "..." in example or any(x in example for x in _EAGER):
        return ""  # a usage template, or an option that acts while parsing
    try:
        args = shlex.split(example.rstrip(";,.").rstrip("\\"))[1:]
    except ValueError:
        return ""
    command: Any = typer.main.get_command(app)
    path = []
    while args and getattr(command, "commands", None) and args[0] in command.commands:
        path.append(args.pop(0))
        command = command.commands[path[-1]]
    try:
        command.make_context(" ".join(path) or "kcgate", list(args))
    except click.exceptions.UsageError as exc:
        if isinstance(exc, click.exceptions.NoSuchOption) or "extra argument" in str(exc):
            return f"{type(exc).__name__}: {exc}"
    return ""


@pytest.mark.parametrize("name", ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))])
def test_the_docs_cli_examples_parse_as_written(name: str) -> None:
    """Each ``kcgate ...`` example in the README and docs/ is accepted by kcgate's own parser: no unknown
    option, no extra argument (the README once said ``kcgate runners --json PATH``: exit 3)."""
    path = ROOT / name if name == "README.md" else ROOT / "docs" / name
    broken = [(e, why) for e in _cli_examples(path.read_text()) if (why := _parse_failure(e))]
    assert not broken, broken


def test_the_cli_page_states_the_grammar_and_the_exit_codes() -> None:
    """docs/cli.md names every shared option with its short flag, every old spelling and every exit code."""
    from kcgate.commands._options import DEPRECATED, SHARED
    from kcgate.errors import ExitCode

    text = (ROOT / "docs" / "cli.md").read_text()
    for long, row in SHARED.items():
        assert f"`{row.short}/{long}" in text if row.short else f"`{long}" in text, long
    for old in DEPRECATED:
        assert (f"{old}" if old.startswith("-") else "a positional contracts file") in text, old
    codes = re.findall(r"^\| ([\d, ]+) \|", text[text.index("## Exit codes") :], re.M)
    listed = {int(c) for row in codes for c in row.split(",")}
    assert listed == {int(c) for c in ExitCode}, sorted(listed ^ {int(c) for c in ExitCode})
