"""``kcgate history`` as text: each contract's severity over the last commits per runner (over 1 exactly
when it fails, whichever gate failed it: ``kcgate.results.severity``), the steps past the drift rule or
into and out of failure, the runners diverging from the consensus; and the same view as JSON. Pure."""

from __future__ import annotations

import json
import math

from kcgate.history.view import Divergence, HistoryView, Move, Point
from kcgate.render.escape import console_text
from kcgate.results.model import Status

CONSOLE_COMMITS = 8  # columns of severities per contract; the JSON has them all


def render_history_console(view: HistoryView) -> str:
    if not view.commits:
        return "kcgate history: the store holds no runs; add some with `kcgate history add results/*.json`\n"
    shown = view.commits[-CONSOLE_COMMITS:]
    lines = [
        f"kcgate history: {len(view.commits)} commits ({view.commits[0].sha[:8]} .. {view.head[:8]}), "
        f"{len(view.runners)} runners, {len(view.contracts)} contracts",
        "severity: 1 = at the edge of the contract, over 1 = fails (whichever gate failed it), ! fail, "
        "E error, R refused",
        f"drift: {view.drift_rule}",
        "",
    ]
    width = max([len(r) for r in view.runners] + [6])
    head = "  " + "runner".ljust(width) + "".join(f" {c.sha[:8]:>9}" for c in shown)
    for contract in view.contracts:
        lines += [contract, head]
        for runner in view.runners:
            points = {p.commit: p for p in view.series(contract, runner)}
            if points:
                cells = "".join(f" {_cell(points.get(c.sha)):>9}" for c in shown)
                lines.append("  " + runner.ljust(width) + cells)
        lines.append("")
    lines += _moves(view) + _divergences(view.divergences)
    return console_text("\n".join(lines).rstrip("\n")) + "\n"


def _cell(p: Point | None) -> str:
    if p is None:
        return "."
    if p.status in (Status.ERROR, Status.REFUSED):
        return p.status
    mark = "!" if p.status == Status.FAIL else ""
    return severity_text(p.severity) + mark


def severity_text(b: float | None) -> str:
    """A severity (or a budget) in a few characters: "-" unmeasured, "inf" for a failure with no number."""
    if b is None:
        return "-"
    if b == math.inf:
        return "inf"
    if 0 < b < 0.01:
        return f"{b:.1g}"
    return f"{b:.2f}" if b < 100 else f"{b:.3g}"


def times(factor: float) -> str:
    """A factor as people write it: "28.7x", "1,000x", "2.3e+07x"."""
    return f"{factor:,.0f}x" if 100 <= factor < 1e6 else f"{factor:.3g}x"


def ratio_words(factor: float) -> str:
    """A factor in words: "28.7x worse", "3.1x better", "unchanged"."""
    if factor >= 1.0:
        return f"{times(factor)} worse" if factor >= 1.005 else "unchanged"
    return f"{times(1 / factor)} better" if factor > 0 else "from zero"


def move_words(m: Move, pr: int | None = None) -> str:
    at = f"{m.commit[:8]}" + (f" (PR #{pr})" if pr else "")
    factor = f" ({ratio_words(m.factor)})" if m.factor is not None else ""
    return (
        f"{m.contract} on {m.runner} at {at}: {m.kind}, severity {severity_text(m.before)} -> "
        f"{severity_text(m.after)}{factor}"
    )


def divergence_words(d: Divergence) -> str:
    return (
        f"{d.contract} on {d.runner}: an outlier at {d.outlier_commits} of {d.commits} commits, "
        f"latest {times(d.ratio)} the other runners' median error (case {d.case_id})"
    )


def _moves(view: HistoryView) -> list[str]:
    if not view.moves:
        return ["No step moved past the drift rule.", ""]
    words = ("  " + move_words(m, view.pr_of(m.commit)) for m in view.moves)
    return ["Steps past the drift rule, into or out of failure:", *words, ""]


def _divergences(found: tuple[Divergence, ...]) -> list[str]:
    if not found:
        return ["No runner diverged from the consensus (needs 3 or more runners per case)."]
    return ["Runners diverging from the consensus:", *("  " + divergence_words(d) for d in found)]


def render_history_json(view: HistoryView) -> str:
    return json.dumps(view.to_json(), indent=1, sort_keys=True, allow_nan=False) + "\n"


FORMATS = {"console": render_history_console, "json": render_history_json}
