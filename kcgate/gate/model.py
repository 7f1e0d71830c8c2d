"""The diff model: every change between a baseline and a current run has a name. No torch.

``kcgate.gate.diff`` computes these records; ``kcgate.report`` and the renderers consume them.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Category:
    """One diff category: everything any module says about it."""

    name: str
    severity: int  # 0 = most severe: the order rows, annotations and test cases are listed in
    label: str  # the words renderers print
    tone: str  # good | quiet | unknown (no comparable baseline) | warn: picks the icon when not blocking
    quiet: bool  # nothing to look at: folded away in summaries
    blockable: bool  # may appear in [policy] block_on / --fail-on
    blocks_by_default: bool  # in the default block_on (what PRODUCT.md calls blocking)
    junit_skipped: bool  # a JUnit <skipped> test case when not blocking (no verdict to give)
    meaning: str
    rule: str = "policy.block_on"  # the [policy] rule that makes it block (the gate's reasons name it)


# Every case lands in exactly one category (a property test checks exhaustiveness and exclusivity).
# This table is the only place a category is defined; adding one is one row.
# fmt: off
CATEGORY_TABLE: tuple[Category, ...] = (
    # name               severity label                  tone       quiet  block  default junit_skipped
    Category("new-violation",    1,  "new violation",       "warn",    False, True,  True,  False,
             "failed now, passed (or absent) in the baseline"),
    Category("fixed",            11, "fixed",               "good",    False, False, False, False,
             "failed in the baseline, passes now"),
    Category("still-failing",    7,  "still failing",       "warn",    False, True,  False, False,
             "failed in both"),
    Category("waived",           10, "waived",              "quiet",   True,  False, False, True,
             "fails now, covered by a live waiver"),
    Category("expired-waiver",   3,  "expired waiver",      "warn",    False, True,  True,  False,
             "fails now, its waiver has expired",
             "policy.block_on, the waiver's until date has passed"),
    Category("unexpected-pass",  9,  "passes while waived", "warn",    False, True,  False, False,
             "passes now while a waiver still covers it: remove the waiver"),
    Category("budget-drift",     8,  "budget drift",        "warn",    False, True,  False, False,
             "passes in both, but budget_used rose by more than policy.budget_drift (4x by default)",
             "policy.block_on, beyond policy.budget_drift"),
    Category("unchanged",        13, "unchanged",           "good",    True,  False, False, False,
             "passes in both, no drift"),
    Category("new",              12, "new",                 "good",    False, False, False, False,
             "passes now, not in the baseline"),
    Category("removed",          4,  "removed",             "warn",    False, True,  True,  True,
             "in the baseline, not now (the contract or case disappeared)",
             "policy.block_on, unless the contract is in policy.acknowledge_removed"),
    Category("error",            2,  "error",               "warn",    False, True,  True,  False,
             "the case could not be evaluated now (crash, timeout, refused)"),
    Category("incomparable",     5,  "incomparable",        "unknown", False, True,  False, True,
             "the baseline has a different fingerprint; never silently compared"),
    Category("unverified",       6,  "unverified",          "unknown", False, True,  False, True,
             "no comparable baseline exists for this runner"),
    Category("missing-runner",   0,  "missing runner",      "warn",    False, True,  True,  True,
             "a required runner produced no results at all",
             "policy.block_on, for a runner in policy.required_runners or --expect-runner"),
)
# fmt: on
CATEGORY = {c.name: c for c in CATEGORY_TABLE}


def declared_in(contracts_file: str, source: str) -> str:
    """The file a case's contract is declared in, as annotations name it: the contracts file, or a
    discovered contract's ``source`` joined to the contracts file's directory."""
    if not source:
        return contracts_file
    return posixpath.normpath(posixpath.join(posixpath.dirname(contracts_file), source))


CATEGORIES = tuple(CATEGORY)


@dataclass(frozen=True)
class CaseChange:
    """One case's category, with both sides' numbers for rendering."""

    category: str
    runner: str
    case_id: str
    contract_id: str
    klass: str = ""
    status: str = ""  # current status ("" when removed / missing)
    base_status: str = ""
    budget_used: float | None = None
    base_budget_used: float | None = None
    signature: str = ""  # current signature summary
    message: str = ""
    line: int | None = None  # contracts.toml line of the contract (or source's)
    source: str = (
        ""  # the file the contract is declared in, relative to contracts.toml's directory; "": that file
    )
    blocking: bool = False
    dtype: str = ""
    seed: int | None = None  # the case's own seed (plan.base_seed_for gives the --seed that reruns it)
    cause: str = ""  # the signature's cause key, e.g. "low-precision-accumulator"
    max_ulp: float | None = None
    max_abs_err: float | None = None
    # current / base budget used, both floored at policy.budget_drift.floor (what the drift rule compares);
    # None when either side has no budget
    budget_factor: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CaseChange:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class RunnerDiff:
    """The diff of one runner's current run against its baseline."""

    runner: str
    fingerprint_key: str
    base_fingerprint_key: str  # "" when there is no baseline
    changes: tuple[CaseChange, ...]

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(CATEGORIES, 0)
        for c in self.changes:
            out[c.category] += 1
        return out


@dataclass(frozen=True)
class Verdict:
    """The gate's decision over all runners."""

    runners: tuple[RunnerDiff, ...]

    @property
    def changes(self) -> tuple[CaseChange, ...]:
        return tuple(c for r in self.runners for c in r.changes)

    @property
    def blocking(self) -> tuple[CaseChange, ...]:
        return tuple(c for c in self.changes if c.blocking)

    @property
    def passed(self) -> bool:
        return not self.blocking

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(CATEGORIES, 0)
        for c in self.changes:
            out[c.category] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "counts": self.counts(),
            "runners": [
                {
                    "runner": r.runner,
                    "fingerprint_key": r.fingerprint_key,
                    "base_fingerprint_key": r.base_fingerprint_key,
                    "changes": [c.to_json() for c in r.changes],
                }
                for r in self.runners
            ],
        }
