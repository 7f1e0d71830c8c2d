"""The typer CLI. Commands live in ``kcgate.commands.<name>`` and register themselves here.

Keep this module and every command module free of top-level torch imports: ``kcgate --help``,
``validate``, ``schema``, ``diff``, ``compare`` and ``report`` must work without torch.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from kcgate import __version__
from kcgate.errors import ExitCode

app = typer.Typer(
    name="kcgate",
    help="Kernel contracts: run them on every vendor's hardware, diff against the base commit, gate PRs.\n\n"
    "Exit codes: 0 all hold, 1 violation, 2 bad contracts file, 3 bad usage or input file, "
    "4 internal error, 5 nothing selected, 6 under-specified contract (calibrate).",
    no_args_is_help=True,
    add_completion=False,
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
    import kcgate.commands as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"kcgate.commands.{info.name}").register(app)


_register_commands()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: click usage errors exit 3 (bad usage), not click's 2 (kcgate's bad contracts)."""
    try:
        import click
    except ImportError:  # typer >= 0.24 vendors click as typer._click
        from typer import _click as click  # type: ignore[no-redef]

    try:
        rv = app(args=argv, standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(int(ExitCode.OK))
    except click.ClickException as exc:
        exc.show()
        sys.exit(int(ExitCode.BAD_USAGE))
    except click.Abort:
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)
