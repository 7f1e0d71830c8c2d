"""Every flag a message of kcgate names exists (issue 43): a string in kcgate/ that says ``--contracts`` is
about an option some kcgate command has, or about another tool's flag listed here with its reason."""

from __future__ import annotations

import ast
import re
from typing import Any

import typer

from kcgate.cli import app
from tests.conftest import ROOT

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")

# Flags of other programs kcgate runs or names, by the file that names them.
OTHER_TOOLS: dict[str, set[str]] = {
    "kcgate/results/baseline.py": {"--full-name", "--name-only", "--no-pager"},  # git
    "kcgate/history/runs.py": {"--first-parent", "--max-count", "--verify", "--no-pager"},  # git
    "kcgate/util/worktree.py": {
        "--no-pager",
        "--show-toplevel",
        "--verify",
        "--quiet",
        "--detach",
        "--force",
    },
    "kcgate/devices/base.py": {"--index-url"},  # pip
    "kcgate/devices/driver.py": {"--query-gpu", "--showdriverversion"},  # nvidia-smi, rocm-smi
    "kcgate/execution/executors.py": {"--memory-limit"},  # the worker's own argv (execution/worker.py)
    "kcgate/execution/worker.py": {"--memory-limit"},
    "kcgate/sandbox/process.py": {"--control-fd"},  # the sandbox server's own argv (sandbox/server.py)
    "kcgate/sandbox/server.py": {"--control-fd"},
}


def _cli_flags() -> set[str]:
    flags = {"--help", "--version", "--install-completion", "--show-completion"}

    def walk(command: Any) -> None:
        for sub in getattr(command, "commands", {}).values():
            walk(sub)
        for param in command.params:
            if param.param_type_name == "option":
                flags.update(param.opts)
                flags.update(param.secondary_opts)

    walk(typer.main.get_command(app))
    return flags


def _plugin_flags() -> set[str]:
    """``pytest --kcgate ...``: the plugin's own options (kcgate/adopt/plugin.py's addoption calls)."""
    text = (ROOT / "kcgate" / "adopt" / "plugin.py").read_text()
    return set(re.findall(r'"(--kcgate[a-z-]*)"', text)) | {"--lf"}  # --lf: pytest's own


def test_every_flag_a_message_names_exists() -> None:
    known = _cli_flags() | _plugin_flags()
    unknown = []
    for path in sorted((ROOT / "kcgate").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for flag in FLAG.findall(node.value):
                    if flag not in known and flag not in OTHER_TOOLS.get(rel, set()):
                        unknown.append(f"{rel}:{node.lineno}: {flag}")
    assert unknown == []


def test_the_check_catches_a_made_up_flag() -> None:
    assert "--no-such-flag" not in _cli_flags() | _plugin_flags()
    assert FLAG.findall("pass --contracts PATH or -c") == ["--contracts"]
