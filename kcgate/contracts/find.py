"""Which contracts file to use when none is named, found the way ruff and pytest find their configuration.

From the current directory upward, the first directory that has a ``contracts.toml``, or a
``pyproject.toml`` whose ``[tool.kcgate]`` table names one (``contracts = "path"``, relative to it), wins.
A directory with both, naming different files, is refused: either could be meant. The search stops at
the repository root (a directory holding ``.git``) or the filesystem's root.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kcgate.errors import ContractsError, Problem
from kcgate.util import bounded, tomlsrc

NAME = "contracts.toml"
PYPROJECT = "pyproject.toml"
MAX_PYPROJECT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Found:
    path: Path  # as commands use it: relative to the current directory when below or above it
    note: str  # how it was found, for stderr; "" for ./contracts.toml itself


def find_contracts(start: Path) -> Found | None:
    """The contracts file for a command run in ``start``, or None."""
    here = start.resolve()
    for directory in (here, *here.parents):
        candidate = directory / NAME
        named = _from_pyproject(directory / PYPROJECT)
        if candidate.is_file():
            _one_of(candidate, named, directory, start)
            note = "" if directory == here else f"the nearest {NAME} above {_shown(here, start)}"
            return Found(_shown(candidate, start), note)
        if named is not None:
            path = _shown(directory / named, start)
            return Found(path, f"[tool.kcgate] contracts in {_shown(directory / PYPROJECT, start)}")
        if (directory / ".git").exists():
            break
    return None


def _one_of(candidate: Path, named: str | None, directory: Path, start: Path) -> None:
    """A contracts.toml beside a pyproject.toml naming another file: neither silently wins."""
    if named is None or (directory / named).resolve() == candidate.resolve():
        return
    pyproject = _shown(directory / PYPROJECT, start)
    where = _shown(candidate, start)
    prob = Problem(
        str(pyproject),
        None,
        "tool.kcgate.contracts",
        f"names {named!r}, but {where} is in the same directory: either could be the project's contracts",
        f"delete one of them, set contracts = {NAME!r} in [tool.kcgate], or name the file with -c/--contracts",
    )
    raise ContractsError(
        f"{where} and {pyproject} ([tool.kcgate] contracts = {named!r}): two contracts files", (prob,)
    )


def not_found(start: Path) -> ContractsError:
    return ContractsError(
        f"no {NAME} in {start} or above it (up to the repository root); create one with "
        "`kcgate init PACKAGE`, or name it with -c/--contracts PATH"
    )


def _from_pyproject(path: Path) -> str | None:
    """``[tool.kcgate] contracts`` of a pyproject.toml, when it has one."""
    if not path.is_file():
        return None
    try:
        data = tomlsrc.tomllib.loads(bounded.read_capped(path, MAX_PYPROJECT_BYTES).decode("utf-8"))
    except (bounded.Refused, UnicodeDecodeError, ValueError) as exc:
        prob = Problem(str(path), None, "", f"cannot read it for [tool.kcgate]: {exc}", "fix its TOML")
        raise ContractsError(f"{path}: not valid TOML", (prob,)) from None
    table = data.get("tool", {}).get("kcgate")
    if not isinstance(table, dict) or "contracts" not in table:
        return None
    named = table["contracts"]
    if not isinstance(named, str) or not named:
        prob = Problem(
            str(path), None, "tool.kcgate.contracts", "must be a path string", 'contracts = "contracts.toml"'
        )
        raise ContractsError(f"{path}: [tool.kcgate] contracts is not a path", (prob,))
    return named


def _shown(path: Path, start: Path) -> Path:
    """``path`` relative to the current directory (``../contracts.toml``), as a user would type it."""
    try:
        return Path(os.path.relpath(path, start.resolve()))
    except ValueError:  # another drive (Windows)
        return path
