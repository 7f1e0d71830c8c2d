"""One JSON codec for kcgate's frozen dataclasses, read from their type hints (no per-class code).

``encode(obj)`` gives JSON-ready data (a dataclass as a dict of every field; tuples as lists; ``Path`` and
``datetime.date`` as strings); ``decode(cls, data)`` rebuilds an equal object. ``Any`` fields hold TOML values
frozen as ``kcgate.contracts.validate`` freezes them: lists become tuples (nested too), a table stays a dict.
Torch-free.

It no longer carries the parsed contracts to the worker: that hand-off is pickled (``execution.handoff``;
at 10,000 contracts ``benchmarks/handoff.py`` measured a round trip of 574 ms of CPU with this codec against
177 ms with pickle). What remains in use is ``freeze``; ``encode``/``decode`` serve ``Contract``/``Project.to_json`` and
``from_json`` in ``contracts/records.py``, which only tests call now.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
Decoder = Callable[[Any], Any]
# Built once per type hint, from the hints (typing.get_type_hints is slow): most fields need no work.
_ENCODERS: dict[Any, Callable[[Any], Any]] = {}
_DECODERS: dict[Any, Decoder] = {}


def encode(obj: Any) -> Any:
    """``obj`` as data ``json.dumps`` writes: a dataclass as a dict of its fields (those that differ from the
    field's default: most of a contract's do not), a path or date as a string; tuples are left for
    ``json.dumps`` to write as lists (``decode`` reads both)."""
    return _encoder(type(obj))(obj)


_NO_DEFAULT = object()


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _NO_DEFAULT


def _dataclass_encoder(cls: type) -> Callable[[Any], Any]:
    hints = typing.get_type_hints(cls)
    fields = [(f.name, _encoder(hints[f.name]), _default(f)) for f in dataclasses.fields(cls) if f.init]

    def encode_dataclass(obj: Any) -> dict[str, Any]:
        out = {}
        for name, enc, default in fields:
            v = getattr(obj, name)
            if not _is_default(v, default):
                out[name] = enc(v)
        return out

    return encode_dataclass


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


def _encoder(hint: Any) -> Callable[[Any], Any]:
    found = _ENCODERS.get(hint)
    if found is None:
        found = _ENCODERS[hint] = _make_encoder(hint)
    return found


def _make_encoder(hint: Any) -> Callable[[Any], Any]:
    """Identity where the value is JSON data already (most fields): only dataclasses, paths and dates change."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _dataclass_encoder(hint)
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [_encoder(a) for a in args if a is not type(None)]
        if all(e is _same for e in inner):
            return _same
        return lambda obj: None if obj is None else _encoder(type(obj))(obj)
    if typing.get_origin(hint) is tuple:
        items = [_encoder(a) for a in args if a is not Ellipsis]
        if all(e is _same for e in items):
            return _same
        if len(args) == 2 and args[1] is Ellipsis:
            return lambda obj: [items[0](x) for x in obj]
        return lambda obj: [enc(x) for enc, x in zip(items, obj, strict=True)]
    if hint in (Path, dt.date) or (isinstance(hint, type) and issubclass(hint, (Path, dt.date))):
        return str
    return _same


def _same(obj: Any) -> Any:
    return obj


def decode(cls: type[T], data: Any) -> T:
    """The ``cls`` that ``encode`` gave ``data`` for (a ValueError names the field when ``data`` does not fit)."""
    return _decoder(cls)(data)  # type: ignore[no-any-return]


def freeze(value: Any) -> Any:
    """A TOML value as kcgate's frozen records hold it: lists become tuples (nested), tables stay dicts."""
    return tuple(freeze(x) for x in value) if isinstance(value, list) else value


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
    raise TypeError(f"kcgate.util.frozen_json cannot decode {hint!r}: add it to the codec")


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
