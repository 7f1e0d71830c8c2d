"""The real reference Freivalds check (ashiba-verify's ``freivalds_verify``, as its author ships it).

An installed ``ashiba_verify`` package is used when there is one; else the verbatim copy in
``benchmarks/third_party/ashiba_verify`` (see its README: commit, license). Never a re-implementation.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

VENDORED = Path(__file__).resolve().parent / "third_party" / "ashiba_verify" / "freivalds.py"


def load() -> tuple[Callable[..., Any], str]:
    """(freivalds_verify, where it came from)."""
    try:
        from ashiba_verify.freivalds import freivalds_verify  # type: ignore[import-not-found]

        return freivalds_verify, "installed ashiba_verify package"
    except ImportError:
        spec = importlib.util.spec_from_file_location("ashiba_verify_freivalds", VENDORED)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return (
            module.freivalds_verify,
            f"vendored verbatim copy ({VENDORED.relative_to(VENDORED.parents[2])})",
        )


def reference_passes(a: Any, b: Any, c: Any) -> bool | str:
    """True/False from the reference with its defaults (k = 10, tolerances from A's dtype), or the text of
    the exception it raises (mixed dtypes: ``C @ R`` with a bf16 R and an fp32 C)."""
    verify, _ = load()
    try:
        return bool(verify(a, b, c))
    except (RuntimeError, ValueError) as exc:
        return f"raises {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
