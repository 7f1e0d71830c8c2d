"""Words, icons and ordering for diff categories, shared by every renderer so they never disagree."""

from __future__ import annotations

from kcgate.gate.model import CaseChange
from kcgate.vocab.categories import CATEGORY_TABLE, QUIET, SHOWS_FACTOR

# Most severe first: the order rows, annotations and test cases are listed in.
SEVERITY = tuple(c.name for c in sorted(CATEGORY_TABLE, key=lambda c: c.severity))
LABELS = {c.name: c.label for c in CATEGORY_TABLE}
GOOD = frozenset(c.name for c in CATEGORY_TABLE if c.tone == "good")
UNKNOWN = frozenset(c.name for c in CATEGORY_TABLE if c.tone == "unknown")  # never shown as good


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
    if f is None or not (change.category in SHOWS_FACTOR or f >= 2 or f <= 0.5):
        return ""
    return f" (×{f:.3g})" if f < 1e6 else f" (×{f:.2e})"
