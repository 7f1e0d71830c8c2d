"""Static kernel location: ``pkg.mod:name`` -> the module's source file and its top-level names, read
with ``ast`` and never imported (the reporting path must not run repository code).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from pathlib import Path

from kcgate.contracts.field_checks import Collector

_UNSEEN = "the static lookup cannot see"


def _located(target: str, roots: tuple[Path, ...], col: Collector) -> tuple[str, str] | None:
    """``locate``, once per kernel and roots in one load: 10,000 contracts name a few kernels."""
    key = (target, roots)
    if key not in col.located:
        col.located[key] = locate(target, roots)
    return col.located[key]  # type: ignore[no-any-return]


def locate(target: str, roots: tuple[Path, ...]) -> tuple[str, str] | None:
    """Find ``pkg.mod:fn`` statically: the module's source file and a top-level definition of fn."""
    module, name = target.split(":")
    source = module_source(module, roots)
    if source is None:
        return (
            f"cannot find module {module!r}",
            "check the spelling, or add its directory to [project].paths, or install the package",
        )
    if source.suffix != ".py":
        return None  # compiled extension: cannot check statically; run will import it
    names = _defined_names(source)
    if isinstance(names, Exception):
        return (f"module {module!r} ({source}) cannot be parsed: {names}", "fix the module's syntax")
    if name not in names:
        # re-exports, `import *` and module __getattr__ are invisible without importing: run imports it
        return (
            f"{_UNSEEN} {name!r} in module {module!r} ({source}); `kcgate run` will import it",
            f"check the spelling of {name!r}; nothing to do if it is a re-exported name",
        )
    return None


def _defined_names(source: Path) -> frozenset[str] | Exception:
    """A module file's top-level names, parsed once per file version (10,000 contracts share a few modules)."""
    try:
        stat = source.stat()
    except OSError as exc:
        return exc
    return _parsed_names(source, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _parsed_names(source: Path, mtime_ns: int, size: int) -> frozenset[str] | Exception:
    try:
        return frozenset(_top_level_names(ast.parse(source.read_text(encoding="utf-8"))))
    except (SyntaxError, UnicodeDecodeError, OSError) as exc:
        return exc


_SOURCES: dict[tuple[str, tuple[Path, ...], tuple[str, ...]], Path] = {}


def module_source(module: str, roots: tuple[Path, ...]) -> Path | None:
    """The module's file, searched in [project].paths, then sys.path, then the import system's finders.
    Found files are remembered (while they exist): contracts share a few kernel modules."""
    sys_path = tuple(sys.path)
    key = (module, roots, sys_path)
    known = _SOURCES.get(key)
    if known is not None and known.is_file():
        return known
    found = _find_source(module, roots, sys_path)
    if found is not None:
        _SOURCES[key] = found
    return found


def _find_source(module: str, roots: tuple[Path, ...], sys_path: tuple[str, ...]) -> Path | None:
    rel = Path(*module.split("."))
    for root in (*roots, *(Path(p) for p in sys_path if p)):
        for cand in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
            if cand.is_file():
                return cand
    return _installed_source(module)


def _installed_source(module: str) -> Path | None:
    """Locate through the import system's finders (editable installs too) without executing the package:
    find_spec on a top-level name runs no code; submodules are then looked up as files below it."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin else None
    for base in spec.submodule_search_locations or []:
        rel = Path(base, *rest)
        for cand in (rel.with_suffix(".py"), rel / "__init__.py"):
            if cand.is_file():
                return cand
    return None


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names
