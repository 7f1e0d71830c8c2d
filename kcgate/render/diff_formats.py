"""Pure renderers for a diff Diff: console text, GitHub Markdown and JSON (``FORMATS`` is the registry).

Every string from a results file is untrusted: Markdown goes through ``render.escape``, console text
through ``plain`` (no terminal control sequences).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from kcgate.gate.model import CaseChange, Diff
from kcgate.render.escape import console_text, json_console_text, md_cell, md_code, md_text, strip_unsafe
from kcgate.render.labels import factor_text
from kcgate.vocab.categories import CATEGORIES, SILENT

MAX_ROWS = 300  # rows of changes shown; the JSON format always has all of them


def plain(value: object, limit: int = 80) -> str:
    """One line of terminal-safe text: control and bidi characters and line separators blanked
    (``escape.UNSAFE``, which every renderer shares), long text cut with an ellipsis."""
    s = strip_unsafe(str(value).replace("\t", " ").replace("\n", " "), " ").strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def budget(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def listed(verdict: Diff, every: bool = False) -> list[CaseChange]:
    """Changes worth a row (``every``: unchanged ones too), blocking first, then by category order, runner
    and case."""
    order = {c: i for i, c in enumerate(CATEGORIES)}
    rows = [c for c in verdict.changes if every or c.category not in SILENT or c.blocking]
    return sorted(rows, key=lambda c: (not c.blocking, order[c.category], c.runner, c.case_id))


def headline(verdict: Diff) -> str:
    n = len(verdict.blocking)
    return f"BLOCKED: {n} blocking change{'s' if n != 1 else ''}" if n else "PASSED: nothing blocks"


def count_line(verdict: Diff) -> str:
    counts = verdict.counts()
    return ", ".join(f"{c} {counts[c]}" for c in CATEGORIES if counts[c]) or "no cases"


# ---- console -------------------------------------------------------------------------------------


def render_console(verdict: Diff, every: bool = False) -> str:
    """The console table; ``every`` (kcgate diff -v) lists the unchanged cases too."""
    rows = listed(verdict, every)
    table: list[tuple[str, ...]] = [("", "RUNNER", "CATEGORY", "CONTRACT", "CASE", "BUDGET", "NOTE")]
    table += [_console_row(c) for c in rows[:MAX_ROWS]]
    lines = [f"kcgate diff: {headline(verdict)}", f"cases: {count_line(verdict)}"]
    lines += [f"versions: {', '.join(verdict.version_changes())}"] if verdict.version_changes() else []
    lines += [""] + align(table)
    if len(rows) > MAX_ROWS:
        lines.append(f"... {len(rows) - MAX_ROWS} more rows; use --format json for all of them")
    return console_text("\n".join(lines) + "\n")


def _console_row(c: CaseChange) -> tuple[str, ...]:
    note = c.signature or c.message
    span = f"{budget(c.base_budget_used)} -> {budget(c.budget_used)}{factor_text(c)}"
    return (
        "!" if c.blocking else "",
        plain(c.runner, 30),
        c.category,
        plain(c.contract_id, 30),
        plain(c.case_id, 50),
        span,
        plain(note, 70),
    )


def align(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns for the console."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


# ---- Markdown ------------------------------------------------------------------------------------


def render_markdown(verdict: Diff) -> str:
    mark = "❌" if verdict.blocking else "✅"
    parts = [f"### {mark} kcgate diff: {headline(verdict)}", "", _count_table(verdict), ""]
    if verdict.version_changes():
        parts += [md_text("Versions: " + ", ".join(verdict.version_changes()), 400), ""]
    rows = listed(verdict)
    if rows:
        parts += [_change_table(rows[:MAX_ROWS]), ""]
    if len(rows) > MAX_ROWS:
        parts += [f"_{len(rows) - MAX_ROWS} more changes not shown; see the JSON report._", ""]
    return console_text("\n".join(parts))  # printed by `kcgate diff --format markdown` too


def _count_table(verdict: Diff) -> str:
    counts = verdict.counts()
    blocking = {c.category for c in verdict.blocking}
    lines = ["| Category | Cases | Blocks |", "|---|---:|:---:|"]
    lines += [f"| {c} | {counts[c]} | {'⛔' if c in blocking else ''} |" for c in CATEGORIES if counts[c]]
    return "\n".join(lines)


def _change_table(rows: list[CaseChange]) -> str:
    lines = [
        "| | Runner | Contract | Case | Change | Budget (base → now) | Details |",
        "|---|---|---|---|---|---|---|",
    ]
    return "\n".join(lines + [_md_row(c) for c in rows])


def _md_row(c: CaseChange) -> str:
    details = md_cell(c.signature or c.message or c.status, 160)
    span = f"{budget(c.base_budget_used)} → {budget(c.budget_used)}{factor_text(c)}"
    cells = [
        "⛔" if c.blocking else " ",
        md_cell(c.runner, 60),
        md_code(c.contract_id, 60),
        md_code(c.case_id, 80),
        c.category,
        span,
        details,
    ]
    return "| " + " | ".join(cells) + " |"


# ---- JSON ----------------------------------------------------------------------------------------


def render_json(verdict: Diff) -> str:
    return json_console_text(json.dumps(verdict.to_json(), indent=1, sort_keys=True, allow_nan=False) + "\n")


FORMATS: dict[str, Callable[[Diff], str]] = {
    "console": render_console,
    "markdown": render_markdown,
    "json": render_json,
}
