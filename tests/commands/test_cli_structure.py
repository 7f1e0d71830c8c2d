"""The command layer has no import cycle: any command module imports on its own, before kcgate.cli."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import kcgate.commands
from tests.conftest import ROOT


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
