"""The loader's generic checks, run from the rows of ``kcgate.contracts.fields``: type, allowed value, range
and unknown key (with the closest match). Each problem is worded from the row: the file's line, the key
path, what is wrong and how to write it. Bespoke cross-checks between keys are in ``kcgate.contracts.validate``. No torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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
        self.strict_imports = False  # a kernel in a package not installed here: an error, not a warning
        self.located: dict[tuple[str, tuple[Any, ...]], Any] = {}  # locate.locate's answers for this load

    def add(self, path: Path_, where: str, message: str, fix: str = "") -> None:
        self.problems.append(Problem(self.file, self.lines.find(*path) or 1, where, message, fix))

    def warn(self, path: Path_, where: str, message: str, fix: str = "") -> None:
        self.warnings.append(Problem(self.file, self.lines.find(*path) or 1, where, message, fix))


@dataclass(frozen=True)
class At:
    """Where a value sits: its key path in the parsed file (for the line), the words that name it in a
    message ("contract 'gemm'.tolerance.ulp"), and the collector its problems go to."""

    path: Path_
    where: str
    col: Collector

    def key(self, k: Any, index: int | None = None) -> At:
        """Key ``k`` of this table (``index``: item ``index`` of the list there, found at the key's line)."""
        where = f"{self.where}.{k}" if self.where else str(k)
        return At(self.path + (k,), where if index is None else f"{where}[{index}]", self.col)

    def absent(self, k: str) -> At:
        """Key ``k``, which the table lacks: named as the key, found at the table's line."""
        return At(self.path, f"{self.where}.{k}" if self.where else k, self.col)

    def item(self, index: int) -> At:
        """Item ``index`` of the list here, found at this key's line."""
        return At(self.path, f"{self.where}[{index}]", self.col)

    def add(self, message: str, fix: str = "") -> None:
        self.col.add(self.path, self.where, message, fix)

    def warn(self, message: str, fix: str = "") -> None:
        self.col.warn(self.path, self.where, message, fix)

    @property
    def line(self) -> int | None:
        return self.col.lines.find(*self.path)


def unknown_keys(d: dict[str, Any], allowed: Iterable[str], at: At) -> None:
    """Every key of ``d`` outside ``allowed`` is a problem naming the closest allowed key."""
    known = allowed if isinstance(allowed, (set, frozenset)) else set(allowed)
    for key in d:
        if key not in known:
            at.key(key).add("unknown key", suggest(key, sorted(known)))


def value(d: dict[str, Any], f: Field, at: At) -> Any:
    """Row ``f``'s value in table ``d`` (located by ``at``), checked as the row says: None when it is absent (a
    problem if the row is required) or wrong (a problem)."""
    if f.key not in d:
        if f.required:
            at.absent(f.key).add(f"missing required key `{f.key}`", _add_fix(f))
        return None
    return READERS[f.type](d[f.key], f, at.key(f.key))


def given(t: dict[str, Any], table: Field, at: At) -> dict[str, Any]:
    """The keys of ``t`` that ``table``'s rows check generically, each value checked (None if wrong); the
    cost follows the keys given, not the rows (10,000 contracts mostly leave their tables empty)."""
    rows = table.by_key
    return {k: value(t, rows[k], at) for k in t if k in rows and rows[k].type in READERS}


def with_defaults(table: Field, values: dict[str, Any]) -> dict[str, Any]:
    """``table``'s defaults, overridden by the values that are not None."""
    return {**table.defaults, **{k: v for k, v in values.items() if v is not None}}


def read(d: dict[str, Any], f: Field, at: At) -> Any:
    """Row ``f``'s value in ``d``, or the row's default when it is absent or wrong."""
    v = value(d, f, at)
    return f.default if v is None else v


def _add_fix(f: Field) -> str:
    return f"add {f.example}" if f.example else f"add {f.key} = ... ({suggest('', f.choices)})"


# ---- one reader per row type: (value, row, its location) -> the value, or None if wrong ----


def _string(v: Any, f: Field, at: At) -> str | None:
    if isinstance(v, str):
        return v
    at.add(f"must be a string, not {type(v).__name__}", f'{f.key} = "..."')
    return None


def _string_list(v: Any, f: Field, at: At) -> list[str] | None:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        at.add("must be a list of strings", f'{f.key} = ["..."]')
        return None
    return items


def _strings(v: Any, f: Field, at: At) -> list[str] | None:
    items = _string_list(v, f, at)
    if items is None or not f.choices:
        return items
    return [x for x in items if allowed(x, f, at)]


def allowed(v: str, f: Field, at: At) -> bool:
    """One item of a list is one of the row's allowed values (else a problem naming the closest)."""
    if v in f.choices:
        return True
    at.add(f"unknown value {v!r}", suggest(v, f.choices))
    return False


def _choice(v: Any, f: Field, at: At) -> str | None:
    if isinstance(v, str) and v in f.choices:
        return v
    at.add(f"unknown {f.key} {v!r}", suggest(str(v), f.choices))
    return None


def _is_real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _number(v: Any, f: Field, at: At) -> float | None:
    """A finite number within the row's limits; a row with ``below`` (or a positive one) checks the sign
    first, then says why a smaller value is wrong; ``alternative = "false"`` accepts false (as 0.0)."""
    if v is False and f.alternative == "false":
        return 0.0
    lo = -math.inf if f.minimum is None else f.minimum
    sign_first = bool(f.below) or (f.exclusive and lo == 0)
    if sign_first and not (_is_real(v) and v > 0):
        at.add(
            f"must be a positive number, not {v!r}",
            f"set {f.key} to a positive finite number, or remove it to use the class default",
        )
    elif not sign_first and not (_is_real(v) and v >= lo):
        alt = " or false" if f.alternative == "false" else ""
        at.add(f"must be a number >= {lo:g}{alt}, not {v!r}", f.example or f"{f.key} = {f.default}")
    elif v < lo or (f.exclusive and v == lo):
        at.add(f"{f.key} {v:g} {'<=' if f.exclusive else '<'} {lo:g} {f.below}", f.example)
    else:
        return float(v)
    return None


def _integer(v: Any, f: Field, at: At) -> int | None:
    lo = int(f.minimum or 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        example = f.default if isinstance(f.default, int) else max(lo, 2)
        at.add(f"must be an integer >= {lo}, not {v!r}", f"{f.key} = {example}")
    elif f.maximum is not None and v > f.maximum:
        hi = int(f.maximum)
        at.add(
            f"{v} is over the limit of {hi}",
            f"{f.key} = {hi} at most (the limits are in the README's contract-language section)",
        )
    else:
        return v
    return None


def _integers(v: Any, f: Field, at: At) -> tuple[int, ...] | None:
    lo = int(f.minimum or 0)
    if isinstance(v, list) and all(isinstance(k, int) and not isinstance(k, bool) and k >= lo for k in v):
        return tuple(v)
    what = "positive integers" if lo == 1 else f"integers >= {lo}"
    at.add(f"must be a list of {what}", f.example or f"{f.key} = [{max(lo, 2)}]")
    return None


def _boolean(v: Any, f: Field, at: At) -> bool | None:
    if isinstance(v, bool):
        return v
    at.add("must be true or false", f"{f.key} = {str(bool(f.default)).lower()}")
    return None


def _dtype(v: Any, f: Field, at: At) -> str | None:
    name = _string(v, f, at)
    if name is None or not name:
        return None
    if dtypes.canonical(name) not in f.choices:
        at.add(f"unknown dtype {name!r}", suggest(name, f.choices))
        return None
    return dtypes.canonical(name)


def _dtypes(v: Any, f: Field, at: At) -> tuple[str, ...] | None:
    given = _string_list(v, f, at)  # aliases allowed: checked once canonical
    if given == []:  # read as the default before #44: a PR's `dtypes = []` ran float32 unannounced
        at.add("dtypes = [] selects no case", "remove the key for the default (float32), or name the dtypes")
        return None
    names = [dtypes.canonical(n) for n in given or []] or list(f.default)
    no_repeats(names, f.key, at)
    return tuple(n for n in names if allowed(n, f, at))


def _shapes(v: Any, f: Field, at: At) -> tuple[tuple[int, ...], ...] | None:
    ok = isinstance(v, list) and all(
        isinstance(s, list) and s and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in s)
        for s in v
    )
    if not ok:
        at.add("must be a list of shapes of positive integers", f.example)
        return None
    if not v:  # read as the op family's default shapes before #44
        at.add("shapes = [] selects no case", "remove the key for the op family's shapes, or list shapes")
        return None
    shapes = [tuple(s) for s in v]
    no_repeats(shapes, f.key, at)
    return tuple(shapes)


def no_repeats(items: list[Any], key: str, at: At) -> None:
    """A dtype or shape listed twice would give two cases one id, which no results file can hold."""
    seen: set[Any] = set()
    for j, item in enumerate(items):
        if item in seen:
            shown = list(item) if isinstance(item, tuple) else item
            at.item(j).add(
                f"{shown!r} is listed twice (case ids would collide)",
                f"remove the second {shown!r} from {key}",
            )
        seen.add(item)


READERS: dict[str, Callable[[Any, Field, At], Any]] = {
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
