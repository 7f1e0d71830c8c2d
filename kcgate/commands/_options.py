"""The CLI's one grammar: each shared option is one row of ``SHARED`` (its spelling, short flag and choices),
built by the helpers below; ``DEPRECATED`` lists the old spellings that still work, hidden, with a warning.
``-q/--quiet`` and ``-v/--verbose`` are rows too: ``kcgate.cli`` gives every command both (``VERBOSITY``), and
a command reads the level with ``verbosity()``, prints through ``emit`` and its stderr notes through ``note``.

Enumerated values are still checked by kcgate (``pick_format``, ``check_name``, ``check_isolation``), not by
click, so a bad one exits 3 with kcgate's message and fix; ``--help`` and completion show the choices.
tests/commands/test_grammar.py walks every command and fails on a second spelling.
"""

from __future__ import annotations

import copy
import functools
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
import typer.core

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
    "--output": Shared(
        "-o", meaning="write the rendered report (what --format renders) to this file, not stdout"
    ),
    "--results": Shared("", meaning="the results file the command writes (run, merge)"),
    "--quiet": Shared("-q", meaning="only errors, warnings and the verdict line"),
    "--verbose": Shared("-v", meaning="more detail, where the command has any"),
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
    "--out": "--results PATH (run, merge), -c/--contracts PATH (init), --dir DIR (baseline fetch)",
}

# -q/--quiet and -v/--verbose: what each level prints (docs/cli.md#quiet-and-verbose says the same).
QUIET, NORMAL, VERBOSE = -1, 0, 1
VERBOSITY = {"--quiet": QUIET, "--verbose": VERBOSE}
_LEVEL = "kcgate.verbosity"  # the key in click's context meta (shared by a command and its group)


def typers_click() -> Any:
    """The click that typer itself runs on: typer >= 0.24 vendors it as ``typer._click`` (a standalone
    ``click`` installed beside it is another copy, whose exceptions typer never raises); older typer
    imports the standalone ``click`` as ``typer.core.click``. Never prefer a standalone click."""
    core: Any = typer.core
    return getattr(core, "_click", None) or core.click


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
    """``-o/--output PATH``: where the rendered report (what ``--format`` renders) goes (default: stdout)."""
    return typer.Option(
        None,
        "--output",
        "-o",
        metavar="PATH",
        help="Write the rendered report (what --format renders) to this file (default: stdout).",
    )


def results_option(help: str, required: bool = False) -> Any:
    """``--results PATH``: the results file a command writes (never ``-o``: that is ``--output``)."""
    return typer.Option(... if required else None, "--results", metavar="PATH", help=help)


def out_alias(replacement: str) -> Any:
    """The old ``--out`` spelling (``-o`` is ``--output`` now): hidden, and ``renamed`` warns when it is used."""
    return typer.Option(None, "--out", metavar="PATH", hidden=True, help=f"Deprecated: {replacement}.")


def renamed(new: Any, old: Any, old_name: str, new_name: str) -> Any:
    """The value of an option that has a deprecated old spelling: the new one, else the old one (with one
    deprecation line on stderr); both, with different values, is bad usage (exit 3)."""
    if old is None:
        return new
    deprecated(old_name, new_name)
    if new is not None and new != old:
        raise UsageError(f"{old_name} {old} and {new_name.split()[0]} {new}: give one, {new_name}")
    return old


def warn_misread(output: Path | None, suffix: str, meant: str) -> None:
    """``-o`` named the written file before it meant ``--output``: an ``-o x.json`` from an old workflow now
    gets the rendered report, so stderr says where the file it meant goes now."""
    if output is not None and output.suffix == suffix:
        typer.echo(
            f"warning: -o/--output {output} gets the rendered report; {meant} names the {suffix} file "
            "(-o was its short form before kcgate 0.2)",
            err=True,
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


def verbosity() -> int:
    """QUIET, NORMAL or VERBOSE: what -q/--quiet and -v/--verbose asked of the command running now."""
    click = typers_click()  # typer's own click exports get_current_context from .globals only
    current = getattr(click, "get_current_context", None)
    current = current or importlib.import_module(f"{click.__name__}.globals").get_current_context
    ctx = current(silent=True)
    return int(ctx.meta.get(_LEVEL, NORMAL)) if ctx is not None else NORMAL


def set_verbosity(meta: dict[str, Any], flag: str, on: bool) -> None:
    """The callback of -q/--quiet and -v/--verbose (kcgate.cli): record the level; both at once is bad usage."""
    if not on:
        return
    level = VERBOSITY[flag]
    if meta.get(_LEVEL, NORMAL) not in (NORMAL, level):
        raise UsageError("-q/--quiet and -v/--verbose together: give one")
    meta[_LEVEL] = level


def verbosity_params() -> list[Any]:
    """Fresh click parameters for -q/--quiet and -v/--verbose, from their rows of ``SHARED``, that set the
    level and pass no value to the command (kcgate.cli adds them to every command): copies of one pair."""
    return [copy.copy(p) for p in _verbosity_pair()]


@functools.cache
def _verbosity_pair() -> tuple[Any, ...]:
    """Built through typer once, as every other option is: typer >= 0.24's own click has no public
    ``Option`` class."""
    probe = typer.Typer(add_completion=False)

    def level(flag: str) -> Callable[[typer.Context, bool], None]:
        def on_flag(ctx: typer.Context, on: bool) -> None:  # annotated: every typer finds ctx by its type
            set_verbosity(ctx.meta, flag, on)

        return on_flag

    def options(
        quiet: bool = _flag("--quiet", level("--quiet")),
        verbose: bool = _flag("--verbose", level("--verbose")),
    ) -> None:
        """Never run: only its parameters are taken."""

    probe.command()(options)
    return tuple(typer.main.get_command(probe).params)


def _flag(flag: str, callback: Callable[..., None]) -> Any:
    row = SHARED[flag]
    return typer.Option(
        False, flag, row.short, callback=callback, expose_value=False, help=row.meaning.capitalize() + "."
    )


def note(line: str) -> None:
    """An informational line on stderr (which file was used, what was skipped): not under -q/--quiet."""
    if verbosity() != QUIET:
        typer.echo(line, err=True)


def emit(text: str, output: Path | None, verdict: str | None = None, detail: str | None = None) -> None:
    """What --format rendered: to ``output`` (written atomically) or to stdout. Under -q/--quiet a command's
    ``verdict`` line replaces ``text`` (a command without one prints ``text``: its data); under -v/--verbose
    its ``detail`` does (more than ``text``). A JSON document is passed without either: never cut."""
    level = verbosity()
    if level == QUIET and verdict is not None:
        text = verdict
    elif level == VERBOSE and detail is not None:
        text = detail
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
        note(f"kcgate: using {found.path} ({found.note})")
    return found.path
