"""Options several commands share, spelled once: ``--format`` on every command that reports, and the
completion choices of the enumerated options (``--device``, ``--isolation``, ``--format``).

The values are still checked by kcgate (``pick_format``, ``check_name``, ``check_isolation``), not by click,
so a bad one exits 3 with kcgate's message and fix, as before; completion and ``--help`` show the choices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import typer

from kcgate.vocab.device_kinds import DEVICES
from kcgate.vocab.isolation import ISOLATION_MODES

FORMATS = ("console", "json", "github", "markdown")  # every spelling of --format; a command takes some


def completer(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """A shell-completion callback offering ``choices`` that start with what was typed."""

    def complete(incomplete: str) -> list[str]:
        return [c for c in choices if c.startswith(incomplete)]

    return complete


def format_option(*choices: str, default: str | None = "console") -> Any:
    """``--format``: the output of a reporting command, one of ``choices`` (a subset of FORMATS)."""
    assert set(choices) <= set(FORMATS), choices
    return typer.Option(
        default,
        "--format",
        help=f"Output format: {', '.join(choices)}.",
        metavar="[" + "|".join(choices) + "]",
        autocompletion=completer(choices),
    )


def device_option(*names: str, help: str) -> Any:
    """``--device``-like options, completed with the device kinds (cpu, cuda, rocm, xpu, mps, npu)."""
    return typer.Option(
        None, *names, help=help, metavar="[" + "|".join(DEVICES) + "]", autocompletion=completer(DEVICES)
    )


def isolation_option(help: str) -> Any:
    return typer.Option(
        "process",
        "--isolation",
        help=help,
        metavar="[process|none]",
        autocompletion=completer(ISOLATION_MODES),
    )


def deprecated(old: str, new: str) -> None:
    """A deprecated spelling still works; stderr says what replaces it (stdout stays machine-readable)."""
    typer.echo(f"warning: {old} is deprecated; use {new}", err=True)
