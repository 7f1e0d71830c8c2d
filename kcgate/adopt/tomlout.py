"""Write TOML values (strings, numbers, booleans, lists, inline tables): enough for contracts files that
kcgate writes itself (``kcgate init``, ``kcgate.check(isolation="process")``). Pure, torch-free."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")


def value(v: Any) -> str:
    """One TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"TOML value {v!r}: only finite numbers are written")
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }" if v else "{}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def key(k: str) -> str:
    """A bare key when TOML allows one (ASCII letters, digits, ``_`` and ``-`` only: ``str.isalnum`` would
    pass ``café``, which tomli rejects bare), else a quoted key."""
    return k if _BARE.fullmatch(k) else _string(k)


def _string(s: str) -> str:
    """A TOML basic string: JSON's escapes, plus DEL, which JSON leaves raw and TOML forbids. Non-ASCII text
    stays readable; a lone surrogate (not text, no UTF-8 for it) is refused."""
    if _SURROGATE.search(s):
        raise ValueError(f"TOML string {s[:40]!r}: holds a lone surrogate, which is not text")
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def table(header: str, keys: Mapping[str, Any], comments: Mapping[str, str] | None = None) -> str:
    """``[header]`` or ``[[header]]`` (pass the brackets) and its keys, each with an optional comment."""
    lines = [header]
    for k, v in keys.items():
        note = (comments or {}).get(k)
        note = _CONTROL.sub(" ", note) if note else note  # a comment ends at a newline; TOML forbids controls
        lines.append(f"{key(k)} = {value(v)}" + (f"  # {note}" if note else ""))
    return "\n".join(lines) + "\n"
