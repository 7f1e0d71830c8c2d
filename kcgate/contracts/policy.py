"""Gate policy and waivers, as declared in contracts.toml ([policy], [[contract.waiver]]). No torch."""

from __future__ import annotations

import datetime as dt
import fnmatch
from dataclasses import dataclass, field

from kcgate.vocab.categories import CATEGORY_TABLE

# Diff categories that can block, and the default set (what PRODUCT.md calls blocking): from the table.
BLOCKABLE = tuple(c.name for c in CATEGORY_TABLE if c.blockable)
DEFAULT_BLOCK_ON = tuple(c.name for c in CATEGORY_TABLE if c.blocks_by_default)


WAIVER_KINDS = ("violation", "error")  # what a waiver covers: failing cases, or cases that could not run


@dataclass(frozen=True)
class Waiver:
    """A known, accepted violation (or, with kind "error", a known error) of one contract on matching
    runners, until a date."""

    contract_id: str
    runner: str  # fnmatch pattern over runner names, e.g. "apple-*"
    until: dt.date
    reason: str
    owner: str = ""
    line: int | None = None
    kind: str = "violation"  # one of WAIVER_KINDS

    def matches(self, contract_id: str, runner: str, kind: str = "violation") -> bool:
        return (
            kind == self.kind and contract_id == self.contract_id and fnmatch.fnmatchcase(runner, self.runner)
        )

    def expired(self, today: dt.date) -> bool:
        return today > self.until


ROUNDING_MIN_MISSES = 8  # below 8 elements' worth, a change in how many miss correct rounding is noise


@dataclass(frozen=True)
class DriftRule:
    """When a case that passes in both runs has drifted (``policy.budget_drift``).

    ``ratio``: the budget rose by more than this factor, both sides floored at ``floor`` first (so noise
    far below the bound, 1e-6 -> 1e-5, is not drift, while 0.001 -> 0.4 is 400x). ``absolute``: the budget
    rose by more than this amount (kcgate 0.1's rule; a bare number in contracts.toml). Either rule firing
    is drift; at least one is set.
    """

    ratio: float | None = 4.0
    floor: float = 1e-3
    absolute: float | None = None
    # 16- and 8-bit outputs: the share of elements not correctly rounded is compared too (docs/diff.md),
    # floored at 0.1% and at ROUNDING_MIN_MISSES elements' worth, so a correct kernel's few misses (0 on one
    # seed, 2 of 4,096 on another) are not drift
    rounding_floor: float = 1e-3

    def factor(self, base: float | None, now: float | None) -> float | None:
        """now / base with both floored: the factor the diff reports (None when a side has no budget)."""
        if base is None or now is None:
            return None
        return max(now, self.floor) / max(base, self.floor)

    def drifted(self, base: float | None, now: float | None) -> bool:
        if base is None or now is None:
            return False
        factor = self.factor(base, now)
        by_ratio = self.ratio is not None and factor is not None and factor > self.ratio
        by_amount = self.absolute is not None and now - base > self.absolute
        return by_ratio or by_amount

    def rounding_factor(self, base: float | None, now: float | None, elements: int = 0) -> float | None:
        """now / base of the share of elements not correctly rounded (16- and 8-bit outputs), both floored at
        ``rounding_floor`` and at ROUNDING_MIN_MISSES of the case's ``elements``."""
        if base is None or now is None:
            return None
        floor = max(self.rounding_floor, ROUNDING_MIN_MISSES / elements if elements > 0 else 0.0)
        return max(now, floor) / max(base, floor)

    def rounding_drifted(self, base: float | None, now: float | None, elements: int = 0) -> bool:
        """A low-precision output that misses the correctly rounded result more than ``ratio`` times as often:
        a regression that budget used cannot show, since a correct kernel already sits near 1 there."""
        factor = self.rounding_factor(base, now, elements)
        return self.ratio is not None and factor is not None and factor > self.ratio

    def describe(self) -> str:
        rules = []
        if self.ratio is not None:
            rules.append(
                f"a rise of more than {self.ratio:g}x (budgets floored at {self.floor:g}; for 16- and 8-bit "
                f"outputs also in the share of elements not correctly rounded, floored at {self.rounding_floor:.1%})"
            )
        if self.absolute is not None:
            rules.append(f"a rise of more than {self.absolute:g} in budget used")
        return " or ".join(rules)


@dataclass(frozen=True)
class Policy:
    """What blocks a pull request."""

    block_on: tuple[str, ...] = DEFAULT_BLOCK_ON
    budget_drift: DriftRule = DriftRule()  # default: a rise of more than 4x above a floor of 1e-3
    required_runners: tuple[str, ...] = ()  # fnmatch patterns; a missing leg blocks
    acknowledge_removed: tuple[str, ...] = ()  # contract ids whose removal is intended
    waivers: tuple[Waiver, ...] = field(default_factory=tuple)

    def blocks(self, category: str) -> bool:
        return category in self.block_on

    def waiver_for(self, contract_id: str, runner: str, kind: str = "violation") -> Waiver | None:
        return next((w for w in self.waivers if w.matches(contract_id, runner, kind)), None)

    def is_required(self, runner: str) -> bool:
        return any(fnmatch.fnmatchcase(runner, p) for p in self.required_runners)
