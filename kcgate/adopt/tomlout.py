"""Write TOML values (strings, numbers, booleans, lists, inline tables): enough for contracts files that
kcgate writes itself (``kcgate init``, ``kcgate.check(isolation="process")``). Pure, torch-free."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


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
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }" if v else "{}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def key(k: str) -> str:
    return k if k.replace("_", "a").replace("-", "a").isalnum() else json.dumps(k)


def table(header: str, keys: Mapping[str, Any], comments: Mapping[str, str] | None = None) -> str:
    """``[header]`` or ``[[header]]`` (pass the brackets) and its keys, each with an optional comment."""
    lines = [header]
    for k, v in keys.items():
        note = (comments or {}).get(k)
        lines.append(f"{key(k)} = {value(v)}" + (f"  # {note}" if note else ""))
    return "\n".join(lines) + "\n"
