"""The command layer has no import cycle: any command module imports on its own, before kcgate.cli."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import kcgate.commands
from kcgate.cli import Dispatch, failure
from kcgate.errors import ContractsError, ExitCode, ResultsError, UsageError
from tests.conftest import ROOT


@pytest.mark.slow
def test_each_command_module_imports_first_and_registers() -> None:
    names = [i.name for i in pkgutil.iter_modules(kcgate.commands.__path__) if not i.name.startswith("_")]
    code = (
        "import importlib, sys, typer\n"
        "m = importlib.import_module('kcgate.commands.' + sys.argv[1])\n"
        "m.register(typer.Typer())\n"
        "assert 'kcgate.cli' not in sys.modules, 'a command module imports kcgate.cli'\n"
    )
    for name in names:
        proc = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, f"{name}: {proc.stderr[-800:]}"


# ---- one error handler around dispatch, one registration style --------------------------------------

COMMANDS_DIR = ROOT / "kcgate" / "commands"


def _command_modules() -> list[Path]:
    return sorted(p for p in COMMANDS_DIR.glob("*.py") if not p.name.startswith("_"))


def test_failure_is_the_one_mapping_to_exit_codes() -> None:
    assert failure(ContractsError("bad key")) == ("error: bad key", ExitCode.BAD_CONTRACTS)
    assert failure(UsageError("bad flag")) == ("error: bad flag", ExitCode.BAD_USAGE)
    message, code = failure(PermissionError(13, "Permission denied", "/x/out.json"))
    assert code == ExitCode.BAD_USAGE and message.startswith("error: /x/out.json: ")
    message, code = failure(KeyError("oops"))
    assert code == ExitCode.INTERNAL
    assert message.splitlines() == [
        "internal error: KeyError: 'oops'",
        "this is a bug in kcgate; please report it with the command you ran",
    ]


def _app_raising(exc: BaseException) -> typer.Typer:
    app = typer.Typer(cls=Dispatch)

    def boom() -> None:
        raise exc

    app.command("boom")(boom)
    app.command("other")(lambda: None)
    return app


@pytest.mark.parametrize(
    ("exc", "code", "first_line"),
    [
        (ContractsError("contracts.toml: bad"), ExitCode.BAD_CONTRACTS, "error: contracts.toml: bad"),
        (ResultsError("r.json: bad"), ExitCode.BAD_USAGE, "error: r.json: bad"),
        (
            FileNotFoundError(2, "No such file or directory", "gone.json"),
            ExitCode.BAD_USAGE,
            "error: gone.json: ",
        ),
        (ZeroDivisionError("division by zero"), ExitCode.INTERNAL, "internal error: ZeroDivisionError"),
        (typer.Exit(5), 5, ""),
    ],
)
def test_dispatch_maps_a_failure_in_any_command_body(exc: Exception, code: int, first_line: str) -> None:
    result = CliRunner().invoke(_app_raising(exc), ["boom"])
    assert result.exit_code == code
    assert isinstance(result.exception, SystemExit)  # handled: not the exception itself
    assert "Traceback" not in result.output
    assert result.output.startswith(first_line)


def test_commands_register_one_way_and_never_map_errors_themselves() -> None:
    """register(app) holds only app.command(NAME)(FUNCTION) or add_typer calls; no command catches kcgate's
    errors or imports the old per-command decorator: dispatch maps them (kcgate.cli.failure)."""
    for path in _command_modules():
        tree = ast.parse(path.read_text())
        register = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "register")
        for stmt in register.body:
            assert isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call), (
                f"{path.name}: {ast.unparse(stmt)}"
            )
            call = stmt.value
            by_name = isinstance(call.func, ast.Call) and ast.unparse(call.func.func).endswith(".command")
            assert by_name or ast.unparse(call.func) == "app.add_typer", f"{path.name}: {ast.unparse(stmt)}"
        text = path.read_text()
        assert "handle_errors" not in text and "except KcgateError" not in text, path.name
