"""The loader's generic checks, run from the rows of ``kcgate.contracts.fields``: type, allowed value, range
and unknown key (with the closest match). Each problem is worded from the row: the file's line, the key
path, what is wrong and how to write it. Bespoke cross-checks between keys stay in ``kcgate.contracts.spec``. No torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from kcgate.contracts.fields import Field
from kcgate.errors import Problem
from kcgate.util import tomlsrc
from kcgate.vocab import dtypes
from kcgate.vocab.classes import suggest

Path_ = tuple[Any, ...]  # a key path into the parsed file: ("contract", 3, "tolerance", "ulp")


class Collector:
    """Collects the problems (and warnings) of one file; ``where`` strings name the contract and key path."""

    def __init__(self, file: str, lines: tomlsrc.LineMap) -> None:
        self.file, self.lines = file, lines
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        self.locate = True
        self.located: dict[tuple[str, tuple[Any, ...]], Any] = {}  # spec.locate's answers for this load

    def add(self, path: Path_, where: str, message: str, fix: str = "") -> None:
        self.problems.append(Problem(self.file, self.lines.find(*path) or 1, where, message, fix))

    def warn(self, path: Path_, where: str, message: str, fix: str = "") -> None:
        self.warnings.append(Problem(self.file, self.lines.find(*path) or 1, where, message, fix))


def unknown_keys(d: dict[str, Any], allowed: Iterable[str], p: Path_, where: str, col: Collector) -> None:
    """Every key of ``d`` outside ``allowed`` is a problem naming the closest allowed key."""
    known = allowed if isinstance(allowed, (set, frozenset)) else set(allowed)
    for key in d:
        if key not in known:
            col.add(
                p + (key,), f"{where}.{key}" if where else key, "unknown key", suggest(key, sorted(known))
            )


def value(d: dict[str, Any], f: Field, p: Path_, where: str, col: Collector) -> Any:
    """Row ``f``'s value in table ``d`` (at path ``p``), checked as the row says: None when it is absent (a
    problem if the row is required) or wrong (a problem)."""
    if f.key not in d:
        if f.required:
            col.add(p, f"{where}.{f.key}", f"missing required key `{f.key}`", _add_fix(f))
        return None
    return READERS[f.type](d[f.key], f, p + (f.key,), f"{where}.{f.key}", col)


def given(t: dict[str, Any], table: Field, p: Path_, where: str, col: Collector) -> dict[str, Any]:
    """The keys of ``t`` that ``table``'s rows check generically, each value checked (None if wrong); the
    cost follows the keys given, not the rows (10,000 contracts mostly leave their tables empty)."""
    rows = table.by_key
    return {k: value(t, rows[k], p, where, col) for k in t if k in rows and rows[k].type in READERS}


def with_defaults(table: Field, values: dict[str, Any]) -> dict[str, Any]:
    """``table``'s defaults, overridden by the values that are not None."""
    return {**table.defaults, **{k: v for k, v in values.items() if v is not None}}


def read(d: dict[str, Any], f: Field, p: Path_, where: str, col: Collector) -> Any:
    """Row ``f``'s value in ``d``, or the row's default when it is absent or wrong."""
    v = value(d, f, p, where, col)
    return f.default if v is None else v


def _add_fix(f: Field) -> str:
    return f"add {f.example}" if f.example else f"add {f.key} = ... ({suggest('', f.choices)})"


# ---- one reader per row type: (value, row, key path, where, collector) -> the value, or None if wrong ----


def _string(v: Any, f: Field, path: Path_, where: str, col: Collector) -> str | None:
    if isinstance(v, str):
        return v
    col.add(path, where, f"must be a string, not {type(v).__name__}", f'{f.key} = "..."')
    return None


def _string_list(v: Any, f: Field, path: Path_, where: str, col: Collector) -> list[str] | None:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        col.add(path, where, "must be a list of strings", f'{f.key} = ["..."]')
        return None
    return items


def _strings(v: Any, f: Field, path: Path_, where: str, col: Collector) -> list[str] | None:
    items = _string_list(v, f, path, where, col)
    if items is None or not f.choices:
        return items
    return [x for x in items if allowed(x, f, path, where, col)]


def allowed(v: str, f: Field, path: Path_, where: str, col: Collector) -> bool:
    """One item of a list is one of the row's allowed values (else a problem naming the closest)."""
    if v in f.choices:
        return True
    col.add(path, where, f"unknown value {v!r}", suggest(v, f.choices))
    return False


def _choice(v: Any, f: Field, path: Path_, where: str, col: Collector) -> str | None:
    if isinstance(v, str) and v in f.choices:
        return v
    col.add(path, where, f"unknown {f.key} {v!r}", suggest(str(v), f.choices))
    return None


