"""Gate policy and waivers, as declared in contracts.toml ([policy], [[contract.waiver]]). No torch."""

from __future__ import annotations

import datetime as dt
import fnmatch
from dataclasses import dataclass, field

# Diff categories that can block; the default set is what PRODUCT.md calls blocking.
BLOCKABLE = (
    "new-violation",
    "still-failing",
    "error",
    "missing-runner",
    "expired-waiver",
    "removed",
    "incomparable",
    "budget-drift",
    "unexpected-pass",
    "unverified",
)
DEFAULT_BLOCK_ON = ("new-violation", "error", "missing-runner", "expired-waiver", "removed")


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


@dataclass(frozen=True)
class Policy:
    """What blocks a pull request."""

    block_on: tuple[str, ...] = DEFAULT_BLOCK_ON
    budget_drift: float = 0.5  # absolute rise in budget_used that counts as drift (0.2 -> 0.7)
    required_runners: tuple[str, ...] = ()  # fnmatch patterns; a missing leg blocks
    acknowledge_removed: tuple[str, ...] = ()  # contract ids whose removal is intended
    waivers: tuple[Waiver, ...] = field(default_factory=tuple)

    def blocks(self, category: str) -> bool:
        return category in self.block_on

    def waiver_for(self, contract_id: str, runner: str, kind: str = "violation") -> Waiver | None:
        return next((w for w in self.waivers if w.matches(contract_id, runner, kind)), None)

    def is_required(self, runner: str) -> bool:
        return any(fnmatch.fnmatchcase(runner, p) for p in self.required_runners)
