"""Words, icons and ordering for diff categories, shared by every renderer so they never disagree."""

from __future__ import annotations

from kcgate.diff_model import CATEGORIES, CaseChange

# Most severe first: the order rows, annotations and test cases are listed in.
SEVERITY = (
    "missing-runner",
    "new-violation",
    "error",
    "expired-waiver",
    "removed",
    "incomparable",
    "unverified",
    "still-failing",
    "budget-drift",
    "unexpected-pass",
    "waived",
    "fixed",
    "new",
    "unchanged",
)

LABELS = {
    "new-violation": "new violation",
    "fixed": "fixed",
    "still-failing": "still failing",
    "waived": "waived",
    "expired-waiver": "expired waiver",
    "unexpected-pass": "passes while waived",
    "budget-drift": "budget drift",
    "unchanged": "unchanged",
    "new": "new",
    "removed": "removed",
    "error": "error",
    "incomparable": "incomparable",
    "unverified": "unverified",
    "missing-runner": "missing runner",
}

GOOD = frozenset({"fixed", "new", "unchanged"})
QUIET = frozenset({"waived", "unchanged"})
UNKNOWN = frozenset({"unverified", "incomparable"})  # no comparable baseline: never shown as good

assert set(SEVERITY) == set(CATEGORIES) == set(LABELS), "labels.py is out of step with diff_model.CATEGORIES"


def label(category: str) -> str:
    """Human words for a category (the category itself when unknown)."""
    return LABELS.get(category, category)


def rank(change: CaseChange) -> tuple[int, int, str, str, str]:
    """Sort key: blocking first, then by severity, then by runner, contract and case."""
    sev = SEVERITY.index(change.category) if change.category in SEVERITY else len(SEVERITY)
    return (0 if change.blocking else 1, sev, change.runner, change.contract_id, change.case_id)


def icon(change: CaseChange) -> str:
    """One glyph: blocking, good, quiet or worth a look."""
    if change.blocking:
        return "❌"
    if change.category in GOOD:
        return "✅"
    if change.category in QUIET:
        return "➖"
    if change.category in UNKNOWN:
        return "❔"
    return "⚠️"


def factor_text(change: CaseChange) -> str:
    """' (×400)' after a budget span: on every drift row, and wherever the budget moved 2x or more either way
    (budgets compare as a ratio: 0.001 -> 0.4 is an order-of-magnitude change even far below 1)."""
    f = change.budget_factor
    if f is None or not (change.category == "budget-drift" or f >= 2 or f <= 0.5):
        return ""
    return f" (×{f:.3g})" if f < 1e6 else f" (×{f:.2e})"
