"""kcgate's frozen dataclasses as JSON data (``encode``), and TOML values as the records hold them (``freeze``).

``encode`` keys ``kcgate mutate``'s cache (``Contract.to_json``). Its decoder serves only the tests now that the
hand-off to the worker is pickled (``execution.handoff``): it is tests/testing/frozen_json.py. Torch-free.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any


def encode(obj: Any) -> Any:
    """``obj`` as data ``json.dumps`` writes: a dataclass as a dict of the fields that differ from their
    defaults (most of a contract's do not, so a new field leaves old cache keys alone), tuples as lists, a
    path or date as a string; anything else as it is."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.init and not _is_default(value, _default(f)):
                out[f.name] = encode(value)
        return out
    if isinstance(obj, tuple):
        return [encode(x) for x in obj]
    if isinstance(obj, (Path, dt.date)):
        return str(obj)
    return obj


_NO_DEFAULT = object()


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _NO_DEFAULT


def _is_default(value: Any, default: Any) -> bool:
    """Equal and of the same types all the way down: TOML's ``atol = 0`` is kept where 0.0 is the default
    (``==`` alone, also a record's, takes 0 for 0.0 and True for 1)."""
    if value is default:
        return True
    kind = type(value)
    if kind is not type(default):
        return False
    if kind is tuple:
        return len(value) == len(default) and all(map(_is_default, value, default))
    fields = getattr(kind, "__dataclass_fields__", None)
    if fields is not None:
        return all(_is_default(getattr(value, name), getattr(default, name)) for name in fields)
    return bool(value == default)


def freeze(value: Any) -> Any:
    """A TOML value as kcgate's frozen records hold it: lists become tuples (nested), tables stay dicts."""
    return tuple(freeze(x) for x in value) if isinstance(value, list) else value
