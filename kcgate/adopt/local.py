"""Kernels handed to ``kcgate.check`` that have no importable name (lambdas, closures, notebook cells):
parked here as module attributes so the in-process executor resolves them like any import string."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

_COUNTER = itertools.count()


def park(kernel: Callable[..., Any]) -> str:
    """Bind ``kernel`` to a fresh name in this module; return its import string."""
    name = f"kernel_{next(_COUNTER)}"
    globals()[name] = kernel
    return f"{__name__}:{name}"
