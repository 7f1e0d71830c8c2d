"""Pictures in the PR comment: for each contract that blocks or drifted, a Mermaid ``xychart-beta`` of its
severity (``kcgate.results.severity``: over 1 exactly when it fails, whichever gate failed it) per runner
over the last recorded commits, the baseline and the head: one colour per runner, named in a key, the real
value written under a column where the plot is capped, and a text line that says the same where Mermaid is
not rendered. Pure; labels go through ``mermaid.label`` and text through ``md_text`` (contract ids and
runner names come from results)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from kcgate.gate.model import CaseChange, Diff
from kcgate.history.view import HistoryView
from kcgate.render.escape import md_text
from kcgate.render.history_text import severity_text
from kcgate.render.mermaid import (
    BUDGET_CAP,
    EDGE_WORDS,
    MAX_SERIES,
    colour_key,
    edge_line,
    label,
    palette_init,
)
from kcgate.results.severity import number_text
from kcgate.vocab.categories import SHOWS_FACTOR

MAX_CHARTS = 6  # a comment with more pictures stops being read; the rows still list every contract
MAX_HISTORY = 6  # recorded commits before the baseline
HEAD = (
    "### Severity over commits",
    "",
    f"<sub>Severity: 1 = at the edge of the contract, over 1 = fails (whichever gate failed it: the error "
    f"bound, the sensitivity gate, a probe). One colour per runner, named under each chart; drawn up to "
    f"{BUDGET_CAP:g}, a larger value written under its column. Recorded commits from the history, then the "
    "baseline and this head.</sub>",
    "",
)

_Pair = tuple[float | None, float | None]  # (base, head) severity of a contract on a runner


def charted(verdict: Diff) -> list[str]:
    """The contracts that get a chart: blocking first, then those whose category is about the number moving
    (the table's ``shows_factor`` column: drift), each by its largest severity."""
    score: dict[str, tuple[bool, float]] = {}
    for c in verdict.changes:
        if c.contract_id and (c.blocking or c.category in SHOWS_FACTOR):
            held = score.get(c.contract_id, (False, 0.0))
            score[c.contract_id] = (held[0] or c.blocking, max(held[1], c.severity or 0.0))
    return sorted(score, key=lambda k: (not score[k][0], -score[k][1], k))[:MAX_CHARTS]


def chart_rows(verdict: Diff, history: HistoryView | None = None, base: str = "") -> tuple[str, ...]:
    """One block per charted contract: the text line, then the Mermaid fence."""
    return tuple(_block(k, _pairs(verdict.changes, k), history, base) for k in charted(verdict))


def _pairs(changes: Sequence[CaseChange], contract: str) -> dict[str, _Pair]:
    out: dict[str, _Pair] = {}
    for c in changes:
        if c.contract_id == contract:
            b, h = out.get(c.runner, (None, None))
            out[c.runner] = (_max(b, c.base_severity), _max(h, c.severity))
    return dict(sorted(out.items())[:MAX_SERIES])


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _block(contract: str, pairs: dict[str, _Pair], history: HistoryView | None, base: str) -> str:
    runners = [r for r, (b, h) in pairs.items() if b is not None and h is not None]
    steps = _history(history, contract, runners, base)
    text = f"**{md_text(contract, 80)}**, worst severity over its cases, baseline → head: " + "; ".join(
        _runner_words(r, pairs[r], steps) for r in pairs
    )
    if not runners:
        return text + "."
    columns: list[tuple[str, dict[str, float | None]]] = [(sha[:7], dict(v)) for sha, v in steps]
    columns += [
        (_base_label(base), {r: pairs[r][0] for r in runners}),
        ("head", {r: pairs[r][1] for r in runners}),
    ]
    x = [label(_capped_label(name, [v.get(r) for r in runners]), 48) for name, v in columns]
    lines = ["```mermaid", palette_init(len(runners), edge=True), "xychart-beta"]
    lines += [f"    title {label(f'{contract}: severity', 60)}", f"    x-axis [{', '.join(x)}]"]
    lines.append(f'    y-axis "severity (1 = edge, over 1 fails)" 0 --> {BUDGET_CAP:g}')
    for r in runners:
        lines.append(f"    line [{', '.join(_plotted(v.get(r)) for _, v in columns)}]")
    lines.append(edge_line(len(columns)))
    plotted = [tuple(_plotted(v.get(r)) for _, v in columns) for r in runners]
    key = f". Key: {colour_key([md_text(r, 60) for r in runners], plotted)}; {EDGE_WORDS}."
    return "\n".join([text + key, "", *lines, "```"])


def _base_label(base: str) -> str:
    return f"base {base[:7]}" if base else "base"


def _plotted(v: float | None) -> str:
    return f"{min(v if v is not None else 0.0, BUDGET_CAP):.3g}"


def _capped_label(name: str, values: list[float | None]) -> str:
    """A column's label, with the real values drawn at the cap, each once: "head (47 / inf capped)" (a
    label wider than its column is cut off at the chart's edge; the text line names each runner's)."""
    over = list(dict.fromkeys(_real(v) for v in values if v is not None and v > BUDGET_CAP))
    return f"{name} ({' / '.join(over)} capped)" if over else name


def _real(v: float) -> str:
    """A capped value in a label's alphabet (no thousands commas): "7", "22586", "inf"."""
    return "inf" if v == math.inf else f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def _runner_words(runner: str, pair: _Pair, steps: list[tuple[str, dict[str, float]]]) -> str:
    words = f"{md_text(runner, 60)} {_words(pair[0])} → {_words(pair[1])}"
    before = [v[runner] for _, v in steps if runner in v]
    return words + (f" (before: {', '.join(_words(b) for b in before)})" if before else "")


def _words(v: float | None) -> str:
    """A severity in the text line: a failing one says so ("47.0× fails")."""
    if v is None or v <= 1.0:
        return severity_text(v)
    return "fails" if v == math.inf else f"{number_text(v)}× fails"


def _history(
    view: HistoryView | None, contract: str, runners: list[str], base: str
) -> list[tuple[str, dict[str, float]]]:
    """The last recorded commits before the baseline where every charted runner has a severity; the
    baseline's own commit is its column, never a second one."""
    if view is None or not runners:
        return []
    commits = [c.sha for c in view.commits]
    at = next(
        (i for i, sha in enumerate(commits) if base and (sha.startswith(base) or base.startswith(sha))), None
    )
    if at is not None:
        commits = commits[:at]
    values: dict[str, dict[str, float]] = {}
    for p in view.of_contract(contract):
        if p.severity is not None and p.runner in runners:
            values.setdefault(p.commit, {})[p.runner] = p.severity
    full = [(sha, values[sha]) for sha in commits if set(values.get(sha, {})) >= set(runners)]
    return full[-MAX_HISTORY:]
