"""One module per CLI command; each exposes ``register(app)``, which ``kcgate.cli`` calls for every module
here not starting with "_". Heavy imports go inside the command body. ``handle_errors`` is the one mapping
of failures to exit codes, wrapped around every command; it lives here so commands never import
``kcgate.cli`` (which imports them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from kcgate.errors import ExitCode, KcgateError, os_error
from kcgate.render.escape import console_text

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(fn: F) -> F:
    """Map tool failures to their exit codes and one readable message; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KcgateError as exc:
            typer.echo(console_text(exc.render()), err=True)
            raise typer.Exit(int(exc.exit_code)) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except OSError as exc:  # a file kcgate had to read or write: the user's to fix, not a kcgate bug
            where = f"{exc.filename}: " if exc.filename else ""
            typer.echo(
                console_text(
                    f"error: {where}{os_error(exc)}; check the path, its permissions and free space"
                ),
                err=True,
            )
            raise typer.Exit(int(ExitCode.BAD_USAGE)) from None
        except Exception as exc:  # a kcgate bug: say so plainly, exit 4
            typer.echo(console_text(f"internal error: {type(exc).__name__}: {exc}"), err=True)
            typer.echo("this is a bug in kcgate; please report it with the command you ran", err=True)
            raise typer.Exit(int(ExitCode.INTERNAL)) from None

    return wrapper  # type: ignore[return-value]
