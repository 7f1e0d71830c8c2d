"""The digest of the code a contract runs: its import strings' modules and the modules of the project they
import (read statically, never imported), for ``--resume`` to tell a changed kernel from the one that ran."""

from __future__ import annotations

import ast
import functools
import hashlib
import os
from pathlib import Path

from kcgate.contracts.locate import module_source
from kcgate.util import bounded
from kcgate.util.pysource import decode_source

MAX_MODULES = 64  # modules followed per import string: a kernel's helpers, not the whole project
MAX_SOURCE_BYTES = 16 << 20  # a module larger than this is hashed by its size and mtime only


def code_digest(module: str, roots: tuple[Path, ...]) -> str:
    """``module``'s source and, transitively, that of every module it imports found under ``roots`` (the
    project's paths: an installed package's version is in the fingerprint), up to MAX_MODULES."""
    h, seen, todo = hashlib.sha256(), set[str](), [module]
    while todo and len(seen) < MAX_MODULES:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_source(name, roots)
        if path is None or (name != module and not _inside(path, roots)):
            continue
        digest, imports = _read(path)
        h.update(f"{name}\0{digest}\0".encode())
        todo.extend(sorted(imports - seen, reverse=True))
    return h.hexdigest()


def _inside(path: Path, roots: tuple[Path, ...]) -> bool:
    real = os.path.realpath(path)
    return any(real.startswith(os.path.realpath(r) + os.sep) for r in roots)


def _read(path: Path) -> tuple[str, frozenset[str]]:
    try:
        st = os.stat(path)
    except OSError:
        return "unreadable", frozenset()
    return _parsed(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=512)
def _parsed(path: str, mtime_ns: int, size: int) -> tuple[str, frozenset[str]]:
    """(a digest of the file's bytes, the absolute module names it imports), once per version of the file."""
    try:
        raw = bounded.read_capped(path, MAX_SOURCE_BYTES)
    except ValueError:  # too large, not a regular file: its size and time stand for it
        return f"unread {size} {mtime_ns}", frozenset()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        tree = ast.parse(decode_source(raw))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return digest, frozenset()
    return digest, frozenset(_imports(tree))


def _imports(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names if a.name != "*"}
    return names