def _is_real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _number(v: Any, f: Field, path: Path_, where: str, col: Collector) -> float | None:
    """A finite number within the row's limits; a row with ``below`` (or a positive one) checks the sign
    first, then says why a smaller value is wrong; ``alternative = "false"`` accepts false (as 0.0)."""
    if v is False and f.alternative == "false":
        return 0.0
    lo = -math.inf if f.minimum is None else f.minimum
    sign_first = bool(f.below) or (f.exclusive and lo == 0)
    if sign_first and not (_is_real(v) and v > 0):
        col.add(
            path,
            where,
            f"must be a positive number, not {v!r}",
            f"set {f.key} to a positive finite number, or remove it to use the class default",
        )
    elif not sign_first and not (_is_real(v) and v >= lo):
        alt = " or false" if f.alternative == "false" else ""
        col.add(
            path, where, f"must be a number >= {lo:g}{alt}, not {v!r}", f.example or f"{f.key} = {f.default}"
        )
    elif v < lo or (f.exclusive and v == lo):
        col.add(path, where, f"{f.key} {v:g} {'<=' if f.exclusive else '<'} {lo:g} {f.below}", f.example)
    else:
        return float(v)
    return None


def _integer(v: Any, f: Field, path: Path_, where: str, col: Collector) -> int | None:
    lo = int(f.minimum or 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        example = f.default if isinstance(f.default, int) else max(lo, 2)
        col.add(path, where, f"must be an integer >= {lo}, not {v!r}", f"{f.key} = {example}")
    elif f.maximum is not None and v > f.maximum:
        hi = int(f.maximum)
        col.add(
            path,
            where,
            f"{v} is over the limit of {hi}",
            f"{f.key} = {hi} at most (the limits are in the README's contract-language section)",
        )
    else:
        return v
    return None


def _integers(v: Any, f: Field, path: Path_, where: str, col: Collector) -> tuple[int, ...] | None:
    lo = int(f.minimum or 0)
    if isinstance(v, list) and all(isinstance(k, int) and not isinstance(k, bool) and k >= lo for k in v):
        return tuple(v)
    what = "positive integers" if lo == 1 else f"integers >= {lo}"
    col.add(path, where, f"must be a list of {what}", f.example or f"{f.key} = [{max(lo, 2)}]")
    return None


def _boolean(v: Any, f: Field, path: Path_, where: str, col: Collector) -> bool | None:
    if isinstance(v, bool):
        return v
    col.add(path, where, "must be true or false", f"{f.key} = {str(bool(f.default)).lower()}")
    return None


def _dtype(v: Any, f: Field, path: Path_, where: str, col: Collector) -> str | None:
    name = _string(v, f, path, where, col)
    if name is None or not name:
        return None
    if dtypes.canonical(name) not in f.choices:
        col.add(path, where, f"unknown dtype {name!r}", suggest(name, f.choices))
        return None
    return dtypes.canonical(name)


def _dtypes(v: Any, f: Field, path: Path_, where: str, col: Collector) -> tuple[str, ...] | None:
    given = _string_list(v, f, path, where, col)  # aliases allowed: checked once canonical
    names = [dtypes.canonical(n) for n in given or []] or list(f.default)
    no_repeats(names, f.key, path, where, col)
    return tuple(n for n in names if allowed(n, f, path, where, col))


def _shapes(v: Any, f: Field, path: Path_, where: str, col: Collector) -> tuple[tuple[int, ...], ...] | None:
    ok = isinstance(v, list) and all(
        isinstance(s, list) and s and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in s)
        for s in v
    )
    if not ok:
        col.add(path, where, "must be a list of shapes of positive integers", f.example)
        return None
    shapes = [tuple(s) for s in v]
    no_repeats(shapes, f.key, path, where, col)
    return tuple(shapes)


def no_repeats(items: list[Any], key: str, path: Path_, where: str, col: Collector) -> None:
    """A dtype or shape listed twice would give two cases one id, which no results file can hold."""
    seen: set[Any] = set()
    for j, item in enumerate(items):
        if item in seen:
            shown = list(item) if isinstance(item, tuple) else item
            col.add(
                path,
                f"{where}[{j}]",
                f"{shown!r} is listed twice (case ids would collide)",
                f"remove the second {shown!r} from {key}",
            )
        seen.add(item)


READERS: dict[str, Callable[[Any, Field, Path_, str, Collector], Any]] = {
    "string": _string,
    "strings": _strings,
    "choice": _choice,
    "number": _number,
    "integer": _integer,
    "integers": _integers,
    "boolean": _boolean,
    "dtype": _dtype,
    "dtypes": _dtypes,
    "shapes": _shapes,
}
"""The row types checked generically; the others (import strings, tables, size mappings) by ``spec``."""
