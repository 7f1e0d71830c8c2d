"""The diff categories: every change between a baseline and a current run has one, defined in one table.
No torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


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
    waiver: str = ""  # "applied": a waiver (live or expired) covers the case; "unused": it covers a pass
    expired: bool = False  # the waiver that covers it has expired (the gate lists it apart from live ones)
    shows_factor: bool = False  # its rows always show the budget's factor (it is about the budget moving)
    no_results: bool = False  # a runner produced nothing: its rows say so in place of a cause
    junit_error: bool = False  # a JUnit <error> (not a <failure>) when blocking: nothing was judged

    @property
    def silent(self) -> bool:
        """Nothing happened: counted, never listed or annotated."""
        return self.quiet and self.tone == "good"


# Every case lands in exactly one category (a property test checks exhaustiveness and exclusivity).
# This table is the only place a category is defined; adding one is one row.
# fmt: off
CATEGORY_TABLE: tuple[Category, ...] = (
    # name               severity label                  tone       quiet  block  default junit_skipped
    Category("new-violation",    1,  "new violation",       "warn",    False, True,  True,  False,
             "failed now, passed (or absent) in the baseline, or there is no comparable baseline: a failure "
             "is a violation whether or not it can be compared"),
    Category("fixed",            12, "fixed",               "good",    False, False, False, False,
             "failed in the baseline, passes now"),
    Category("still-failing",    7,  "still failing",       "warn",    False, True,  False, False,
             "failed in both"),
    Category("pre-existing",     8,  "pre-existing",        "warn",    False, True,  False, False,
             "fails or errors now, and main does too on the same inputs: the base commit's rerun of the case "
             "with its seed fails alike (kcgate run --base-ref), or the baseline failed or errored on the same "
             "seed; main's problem, never this PR's (docs/diff.md#attribution)"),
    Category("waived",           11, "waived",              "quiet",   True,  False, False, True,
             "fails now, covered by a live waiver", waiver="applied"),
    Category("expired-waiver",   3,  "expired waiver",      "warn",    False, True,  True,  False,
             "fails now, its waiver has expired",
             "policy.block_on, the waiver's until date has passed", waiver="applied", expired=True),
    Category("unexpected-pass",  10, "passes while waived", "warn",    False, True,  False, False,
             "passes now while a waiver still covers it: remove the waiver", waiver="unused"),
    Category("budget-drift",     9,  "budget drift",        "warn",    False, True,  False, False,
             "passes in both, but budget_used (for 16- and 8-bit outputs also the share of elements not "
             "correctly rounded) rose by more than policy.budget_drift (4x by default), or it passes with "
             "an inconclusive note: a statistical verdict undecided after its extra trials (older results: a "
             "limitation note; docs/sensitivity.md#decided-not-drawn)",
             "policy.block_on, beyond policy.budget_drift", shows_factor=True),
    Category("unchanged",        14, "unchanged",           "good",    True,  False, False, False,
             "passes in both, no drift"),
    Category("new",              13, "new",                 "good",    False, False, False, False,
             "passes now, not in the baseline"),
    Category("removed",          4,  "removed",             "warn",    False, True,  True,  True,
             "in the baseline, not now (the contract or case disappeared)",
             "policy.block_on, unless the contract is in policy.acknowledge_removed"),
    Category("error",            2,  "error",               "warn",    False, True,  True,  False,
             "the case could not be evaluated now (crash, timeout, refused)", junit_error=True),
    Category("incomparable",     5,  "incomparable",        "unknown", False, True,  False, True,
             "does not fail now, and the baseline has a different fingerprint; never silently compared"),
    Category("unverified",       6,  "unverified",          "unknown", False, True,  False, True,
             "does not fail now, and no baseline exists for this runner"),
    Category("missing-runner",   0,  "missing runner",      "warn",    False, True,  True,  True,
             "a required runner produced no results at all",
             "policy.block_on, for a runner in policy.required_runners or --expect-runner", no_results=True),
)
# fmt: on
CATEGORY = {c.name: c for c in CATEGORY_TABLE}
CATEGORIES = tuple(CATEGORY)


def subset(test: Callable[[Category], bool]) -> frozenset[str]:
    """The names of the categories a predicate over the table picks."""
    return frozenset(c.name for c in CATEGORY_TABLE if test(c))


QUIET = subset(lambda c: c.quiet)  # folded away in summaries
SILENT = subset(lambda c: c.silent)  # not even listed: nothing changed
NOTICE = subset(lambda c: c.tone in ("good", "quiet") and not c.silent)  # good news and waivers
UNKNOWN = subset(lambda c: c.tone == "unknown")  # no comparable baseline
WAIVER_APPLIED = subset(lambda c: c.waiver == "applied")
WAIVER_DECIDED = subset(lambda c: bool(c.waiver))  # a waiver decides the category, applied or unused
BLOCKS_BY_DEFAULT = subset(lambda c: c.blocks_by_default)
EXPIRED = subset(lambda c: c.expired)  # covered by an expired waiver
SHOWS_FACTOR = subset(lambda c: c.shows_factor)  # the budget's factor shown on every row
NO_RESULTS = subset(lambda c: c.no_results)  # a runner produced nothing
JUNIT_ERROR = subset(lambda c: c.junit_error)  # a JUnit <error> when blocking
