"""Shape constraints and shape classes: the grammar, the membership test, and the held-out shapes drawn
across a class (its extremes, powers of two and their neighbours, tile boundaries, random sizes).

Torch-free (the loader validates constraints with it). Grammar, one or more terms per dimension:
``even``, ``pow2``, ``multiple_of(N)``, ``range(LO, HI)`` (inclusive), and relations to another
dimension named by index or letter: ``multiple_of(DIM)``, ``same_as(DIM)``, ``ratio(DIM, R)``
(this dimension = R x DIM); inside multiple_of a bare number is a size, so name a dimension by letter or
as ``#2``. Several terms: a list of strings, or one string joined by " and ".
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

# Held-out shapes keep the product of their dimensions at most this (or the declared shape's product
# if larger), so an extreme shape stays affordable for the fp64 oracle on a 2-core CPU (README, C-CMP-03).
MAX_ELEMENTS = 1 << 22
DEFAULT_SPAN = 8  # a dimension with no declared range spans range(1, max(8 x declared, 512))
DEFAULT_HI = 512
MAX_NUMBER = 1 << 40  # no dimension, step or ratio is larger: bigger numbers are typos, never shapes
MAX_DIGITS = 20  # read no longer run of digits (int() of thousands of digits is slow or refused)
TERMS = ("even", "pow2", "multiple_of", "range", "same_as", "ratio")
_DIGITS = re.compile(f"[0-9]{{1,{MAX_DIGITS}}}")
_RATIO = re.compile(f"({_DIGITS.pattern}(?:\\.{_DIGITS.pattern})?)(?:/({_DIGITS.pattern}))?")
_CALL = re.compile(r"^\s*([a-z_0-9]+)\s*(?:\((.*)\))?\s*$")


class ShapeSyntaxError(ValueError):
    """A constraint that does not parse; the message says what is allowed."""


@dataclass(frozen=True)
class Term:
    """One constraint on one dimension: ``kind`` with its number(s) or the other dimension ``ref``."""

    kind: str
    a: float = 0.0
    b: float = 0.0
    ref: int = -1

    def holds(self, shape: Sequence[int], i: int) -> bool:
        v = shape[i]
        other = shape[self.ref] if 0 <= self.ref < len(shape) else 0
        if self.kind == "even":
            return v % 2 == 0
        if self.kind == "pow2":
            return v > 0 and v & (v - 1) == 0
        if self.kind == "range":
            return self.a <= v <= self.b
        if self.kind == "multiple_of":
            step = other if self.ref >= 0 else int(self.a)
            return step > 0 and v % step == 0
        if self.kind == "same_as":
            return v == other
        return abs(v - self.a * other) < 1e-9  # ratio

    def text(self, names: Sequence[str] | None) -> str:
        ref = _name(self.ref, names)
        if self.kind in ("even", "pow2"):
            return self.kind
        if self.kind == "range":
            return f"range({int(self.a)}, {int(self.b)})"
        if self.kind == "multiple_of":
            return f"multiple_of({ref if self.ref >= 0 else int(self.a)})"
        if self.kind == "same_as":
            return f"same_as({ref})"
        return f"ratio({ref}, {_number(self.a)})"


Constraints = dict[int, tuple[Term, ...]]


def _number(r: float) -> str:
    """A ratio as the grammar reads it back (never ``1e+06``, which ``:g`` would write)."""
    if r == int(r):
        return str(int(r))
    text = repr(r)
    return text if "e" not in text else str(Fraction(r).limit_denominator(MAX_NUMBER))


def _name(i: int, names: Sequence[str] | None) -> str:
    return names[i] if names and 0 <= i < len(names) else str(i)


def dim_index(key: str | int, names: Sequence[str] | None, ndim: int | None) -> int:
    """A dimension named by its letter (the op's shape form) or by its index."""
    text = str(key).strip().removeprefix("#")  # "#2": dimension 2 where a bare number would be a size
    if names and text in names:
        return list(names).index(text)
    if _DIGITS.fullmatch(text):
        i = int(text)
        if ndim is None or i < ndim:
            return i
        raise ShapeSyntaxError(f"dimension {i} is out of range: the shapes have {ndim} dimensions")
    known = f"one of {', '.join(names)} or an index" if names else "a dimension index (0, 1, ...)"
    raise ShapeSyntaxError(f"unknown dimension {text!r}: use {known}")


def parse_terms(
    value: str | Sequence[str], names: Sequence[str] | None, ndim: int | None
) -> tuple[Term, ...]:
    """``"even and range(2, 256)"`` or ``["even", "range(2, 256)"]`` -> terms (ShapeSyntaxError if bad)."""
    parts = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else []
    if not parts or not all(isinstance(p, str) for p in parts):
        raise ShapeSyntaxError(f"expected a string or a list of strings, not {value!r}")
    return tuple(_term(t, names, ndim) for p in parts for t in re.split(r"\s+and\s+", p.strip()) if t)


def _term(text: str, names: Sequence[str] | None, ndim: int | None) -> Term:
    m = _CALL.match(text)
    if not m or m.group(1) not in TERMS:
        raise ShapeSyntaxError(f"unknown constraint {text!r}: use {', '.join(_forms())}")
    kind, args = m.group(1), [a.strip() for a in (m.group(2) or "").split(",") if a.strip()]
    want = {"even": 0, "pow2": 0, "multiple_of": 1, "range": 2, "same_as": 1, "ratio": 2}[kind]
    if len(args) != want:
        raise ShapeSyntaxError(f"{text!r}: {kind} takes {want} argument(s), e.g. {_example(kind)}")
    if kind == "range":
        lo, hi = _int(args[0], text), _int(args[1], text)
        if not 1 <= lo <= hi:
            raise ShapeSyntaxError(f"{text!r}: need 1 <= LO <= HI")
        return Term("range", lo, hi)
    if kind == "multiple_of" and re.fullmatch(r"\d+", args[0]):
        return Term("multiple_of", max(_int(args[0], text), 1))
    if kind in ("multiple_of", "same_as"):
        return Term(kind, ref=dim_index(args[0], names, ndim))
    if kind == "ratio":
        r = _ratio(args[1], text)
        return Term("ratio", r, ref=dim_index(args[0], names, ndim))
    return Term(kind)


def _int(s: str, text: str) -> int:
    if not _DIGITS.fullmatch(s):
        raise ShapeSyntaxError(f"{text!r}: {s!r} is not a positive integer (at most {MAX_NUMBER})")
    if int(s) > MAX_NUMBER:
        raise ShapeSyntaxError(f"{text!r}: {s!r} is over {MAX_NUMBER}, larger than any dimension")
    return int(s)


def _ratio(s: str, text: str) -> float:
    m = _RATIO.fullmatch(s)
    r = float(m.group(1)) / float(m.group(2) or 1) if m and float(m.group(2) or 1) > 0 else 0.0
    if not 1 / MAX_NUMBER <= r <= MAX_NUMBER:
        raise ShapeSyntaxError(
            f"{text!r}: the ratio {s!r} must be a positive number or a fraction like 1/4 "
            f"(between 1/{MAX_NUMBER} and {MAX_NUMBER})"
        )
    return r


def _forms() -> list[str]:
    return [
        "even",
        "pow2",
        "multiple_of(16)",
        "range(16, 8192)",
        "multiple_of(DIM)",
        "same_as(DIM)",
        "ratio(DIM, 2)",
    ]


def _example(kind: str) -> str:
    return {
        "even": "even",
        "pow2": "pow2",
        "multiple_of": "multiple_of(16)",
        "range": "range(16, 8192)",
        "same_as": "same_as(k)",
        "ratio": "ratio(k, 4)",
    }[kind]


def parse(
    table: Mapping[str, str | Sequence[str]], names: Sequence[str] | None, ndim: int | None
) -> Constraints:
    """A ``{dim: constraint}`` table -> constraints by dimension index; rejects relation cycles."""
    out: dict[int, tuple[Term, ...]] = {}
    for key, value in table.items():
        i = dim_index(key, names, ndim)
        terms = parse_terms(value, names, ndim)
        if any(t.ref == i for t in terms):
            raise ShapeSyntaxError(f"dimension {_name(i, names)} cannot be related to itself")
        out[i] = out.get(i, ()) + terms
    _order(out, names)
    return out


def merge(*parts: Mapping[int, tuple[Term, ...]]) -> Constraints:
    out: dict[int, tuple[Term, ...]] = {}
    for part in parts:
        for i, terms in part.items():
            out[i] = out.get(i, ()) + tuple(terms)
    return out


def implied(
    shapes: Sequence[Sequence[int]], pairs: Sequence[tuple[int, int]], named: set[int]
) -> Constraints:
    """The relations every declared shape shows between the related dimension pairs ``(a, b)``: a = b in
    all of them gives ``same_as(b)`` on a, b dividing a in all ``multiple_of(b)``; a pair with a dimension in
    ``named`` (the contract's own shape_class or shape_constraints say) is left to them."""
    out: dict[int, tuple[Term, ...]] = {}
    for a, b in pairs:
        if a in named or b in named or not shapes or any(max(a, b) >= len(s) for s in shapes):
            continue
        if all(s[a] == s[b] for s in shapes):
            out[a] = out.get(a, ()) + (Term("same_as", ref=b),)
        elif all(s[b] > 0 and s[a] % s[b] == 0 for s in shapes):
            out[a] = out.get(a, ()) + (Term("multiple_of", ref=b),)
    return out


def violations(
    shape: Sequence[int], cons: Mapping[int, tuple[Term, ...]], names: Sequence[str] | None = None
) -> list[str]:
    """The constraints ``shape`` breaks, as text (e.g. ``"head_dim = 63: even"``)."""
    return [
        f"{_name(i, names)} = {shape[i]}: {t.text(names)}"
        for i, terms in sorted(cons.items())
        if i < len(shape)
        for t in terms
        if not t.holds(shape, i)
    ]


def _order(cons: Mapping[int, tuple[Term, ...]], names: Sequence[str] | None) -> list[int]:
    """Dimensions with relations after the dimensions they refer to (ShapeSyntaxError on a cycle)."""
    deps = {i: {t.ref for t in terms if t.ref >= 0} for i, terms in cons.items()}
    done: list[int] = []
    while len(done) < len(deps):
        ready = [i for i in deps if i not in done and all(r in done or r not in deps for r in deps[i])]
        if not ready:
            cycle = ", ".join(_name(i, names) for i in deps if i not in done)
            raise ShapeSyntaxError(f"the relations between dimensions {cycle} form a cycle")
        done += sorted(ready)
    return done


# ---- drawing held-out shapes -----------------------------------------------------------------------


@dataclass(frozen=True)
class Domain:
    """The values one dimension may take, before relations: [lo, hi] on a step grid, maybe powers of two."""

    lo: int
    hi: int
    step: int = 1
    pow2: bool = False

    def ok(self, v: int) -> bool:
        return self.lo <= v <= self.hi and v % self.step == 0 and (not self.pow2 or v & (v - 1) == 0)

    def snap(self, v: float, up: bool = False) -> int:
        """The nearest allowed value at or below ``v`` (at or above with ``up``), clamped to the domain."""
        if self.pow2:
            vals = [p for p in self.values() if p >= v] if up else [p for p in self.values() if p <= v]
            return (min(vals) if up else max(vals)) if vals else (self.first() if not up else self.last())
        v = min(max(v, self.lo), self.hi)
        s = math.ceil(v / self.step) * self.step if up else math.floor(v / self.step) * self.step
        if s < self.lo:
            s = math.ceil(self.lo / self.step) * self.step
        if s > self.hi:
            s = math.floor(self.hi / self.step) * self.step
        return int(s)

    def first(self) -> int:
        return min(self.values()) if self.pow2 else self.snap(self.lo, up=True)

    def last(self) -> int:
        return max(self.values()) if self.pow2 else self.snap(self.hi)

    def values(self) -> list[int]:
        """Powers of two in range (pow2 domains only)."""
        return [1 << j for j in range(0, 63) if self.lo <= 1 << j <= self.hi and (1 << j) % self.step == 0]

    def interesting(self, declared: int) -> list[int]:
        """Extremes, powers of two and their neighbours (tile boundaries), the declared size and its neighbours."""
        s = self.step
        near = [declared - s, declared, declared + s, declared // 2, 2 * declared - s]
        pows = [(1 << j) + d for j in range(0, 40) if 1 << j <= self.hi * 2 for d in (-s, 0, s)]
        return sorted({v for v in [self.lo, self.hi, self.first(), self.last(), *near, *pows] if self.ok(v)})


def domain(declared: int, terms: Sequence[Term]) -> Domain:
    """A dimension's domain: its range (default 1 .. max(8 x declared, 512)), step and pow2 flag."""
    lo, hi = 1, max(DEFAULT_SPAN * declared, DEFAULT_HI)
    step, pow2 = 1, False
    for t in terms:
        if t.kind == "range":
            lo, hi = int(t.a), int(t.b)
        elif t.kind == "even":
            step = math.lcm(step, 2)
        elif t.kind == "multiple_of" and t.ref < 0:
            step = math.lcm(step, int(t.a))
        elif t.kind == "pow2":
            pow2 = True
    return Domain(lo, hi, step, pow2)


def held_out(
    declared: Sequence[int],
    cons: Mapping[int, tuple[Term, ...]],
    n: int,
    seed: int,
    max_elements: int = MAX_ELEMENTS,
    cost: Callable[[Sequence[int]], float] = math.prod,
) -> list[tuple[int, ...]]:
    """The class's extremes (every dimension at its smallest; each dimension at its largest with the
    others as declared) then ``n`` shapes drawn across the class; all satisfy ``cons``, none is the
    declared shape, each has at most ``max(max_elements, prod(declared))`` elements (product of dims)."""
    declared = tuple(int(d) for d in declared)
    cap = max(max_elements, cost(declared))
    doms = [domain(d, cons.get(i, ())) for i, d in enumerate(declared)]
    base = tuple(doms[i].snap(d) for i, d in enumerate(declared))
    rng = random.Random(seed)
    wanted: list[tuple[tuple[int, ...], int]] = [(tuple(dm.first() for dm in doms), -1)]
    wanted += [
        (tuple(doms[j].last() if j == i else base[j] for j in range(len(base))), i) for i in range(len(base))
    ]
    out: list[tuple[int, ...]] = []
    for shape, pinned in wanted:
        fitted = _fit(list(shape), pinned, doms, cons, cap, cost)
        if fitted is not None and fitted != declared and fitted not in out:
            out.append(fitted)
    extremes = len(out)
    for _ in range(
        20 * n
    ):  # draws that break a relation are drawn again, so n shapes come back when they can
        if len(out) >= extremes + n:
            break
        fitted = _fit(list(_draw(doms, declared, rng)), -1, doms, cons, cap, cost)
        if fitted is not None and fitted != declared and fitted not in out:
            out.append(fitted)
    return out


def _draw(doms: Sequence[Domain], declared: Sequence[int], rng: random.Random) -> tuple[int, ...]:
    shape = []
    for dm, d in zip(doms, declared):
        if rng.random() < 0.6:
            shape.append(rng.choice(dm.interesting(d)))
        else:  # log-uniform over the whole range
            shape.append(dm.snap(math.exp(rng.uniform(math.log(dm.lo), math.log(dm.hi)))))
    return tuple(shape)


def _fit(
    shape: list[int],
    pinned: int,
    doms: Sequence[Domain],
    cons: Mapping[int, tuple[Term, ...]],
    cap: float,
    cost: Callable[[Sequence[int]], float] = math.prod,
) -> tuple[int, ...] | None:
    """Apply the relations, then halve the largest unpinned dimensions until the product fits the cap."""
    order = [i for i in _order(cons, None) if any(t.ref >= 0 for t in cons[i])]
    for _ in range(200):
        _relate(shape, order, doms, cons)
        if cost(shape) <= cap:
            break
        free = [
            i
            for i in range(len(shape))
            if i != pinned and i not in order and doms[i].snap(shape[i] / 2) < shape[i]
        ]
        i = max(free or [pinned], key=lambda j: shape[j])
        smaller = doms[i].snap(shape[i] / 2)
        if smaller >= shape[i]:
            return None
        shape[i] = smaller
    result = tuple(shape)
    ok = cost(result) <= cap and not violations(result, cons) and all(d.ok(v) for d, v in zip(doms, result))
    return result if ok else None


def _relate(
    shape: list[int], order: Sequence[int], doms: Sequence[Domain], cons: Mapping[int, tuple[Term, ...]]
) -> None:
    for i in order:
        for t in cons[i]:
            other = shape[t.ref]
            if t.kind == "same_as":
                shape[i] = other
            elif t.kind == "ratio":
                shape[i] = max(1, round(t.a * other))
            elif t.kind == "multiple_of" and t.ref >= 0:
                k = max(1, round(shape[i] / other))
                shape[i] = k * other if k * other <= doms[i].hi else max(1, doms[i].hi // other) * other


def describe(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))
