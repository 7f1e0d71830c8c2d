"""Import a ``pkg.mod:name`` target string, with extra search paths first on sys.path."""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


@functools.cache
def resolve(target: str, paths: tuple[Path, ...] = ()) -> Callable[..., Any]:
    """Import ``pkg.mod:fn`` with the project's paths first on sys.path; once per process (a worker resolves
    the same kernel for every case of a contract). A failed import is not cached: each case reports it."""
    for p in reversed(paths):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    module, name = target.split(":")
    try:
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
    except AttributeError as exc:  # the module has no such name: the kernel is not there, as for a module
        raise ImportError(str(exc)) from exc
