"""One severity per case, whichever gate decided it: above 1 exactly when the case fails.

A case can fail its error bound (``budget_used``), the sensitivity gate (``excess_ratio``), a class probe
(determinism, order, batch, bias: folded into the budget when over 1, each also in ``metrics.extra``) or a
known mistake reproduced bit for bit (the signature's element counts). Each gate is one row of ``GATES``:
how far the case is past that gate's allowance, 1 at the edge. The severity is the largest of them, so a
chart, a heatmap or a drift rule reading it can never show a failing case as a pass:

- a **failed** case: its largest gate number when that is over 1; ``inf`` where no gate recorded a
  finite number over 1 (an infinite budget is written as null; a failure with no number is no pass);
- a **passed** case: its largest gate number, capped at 1 (a pass below the sensitivity gate's line may
  measure over 1 there: it is at the edge, never past it); None where nothing was measured;
- an **error**: ``inf`` (the case could not be evaluated; renderers say "error" from its status);
- a **refused** case: None (no verdict either way).

Derived from the record, so every results file and history log ever written has one. No torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kcgate.results.records import CaseResult, Signature, Status
from kcgate.results.table import CaseTable

_Read = Callable[[float | None, Mapping[str, float], Signature | None], float | None]


@dataclass(frozen=True)
class Gate:
    """One gate's number: how many times its allowance the case's measurement is (1: at the edge); read
    from ``metrics.extra[key]``, or by ``read`` where the number lives elsewhere."""

    name: str
    words: str
    key: str = ""
    read: _Read | None = None

    def value(
        self, budget: float | None, extra: Mapping[str, float], signature: Signature | None
    ) -> float | None:
        return self.read(budget, extra, signature) if self.read else extra.get(self.key)


def _budget(budget: float | None, extra: Mapping[str, float], signature: Signature | None) -> float | None:
    return budget


def _reproduced(
    budget: float | None, extra: Mapping[str, float], signature: Signature | None
) -> float | None:
    """A known mistake reproduced bit for bit: the elements where the contract's oracle differs from the
    kernel's output, over those where the mistake does (over 1: the mistake explains the output better)."""
    if signature is None:
        return None
    ev = dict(signature.evidence)
    contract, mistake = ev.get("differ_contract"), ev.get("differ_mistake")
    if not isinstance(contract, float) or not isinstance(mistake, float):
        return None
    return (contract + 1.0) / (mistake + 1.0)


GATES: tuple[Gate, ...] = (
    Gate("bound", "budget used: the error over the bound's allowance (class probes fold in)", read=_budget),
    Gate("sensitivity", "the sensitivity gate's excess ratio: the error over its allowed multiple", "excess_ratio"),
    Gate("determinism", "the determinism probe's budget (run-to-run differences)", "determinism_budget"),
    Gate("order", "the order probe's budget (spread over reduction orders)", "order_spread_budget"),
    Gate("batch", "the batch probe's budget (rows against the full batch)", "batch_budget"),
    Gate("bias", "the rounding-bias probe's budget", "bias_budget"),
    Gate("signature", "a known mistake reproduced: the contract's differing elements over the mistake's", read=_reproduced),
)  # fmt: skip
_KEYS = tuple(g.key for g in GATES if g.key)


def severity(
    status: str,
    budget: float | None,
    extra: Mapping[str, float] = {},  # noqa: B006  # read only
    signature: Signature | None = None,
) -> float | None:
    """The case's severity (the module's docstring): > 1 exactly when ``status`` is fail."""
    if status == Status.ERROR:
        return math.inf
    if status == Status.REFUSED:
        return None
    values = [v for g in GATES if (v := g.value(budget, extra, signature)) is not None and v == v]
    worst = max(values, default=None)
    if status == Status.FAIL:
        return worst if worst is not None and 1.0 < worst < math.inf else math.inf
    return None if worst is None else min(worst, 1.0)


def case_severity(case: CaseResult) -> float | None:
    m = case.metrics
    return severity(case.status, m.budget_used, dict(m.extra), case.signature)


def severities(table: CaseTable) -> tuple[float | None, ...]:
    """Every case's severity, read by column (diff and compare never build records)."""
    columns = [table.extra(k) for k in _KEYS]
    rows = zip(table.column("status"), table.metric("budget_used"), table.column("signature"), *columns)
    out = []
    for status, budget, signature, *values in rows:
        extra = {k: v for k, v in zip(_KEYS, values) if v is not None}
        out.append(severity(status, budget, extra, signature))
    return tuple(out)


def row_severity(table: CaseTable, row: int) -> float | None:
    """One case's severity, read from the table's columns (cached there, so rows cost O(1) each)."""
    extra = {k: v for k in _KEYS if (v := table.extra(k)[row]) is not None}
    status, budget = table.column("status")[row], table.metric("budget_used")[row]
    return severity(status, budget, extra, table.column("signature")[row])


def severity_words(value: float | None, status: str = "") -> str:
    """A severity as a reader sees it: "error", "refused", "∞" (failed with no finite number), "28.70×",
    "0.42"."""
    if status in (Status.ERROR, Status.REFUSED):
        return str(status)
    if value is None:
        return "-"
    if value == math.inf:
        return "∞"
    if value > 1.0:
        return number_text(value) + "×"
    return number_text(value)


def number_text(value: float) -> str:
    """0.001, 0.42, 28.70, 1,873, 2.3e+12: small ones keep their magnitude, large ones their digits."""
    if 0 < value < 0.01:
        return f"{value:.1g}"
    if value < 100:
        return f"{value:.2f}"
    return f"{value:,.0f}" if value < 1e9 else f"{value:.3g}"


def describe() -> list[dict[str, Any]]:
    """The gates, for the docs and ``--help`` text."""
    return [{"gate": g.name, "number": g.words} for g in GATES]
