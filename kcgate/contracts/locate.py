"""Static kernel location: ``pkg.mod:name`` -> the module's source file and its module-level names, read
with ``ast`` and never imported (the reporting path must not run repository code, and validate stays
torch-free and fast). Re-exports are followed: ``from x import *`` (the whole module's names, its literal
``__all__`` included), names bound in ``if``/``try`` blocks, and the ``.pyi`` stubs of compiled modules, so
``torch:matmul`` (torch/_C/_VariableFunctions.pyi) and ``torch.nn:LayerNorm`` (``from torch.nn.modules import
*``) are seen.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kcgate.contracts.field_checks import Collector
from kcgate.util import bounded
from kcgate.util.pysource import decode_source

_UNSEEN = "the static lookup found no"
ABSENT = "not installed in this environment:"  # a package that is neither the project's nor installed here
_MAX_DEPTH = 12  # star imports followed (torch: torch -> torch._C -> stubs is three)


def _located(target: str, roots: tuple[Path, ...], col: Collector) -> tuple[str, str] | None:
    """``locate``, once per kernel and roots in one load: 10,000 contracts name a few kernels."""
    key = (target, roots)
    if key not in col.located:
        col.located[key] = locate(target, roots)
    return col.located[key]  # type: ignore[no-any-return]


def locate(target: str, roots: tuple[Path, ...]) -> tuple[str, str] | None:
    """Find ``pkg.mod:fn`` statically: the module's source file (or its ``.pyi`` stub, for a compiled module
    such as ``torch._C._VariableFunctions``) and a definition of fn there or in what it re-exports.

    A warning is given only where the name is really absent from what can be read: a module ``__getattr__``,
    a compiled module without a stub, or an ``import *`` that cannot be followed leaves the lookup unable to
    tell, and then it says nothing (``kcgate run`` imports the kernel and names a missing one)."""
    module, name = target.split(":")
    source = module_source(module, roots)
    if source is None and _absent_package(module, roots):
        top = module.split(".")[0]
        return (
            f"{ABSENT} package {top!r} ({sys.executable}); kernel {target!r} not looked up, "
            "`kcgate run` imports it",
            f"install {top!r} where kcgate validate runs to check it too (--strict-imports makes this an error)",
        )
    if source is None:
        return (
            f"cannot find module {module!r}",
            "check the spelling, or add its directory to [project].paths, or install the package",
        )
    if source.suffix not in (".py", ".pyi"):
        return None  # compiled extension without a stub: cannot check statically; run will import it
    facts = _facts(source)
    if isinstance(facts, Exception):
        return (f"module {module!r} ({source}) cannot be parsed: {facts}", "fix the module's syntax")
    if provides(module, name, roots) is False:
        return (
            f"{_UNSEEN} {name!r} in module {module!r} ({source}) nor in what it re-exports; "
            "`kcgate run` will import it",
            f"check the spelling of {name!r} (a name set through globals() is invisible to the static lookup)",
        )
    return None


@dataclass(frozen=True)
class _Facts:
    """What a module file says about its names without running it."""

    names: frozenset[str]  # defined or imported at module level (inside if/try/with blocks too)
    stars: tuple[tuple[int, str], ...]  # each ``from X import *``: (relative level, X)
    dynamic: bool  # a module-level ``__getattr__``: any name may exist


def provides(module: str, name: str, roots: tuple[Path, ...], depth: int = 0) -> bool | None:
    """Whether ``module`` has ``name``, read statically: True, False, or None when it cannot tell (a
    compiled module without a stub, a module ``__getattr__``, an ``import *`` it cannot follow)."""
    source = module_source(module, roots) if depth <= _MAX_DEPTH else None
    if source is None or source.suffix not in (".py", ".pyi"):
        return None
    facts = _facts(source)
    if isinstance(facts, Exception) or facts.dynamic:
        return None
    if name in facts.names or _is_submodule(source, name):
        return True
    answers = [
        provides(_absolute(module, source, level, of), name, roots, depth + 1) for level, of in facts.stars
    ]
    if True in answers:
        return True
    return None if None in answers else False


def _absolute(module: str, source: Path, level: int, of: str) -> str:
    """The module a ``from <dots><of> import *`` in ``module`` (whose file is ``source``) names."""
    if not level:
        return of
    package = module if source.stem == "__init__" else module.rpartition(".")[0]
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*base, of] if of else base)


def _is_submodule(source: Path, name: str) -> bool:
    """``pkg:sub`` names a submodule when pkg is a package with a ``sub`` module or package."""
    if source.stem != "__init__":
        return False
    d = source.parent
    return any(p.exists() for p in (d / f"{name}.py", d / f"{name}.pyi", d / name / "__init__.py"))


def _facts(source: Path) -> _Facts | Exception:
    """A module file's names, parsed once per file version (10,000 contracts share a few modules)."""
    try:
        stat = source.stat()
    except OSError as exc:
        return exc
    return _parsed_facts(source, stat.st_mtime_ns, stat.st_size)


