"""contracts.toml -> a validated ``Project``: bounded read, TOML parse with line numbers, every contract
validated, discovered contracts added, every problem reported at once (``ContractsError``).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kcgate.contracts.discover import discover
from kcgate.contracts.field_checks import At, Collector, unknown_keys, value
from kcgate.contracts.fields import (
    FILE_KEYS,
    PROJECT_FIELD,
)
from kcgate.contracts.records import Contract, Project
from kcgate.contracts.validate import _contract, _duplicates, _policy, _table
from kcgate.errors import ContractsError, Problem
from kcgate.util import bounded, tomlsrc

MAX_CONTRACTS_BYTES = 16 * 1024 * 1024


def load_project(path: Path | str, *, locate_kernels: bool = True, strict_imports: bool = False) -> Project:
    """Load and validate; raise ContractsError listing every problem.

    ``locate_kernels=False`` is for the reporting path (diff, report), which runs where the kernels are
    not installed and must never look at repository code: import strings are then checked for syntax only.
    A kernel in a package installed neither here nor in the project's directories is a warning (a torch-free
    pre-commit environment cannot see torch), an error with ``strict_imports``.
    """
    path = Path(path)
    if not path.exists():
        raise ContractsError(f"{path}: no such file; check the path, or create it with `kcgate init PACKAGE`")
    try:
        text = bounded.read_capped(path, MAX_CONTRACTS_BYTES).decode("utf-8")
    except bounded.Refused as exc:
        raise ContractsError(f"{path}: {exc}; pass your contracts.toml") from None
    except UnicodeDecodeError as exc:
        raise ContractsError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None
    with _no_cyclic_gc():
        data, lines = _parse(path, text)
        col = Collector(str(path), lines)
        col.locate = locate_kernels
        col.strict_imports = strict_imports
        project = _project(path, data, col)
    if col.problems:
        n = len(col.problems)
        raise ContractsError(f"{path}: {n} problem{'s' * (n != 1)} found", tuple(col.problems))
    return project


def _parse(path: Path, text: str) -> tuple[dict[str, Any], tomlsrc.LineMap]:
    try:
        return tomlsrc.parse(text)
    except tomlsrc.TomlSyntaxError as exc:
        prob = Problem(
            str(path), exc.line, "", f"TOML syntax error: {exc}", "fix the TOML syntax at that line"
        )
        raise ContractsError(f"{path} is not valid TOML", (prob,)) from None


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Parsing and validating 10,000 contracts makes about 10^6 small objects, none in a cycle: the cyclic
    collector's passes over them cost about 15% of the time and free nothing (reference counting still
    frees them)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _project(path: Path, data: dict[str, Any], col: Collector) -> Project:
    top = At((), "", col)
    unknown_keys(data, FILE_KEYS, top)
    proj = _table(data, "project", top)
    unknown_keys(proj, PROJECT_FIELD.keys(), top.key("project"))
    root = path.parent
    paths = tuple(root / p for p in _project_key(proj, "paths", col) or [])
    raw = data.get("contract", [])
    if not isinstance(raw, list) or not raw and not proj.get("discover"):
        top.add("no [[contract]] entries", "add at least one [[contract]] table (see README)")
        raw = []
    contracts = [_contract(i, c, col, (root, *paths)) for i, c in enumerate(raw) if isinstance(c, dict)]
    _duplicates(contracts, col)
    contracts += _discovered(proj, contracts, col, (root, *paths))
    valid = tuple(c for c in contracts if c is not None)
    return Project(
        warnings=tuple(col.warnings),
        path=path,
        name=_project_key(proj, "name", col) or root.resolve().name,
        contracts=valid,
        policy=_policy(data, valid, col),
        paths=paths,
        baselines_dir=root / proj["baselines"] if isinstance(proj.get("baselines"), str) else None,
        results_dir=root / proj["results"] if isinstance(proj.get("results"), str) else Path("results"),
        track=tuple(_project_key(proj, "track", col) or ()),
    )


def _project_key(proj: dict[str, Any], key: str, col: Collector) -> Any:
    return value(proj, PROJECT_FIELD[key], At(("project",), "project", col))


def _discovered(
    proj: dict[str, Any], contracts: list[Contract | None], col: Collector, roots: tuple[Path, ...]
) -> list[Contract | None]:
    """Contracts declared with ``@kcgate.contract(...)`` in the modules of ``[project].discover``, read
    statically from their source (nothing is imported); their problems name the .py file and line."""
    modules = _project_key(proj, "discover", col)
    if not modules:
        return []
    taken = {c.id for c in contracts if c is not None}
    found, problems, missing = discover(modules, roots, taken, len(contracts), col.locate)
    for module in missing:
        col.add(
            ("project", "discover"),
            "project.discover",
            f"cannot find module {module!r}",
            "check the spelling, or add its directory to [project].paths, or install the package",
        )
    col.problems += problems
    return list(found)
