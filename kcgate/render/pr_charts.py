"""Pictures in the PR comment: for each contract that blocks or whose budget drifted, a Mermaid
``xychart-beta`` of budget used per runner over the last recorded commits, the baseline and the head,
with a text line that says the same where Mermaid is not rendered. Pure; labels go through
``mermaid.label`` and text through ``md_text`` (contract ids and runner names come from results)."""

from __future__ import annotations

from collections.abc import Sequence

from kcgate.gate.model import CaseChange, Diff
from kcgate.history.view import HistoryView
from kcgate.render.escape import md_text
from kcgate.render.history_text import budget_words
from kcgate.render.mermaid import BUDGET_CAP, MAX_SERIES, label
from kcgate.vocab.categories import SHOWS_FACTOR

MAX_CHARTS = 6  # a comment with more pictures stops being read; the rows still list every contract
MAX_HISTORY = 6  # recorded commits before the baseline
HEAD = (
    "### Budget used over commits",
    "",
    f"<sub>One line per runner, in the order listed; values capped at {BUDGET_CAP:g} (1 = at the edge of "
    "the budget). Recorded commits from the history, then the baseline and this head.</sub>",
    "",
)

_Pair = tuple[float | None, float | None]  # (base, head) worst budget of a contract on a runner


def charted(verdict: Diff) -> list[str]:
    """The contracts that get a chart: blocking first, then those whose category is about the budget moving
    (the table's ``shows_factor`` column: budget drift), each by its largest budget."""
    score: dict[str, tuple[bool, float]] = {}
    for c in verdict.changes:
        if c.contract_id and (c.blocking or c.category in SHOWS_FACTOR):
            held = score.get(c.contract_id, (False, 0.0))
            score[c.contract_id] = (held[0] or c.blocking, max(held[1], c.budget_used or 0.0))
    return sorted(score, key=lambda k: (not score[k][0], -score[k][1], k))[:MAX_CHARTS]


def chart_rows(verdict: Diff, history: HistoryView | None = None, base: str = "") -> tuple[str, ...]:
    """One block per charted contract: the text line, then the Mermaid fence."""
    return tuple(_block(k, _pairs(verdict.changes, k), history, base) for k in charted(verdict))


def _pairs(changes: Sequence[CaseChange], contract: str) -> dict[str, _Pair]:
    out: dict[str, _Pair] = {}
    for c in changes:
        if c.contract_id == contract:
            b, h = out.get(c.runner, (None, None))
            out[c.runner] = (_max(b, c.base_budget_used), _max(h, c.budget_used))
    return dict(sorted(out.items())[:MAX_SERIES])


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _block(contract: str, pairs: dict[str, _Pair], history: HistoryView | None, base: str) -> str:
    runners = [r for r, (b, h) in pairs.items() if b is not None and h is not None]
    steps = _history(history, contract, runners, base)
    text = f"**{md_text(contract, 80)}**, budget used, baseline → head: " + "; ".join(
        _runner_words(r, pairs[r], steps) for r in pairs
    )
    if not runners:
        return text + "."
    x = [label(sha[:7]) for sha, _ in steps] + ['"base"', '"head"']
    lines = ["```mermaid", "xychart-beta", f"    title {label(f'{contract}: budget used', 60)}"]
    lines += [f"    x-axis [{', '.join(x)}]", f'    y-axis "budget used" 0 --> {BUDGET_CAP:g}']
    for r in runners:
        values = [v[r] for _, v in steps] + list(pairs[r])
        lines.append(f"    line [{', '.join(f'{min(v or 0.0, BUDGET_CAP):.3g}' for v in values)}]")
    return "\n".join([text + f". Lines: {md_text(', '.join(runners), 300)}.", "", *lines, "```"])


def _runner_words(runner: str, pair: _Pair, steps: list[tuple[str, dict[str, float]]]) -> str:
    words = f"{md_text(runner, 60)} {budget_words(pair[0])} → {budget_words(pair[1])}"
    before = [v[runner] for _, v in steps if runner in v]
    return words + (f" (before: {', '.join(budget_words(b) for b in before)})" if before else "")


def _history(
    view: HistoryView | None, contract: str, runners: list[str], base: str
) -> list[tuple[str, dict[str, float]]]:
    """The last recorded commits before the baseline where every charted runner has a budget."""
    if view is None or not runners:
        return []
    commits = [c.sha for c in view.commits]
    if base in commits:
        commits = commits[: commits.index(base)]
    values: dict[str, dict[str, float]] = {}
    for p in view.of_contract(contract):
        if p.budget is not None and p.runner in runners:
            values.setdefault(p.commit, {})[p.runner] = p.budget
    full = [(sha, values[sha]) for sha in commits if set(values.get(sha, {})) >= set(runners)]
    return full[-MAX_HISTORY:]
