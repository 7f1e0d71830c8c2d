"""The CLI's one grammar: each shared option is one row of ``SHARED`` (its spelling, short flag and choices),
built by the helpers below; ``DEPRECATED`` lists the old spellings that still work, hidden, with a warning.

Enumerated values are still checked by kcgate (``pick_format``, ``check_name``, ``check_isolation``), not by
click, so a bad one exits 3 with kcgate's message and fix; ``--help`` and completion show the choices.
tests/commands/test_grammar.py walks every command and fails on a second spelling.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from kcgate.errors import UsageError
from kcgate.vocab.device_kinds import DEVICES
from kcgate.vocab.dtypes import TENSOR_DTYPES
from kcgate.vocab.isolation import ISOLATION_MODES

FORMATS = ("console", "json", "github", "markdown")  # every spelling of --format; a command takes some
COMMENT_MODES = ("sticky", "off")  # report --comment-mode


@dataclass(frozen=True)
class Shared:
    """One shared option: its short flag (or none) and, when enumerated, every value it may take."""

    short: str = ""
    choices: tuple[str, ...] = ()
    meaning: str = ""


SHARED: dict[str, Shared] = {
    "--contracts": Shared(
        "-c", meaning="the contracts file (default: found upward from the current directory)"
    ),
    "--device": Shared("-d", DEVICES, "the device kind the kernels run on"),
    "--format": Shared("", FORMATS, "what the command prints (a command takes some; json everywhere)"),
    "--output": Shared("", meaning="write what --format renders to this file instead of stdout"),
    "--out": Shared("-o", meaning="the file the command creates (results, merged results, contracts.toml)"),
    "--isolation": Shared("", ISOLATION_MODES, "process (each case in a worker) or none"),
    "--comment-mode": Shared("", COMMENT_MODES, "the PR comment: sticky or off"),
    "--dtype": Shared("", TENSOR_DTYPES, "only cases of these dtypes (repeatable)"),
    "--require": Shared("", DEVICES, "a device kind that must be detected"),
    "--summary-out": Shared("", meaning="the job summary's Markdown file"),
    "--junit": Shared("", meaning="a JUnit XML file"),
}

# Old spellings: still accepted (hidden from --help), each with what replaces it.
DEPRECATED: dict[str, str] = {
    "--backend": "--device",
    "--json": "--format json --output PATH",
    "--markdown": "--summary-out PATH",
    "--annotations": "--format github",
    "--no-annotations": "--format console",
    "CONTRACTS": "-c/--contracts PATH",  # a positional contracts file (validate, mutate)
}


def completer(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """A shell-completion callback offering ``choices`` that start with what was typed."""

    def complete(incomplete: str) -> list[str]:
        return [c for c in choices if c.startswith(incomplete)]

    return complete


def choice_metavar(choices: Sequence[str]) -> str:
    return "[" + "|".join(choices) + "]"


def format_option(*choices: str, default: str | None = "console") -> Any:
    """``--format``: the output of a command, one of ``choices`` (a subset of FORMATS, json always among them)."""
    assert set(choices) <= set(FORMATS) and "json" in choices, choices
    return typer.Option(
        default,
        "--format",
        help=f"Output format: {', '.join(choices)}.",
        metavar=choice_metavar(choices),
        autocompletion=completer(choices),
    )


def output_option() -> Any:
    """``--output PATH``: where what ``--format`` renders goes (default: stdout)."""
    return typer.Option(
        None, "--output", metavar="PATH", help="Write what --format renders to this file (default: stdout)."
    )


def contracts_option(help: str = "The contracts file (default: contracts.toml, found upward).") -> Any:
    return typer.Option(None, "--contracts", "-c", metavar="PATH", help=help)


def contracts_argument() -> Any:
    """The deprecated positional contracts file of validate and mutate (hidden; -c/--contracts replaces it)."""
    return typer.Argument(None, metavar="CONTRACTS", hidden=True, help="Deprecated: -c/--contracts PATH.")


def device_option(*names: str, help: str, default: str | None = None) -> Any:
    """``--device``-like options, completed with the device kinds (cpu, cuda, rocm, xpu, mps, npu)."""
    return typer.Option(
        default, *names, help=help, metavar=choice_metavar(DEVICES), autocompletion=completer(DEVICES)
    )


def choice_option(default: Any, *names: str, choices: Sequence[str], help: str, **kw: Any) -> Any:
    """An enumerated option: its choices in ``--help`` and in shell completion."""
    return typer.Option(
        default, *names, help=help, metavar=choice_metavar(choices), autocompletion=completer(choices), **kw
    )


def isolation_option(help: str) -> Any:
    return choice_option("process", "--isolation", choices=ISOLATION_MODES, help=help)


def deprecated(old: str, new: str) -> None:
    """A deprecated spelling still works; stderr says what replaces it (stdout stays machine-readable)."""
    typer.echo(f"warning: {old} is deprecated; use {new}", err=True)


def emit(text: str, output: Path | None) -> None:
    """What --format rendered: to ``output`` (written atomically) or to stdout."""
    if output is None:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    from kcgate.results.model import write_atomic

    write_atomic(output, text if text.endswith("\n") else text + "\n")


def contracts_file(option: Path | None, positional: Path | None = None) -> Path:
    """``pick_contracts`` where a contracts file is required (run, validate, mutate)."""
    path = pick_contracts(option, positional)
    assert path is not None  # required: pick_contracts raised otherwise
    return path


def pick_contracts(
    option: Path | None, positional: Path | None = None, *, required: bool = True
) -> Path | None:
    """The contracts file a command uses: -c/--contracts, the deprecated positional, or the one found upward
    (``contracts.find``; stderr names it when it is not ./contracts.toml). None when not ``required`` and
    none is found; a ContractsError (exit 2) when required."""
    from kcgate.contracts.find import find_contracts, not_found

    if positional is not None:
        deprecated("a positional contracts file", "-c/--contracts PATH")
        if option is not None and option != positional:
            raise UsageError(
                f"two contracts files, {positional} and -c {option}; give one, with -c/--contracts"
            )
        return positional
    if option is not None:
        return option
    found = find_contracts(Path.cwd())
    if found is None:
        if required:
            raise not_found(Path.cwd())
        return None
    if found.note:
        typer.echo(f"kcgate: using {found.path} ({found.note})", err=True)
    return found.path
