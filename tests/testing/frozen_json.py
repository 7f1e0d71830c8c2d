"""The decoder of ``kcgate.util.frozen_json`` (test-only): ``decode(cls, encode(obj)) == obj``, type for type.

It once rebuilt the parsed contracts in the worker; that hand-off is pickled now (``execution.handoff``;
at 10,000 contracts ``benchmarks/handoff.py`` measured a round trip of 574 ms of CPU with this codec against
177 ms with pickle). tests/util/test_frozen_json.py keeps the records plain data with it, and the benchmark
measures the old codec against pickle.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kcgate.util.frozen_json import encode, freeze

__all__ = ["decode", "encode", "freeze"]

T = TypeVar("T")
Decoder = Callable[[Any], Any]
_DECODERS: dict[Any, Decoder] = {}


def decode(cls: type[T], data: Any) -> T:
    """The ``cls`` that ``encode`` gave ``data`` for (a ValueError names the field when ``data`` does not fit)."""
    return _decoder(cls)(data)  # type: ignore[no-any-return]


def _decoder(hint: Any) -> Decoder:
    found = _DECODERS.get(hint)
    if found is None:
        found = _DECODERS[hint] = _make_decoder(hint)
    return found


def _make_decoder(hint: Any) -> Decoder:
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _dataclass_decoder(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _optional_decoder(hint, args)
    if origin is tuple:
        return _tuple_decoder(args)
    return _SCALARS.get(hint) or _unsupported(hint)


def _dataclass_decoder(cls: type) -> Decoder:
    hints = typing.get_type_hints(cls)
    fields = {f.name: _decoder(hints[f.name]) for f in dataclasses.fields(cls) if f.init}

    def decode_dataclass(data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        try:  # a field left out takes its default; a missing required one or an unknown key is a TypeError
            return cls(**{name: fields[name](v) if name in fields else v for name, v in data.items()})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{cls.__name__}: {exc}") from None

    return decode_dataclass


def _optional_decoder(hint: Any, args: tuple[Any, ...]) -> Decoder:
    rest = [a for a in args if a is not type(None)]
    if len(rest) != 1 or len(args) != 2:
        return _unsupported(hint)
    inner = _decoder(rest[0])
    return lambda data: None if data is None else inner(data)


def _tuple_decoder(args: tuple[Any, ...]) -> Decoder:
    if len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0])
        return lambda data: tuple(item(x) for x in _list(data))
    items = [_decoder(a) for a in args]

    def decode_fixed(data: Any) -> tuple[Any, ...]:
        values = _list(data)
        if len(values) != len(items):
            raise ValueError(f"expected {len(items)} items, got {len(values)}")
        return tuple(dec(x) for dec, x in zip(items, values, strict=True))

    return decode_fixed


def _list(data: Any) -> list[Any] | tuple[Any, ...]:
    if not isinstance(data, (list, tuple)):
        raise ValueError(f"expected a list, got {type(data).__name__}")
    return data


def _scalar(*kinds: type) -> Decoder:
    def decode_scalar(data: Any) -> Any:
        if not isinstance(data, kinds) or (isinstance(data, bool) and bool not in kinds):
            raise ValueError(f"expected {' or '.join(k.__name__ for k in kinds)}, got {data!r:.80}")
        return data

    return decode_scalar


def _unsupported(hint: Any) -> Decoder:
    raise TypeError(f"tests.testing.frozen_json cannot decode {hint!r}: add it to the codec")


# A float field may hold an int (TOML's ``timeout_s = 60``): kept as it was read, as the loader keeps it.
_SCALARS: dict[Any, Decoder] = {
    str: _scalar(str),
    int: _scalar(int),
    float: _scalar(float, int),
    bool: _scalar(bool),
    Any: freeze,
    Path: lambda data: Path(_scalar(str)(data)),
    dt.date: lambda data: dt.date.fromisoformat(_scalar(str)(data)),
}
