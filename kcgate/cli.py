"""The typer CLI. Commands live in ``kcgate.commands.<name>`` and register themselves here.

Every command runs inside ``Dispatch.invoke``, the one place a failure becomes a message and an exit
code (``failure``); no command catches errors for that itself. Keep this module and every command module
free of top-level torch imports: ``kcgate --help``, ``validate``, ``schema``, ``diff``, ``compare`` and
``report`` must work without torch.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import typing
from typing import Any

import typer
import typer.core
from typer.core import TyperGroup

import kcgate.commands
from kcgate import __version__
from kcgate.commands._options import typers_click, verbosity_params
from kcgate.errors import ExitCode, KcgateError, os_error
from kcgate.render.escape import console_text

click = typers_click()
# click < 8.2 (the floor's click 8.1.x) has no NoArgsIsHelpError: there a bare ``kcgate`` prints the help
# and exits 0 itself; an ``except`` naming an attribute that does not exist would raise AttributeError.
_NoArgsIsHelp: type[BaseException] = getattr(
    click.exceptions, "NoArgsIsHelpError", type("_Never", (Exception,), {})
)


def failure(exc: Exception) -> tuple[str, ExitCode]:
    """The one mapping of a failure to (message, exit code); never a traceback."""
    if isinstance(exc, KcgateError):
        return exc.render(), exc.exit_code
    if isinstance(exc, OSError):  # a file kcgate had to read or write: the user's to fix, not a kcgate bug
        where = f"{exc.filename}: " if exc.filename else ""
        fix = "check the path, its permissions and free space"
        return f"error: {where}{os_error(exc)}; {fix}", ExitCode.BAD_USAGE
    bug = "this is a bug in kcgate; please report it with the command you ran"
    return f"internal error: {type(exc).__name__}: {exc}\n{bug}", ExitCode.INTERNAL


class Dispatch(TyperGroup):
    """The root command group: runs the chosen command inside ``failure``'s mapping."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            with_verbosity(command)
            plain_metavars(command)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, click.ClickException):
            raise  # an exit code already chosen, or bad usage: main() maps those
        except Exception as exc:
            message, code = failure(exc)
            typer.echo(console_text(message), err=True)
            raise typer.Exit(int(code)) from None


def with_verbosity(command: Any) -> None:
    """Give ``command``, each of its subcommands, and a group that runs on its own (``kcgate history``)
    -q/--quiet and -v/--verbose, from their rows of ``SHARED``; ``_options.verbosity()`` reads the level."""
    subs = getattr(command, "commands", {})
    for sub in subs.values():
        with_verbosity(sub)
    if subs and not any(p.name != "help" for p in command.params):
        return  # a pure group (kcgate baseline): its subcommands take them
    command.params.extend(verbosity_params())


# A metavar names what to type, in click's plain style, never a Python type (typer 0.2x prints
# ``<list[Path]>``). Options that set their own (``[cpu|cuda|...]``, ``PATH``) keep it.
_METAVARS = {"int": "N", "integer": "N", "float": "NUMBER", "path": "PATH", "Path": "PATH"}
_SECONDS = ("budget", "timeout", "shrink_s")


def plain_metavars(command: Any) -> None:
    """Give every parameter of ``command`` (and of its subcommands) without a metavar a plain one, help
    lines without rich's escapes, and keep a hidden (deprecated) argument out of the usage line."""
    for sub in getattr(command, "commands", {}).values():
        plain_metavars(sub)
    for param in command.params:
        param.get_help_record = _unescaped(param.get_help_record)
        if getattr(param, "hidden", False):  # click lists a hidden argument in "Usage:" as if required
            param.get_usage_pieces = lambda ctx: []
        if param.param_type_name != "option":
            if hasattr(param, "display_type_rich"):  # typer 0.2x: the help's "RESULTS <list[Path]>"
                param.display_type_rich = lambda ctx: None
            if not getattr(param, "hidden", False):  # typer 0.2x: "{base} {results}..." in "Usage:"
                param.get_usage_pieces = _usage_pieces(param)
            continue
        if param.metavar is not None or getattr(param, "is_flag", False):
            continue
        kind = _METAVARS.get(_type_name(param), "TEXT")
        param.metavar = "SECONDS" if kind == "NUMBER" and param.name in _SECONDS else kind


def _usage_pieces(param: Any) -> Any:
    """click's own usage for an argument: ``BASE``, ``RESULTS...``, ``[KIND]`` (typer 0.2x writes braces)."""
    name = param.metavar or (param.name or "").upper()
    if not name.startswith("["):
        name = name if param.required else f"[{name}]"
    piece = name + ("..." if param.nargs != 1 else "")
    return lambda ctx: [piece]


def _unescaped(record: Any) -> Any:
    """``record`` with rich's markup escape undone: typer < 0.2x escapes "[default: …]" as "\\[default: …]"
    whenever rich is installed, and with plain help (``rich_markup_mode=None``) the backslash was printed."""

    def plain(ctx: Any) -> Any:
        row = record(ctx)
        return row if row is None else (row[0], row[1].replace("\\[", "["))

    return plain


def _type_name(param: Any) -> str:
    """The value's type: click's ParamType name (typer < 0.2x), or typer's annotation (list[X] gives X)."""
    if getattr(param, "type", None) is not None:
        return str(param.type.name)
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", str)
    for arg in typing.get_args(annotation) or (annotation,):
        inner = typing.get_args(arg) or (arg,)
        if inner[0] is not type(None):
            return getattr(inner[0], "__name__", "text")
    return "text"


app = typer.Typer(
    cls=Dispatch,
    name="kcgate",
    help="Kernel contracts: run them on every vendor's hardware, diff against the base commit, gate PRs.\n\n"
    "Exit codes: 0 all hold, 1 violation, 2 bad contracts file, 3 bad usage or input file, "
    "4 internal error, 5 nothing selected, 6 under-specified contract (calibrate), "
    "7 a worker could not start because of a contract's env or a package's import.\n\n"
    "Example: kcgate init mypackage; kcgate validate; kcgate run --runner laptop; kcgate run --help",
    no_args_is_help=True,
    add_completion=True,  # kcgate --install-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kcgate {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Kernel contracts for ML kernels."""


def _register_commands() -> None:
    for info in sorted(pkgutil.iter_modules(kcgate.commands.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"kcgate.commands.{info.name}").register(app)


_register_commands()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: click usage errors exit 3 (bad usage), not click's 2 (kcgate's bad contracts)."""
    try:
        rv = app(args=argv, standalone_mode=False)
    except _NoArgsIsHelp as exc:
        ctx = getattr(exc, "ctx", None)
        typer.echo(ctx.get_help() if ctx else str(exc))
        sys.exit(int(ExitCode.OK))
    except click.ClickException as exc:
        exc.show()
        sys.exit(int(ExitCode.BAD_USAGE))
    except typer.Abort:  # click's own: stdin closed at a prompt
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)