MAX_MODULE_BYTES = 16 << 20  # a kernel module read for its names: capped while reading


@functools.lru_cache(maxsize=256)
def _parsed_facts(source: Path, mtime_ns: int, size: int) -> _Facts | Exception:
    try:  # decoded as Python decodes it: a BOM or a PEP 263 coding line names the encoding
        tree = ast.parse(decode_source(bounded.read_capped(source, MAX_MODULE_BYTES)))
    except (SyntaxError, UnicodeDecodeError, OSError, ValueError) as exc:  # bounded.Refused is a ValueError
        return exc
    except (RecursionError, MemoryError):  # the parser's depth limits: expressions nested by the thousand
        return ValueError("expressions nested too deeply to parse")
    names: set[str] = set()
    stars: list[tuple[int, str]] = []
    for node in _module_level(tree.body):
        names |= _bound_names(node)
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            stars.append((node.level, node.module or ""))
        names |= _all_entries(node)
    return _Facts(frozenset(names), tuple(stars), "__getattr__" in names)


_SOURCES: dict[tuple[str, tuple[Path, ...], tuple[str, ...]], Path] = {}


def _absent_package(module: str, roots: tuple[Path, ...]) -> bool:
    """The module's top-level package is neither in the project's directories nor importable here (a
    pre-commit hook's environment has no torch): nothing can be said about the kernel, right or wrong."""
    top = module.split(".")[0]
    if any((root / top).is_dir() or (root / f"{top}.py").is_file() for root in roots):
        return False
    try:
        return importlib.util.find_spec(top) is None
    except (ImportError, ValueError):
        return True


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


def python_source(module: str, roots: tuple[Path, ...]) -> Path | None:
    """The module's Python source (.py, never a stub), searched as ``module_source`` searches: for tools
    that read or rewrite the code itself (``kcgate mutate``)."""
    return _find_source(module, roots, tuple(sys.path), _python_candidates)


def _find_source(
    module: str, roots: tuple[Path, ...], sys_path: tuple[str, ...], candidates: Candidates | None = None
) -> Path | None:
    candidates = candidates or _candidates
    rel = Path(*module.split("."))
    for root in (*roots, *(Path(p) for p in sys_path if p)):
        for cand in candidates(root / rel):
            if cand.is_file():
                return cand
    return _installed_source(module, candidates)


Candidates = Callable[[Path], tuple[Path, ...]]


def _python_candidates(rel: Path) -> tuple[Path, ...]:
    return (rel.with_suffix(".py"), rel / "__init__.py")


def _candidates(rel: Path) -> tuple[Path, ...]:
    """A module's files, source first, then the stub a compiled module ships (``torch/_C/__init__.pyi``)."""
    return (rel.with_suffix(".py"), rel / "__init__.py", rel.with_suffix(".pyi"), rel / "__init__.pyi")


def _installed_source(module: str, candidates: Candidates = _candidates) -> Path | None:
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
        origin = Path(spec.origin) if spec.origin else None
        return origin if origin and (candidates is _candidates or origin.suffix == ".py") else None
    for base in spec.submodule_search_locations or []:
        for cand in candidates(Path(base, *rest)):
            if cand.is_file():
                return cand
    return None


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements run at module level: the body, and the bodies of its if/try/with blocks (``if
    TYPE_CHECKING:``, ``try: from a import x except ImportError: ...``), never function or class bodies."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _module_level([*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            handlers = [stmt for h in node.handlers for stmt in h.body]
            yield from _module_level([*node.body, *handlers, *node.orelse, *node.finalbody])
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            yield from _module_level(node.body)


def _bound_names(node: ast.stmt) -> set[str]:
    """The module-level names one statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
    return set()


def _all_entries(node: ast.stmt) -> set[str]:
    """Literal strings put into ``__all__`` (``__all__ = [...]``, ``+= [...]``, ``.extend([...])``,
    ``.append("x")``): names a module promises even where it binds them dynamically."""
    value: ast.AST | None = None
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = node.value
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        f = node.value.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "__all__":
            value = ast.List(elts=list(node.value.args))
    if value is None:
        return set()
    return {n.value for n in ast.walk(value) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
