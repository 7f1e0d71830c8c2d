"""Pure renderers for the cross-vendor Comparison: console, Markdown (with Mermaid), JSON and GitHub workflow
commands (annotations for a vendor-matrix job).

``FORMATS`` is the registry the ``compare`` command lists in its help and its errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from kcgate.gate.compare import Cell, Comparison, Outlier
from kcgate.render.annotations import Annotation, render_workflow_commands, select
from kcgate.render.diff_formats import align, plain
from kcgate.render.escape import console_text, json_console_text, md_cell, md_code
from kcgate.render.mermaid import budget_chart, k_curve_chart
from kcgate.results.model import Status
from kcgate.results.severity import severity_words

MAX_CONTRACT_ROWS = 400
MAX_OUTLIER_ROWS = 100
ICONS: dict[str, str] = {
    Status.PASS: "✅",
    Status.FAIL: "❌",
    Status.ERROR: "⚠️ error",
    Status.REFUSED: "⚠️ refused",
}


def cell_text(cell: Cell | None, icons: bool) -> str:
    """Verdict and severity (``kcgate.results.severity``: over 1 exactly when it fails, whichever gate);
    a failing cell also says how many of its cases fail."""
    if cell is None:
        return "—"
    verdict = ICONS[cell.verdict] if icons else cell.verdict
    failing = f" ({cell.failing}/{cell.cases})" if cell.failing else ""
    number = (
        "" if cell.verdict in (Status.ERROR, Status.REFUSED) else severity_words(cell.severity, cell.verdict)
    )
    return f"{verdict} {number}{failing}".replace("  ", " ").rstrip()


def outlier_note(o: Outlier) -> str:
    """Only numbers and fixed words (metric and status are validated enums), so it needs no escaping."""
    return f"{o.metric} {o.error:.3g} is {o.ratio:.3g}x the others' median {o.consensus:.3g} ({o.status})"


def outlier_groups(outliers: tuple[Outlier, ...]) -> list[tuple[Outlier, int]]:
    """One row per runner and contract: its worst case and how many cases were outliers."""
    groups: dict[tuple[str, str], list[Outlier]] = {}
    for o in outliers:
        groups.setdefault((o.runner, o.contract_id), []).append(o)
    return [(max(g, key=lambda o: o.ratio), len(g)) for _, g in sorted(groups.items())]


# ---- console -------------------------------------------------------------------------------------


def render_console(comparison: Comparison) -> str:
    grid = comparison.grid()
    head = ("CONTRACT", *(plain(r, 24) for r in comparison.runners))
    rows = [head] + [
        (plain(k, 40), *(cell_text(grid.get((k, r)), icons=False) for r in comparison.runners))
        for k in comparison.contracts[:MAX_CONTRACT_ROWS]
    ]
    lines = [
        _title(comparison),
        "",
        *align(rows),
        *_console_overflow(comparison),
        *_console_outliers(comparison),
    ]
    return console_text("\n".join(lines) + "\n")


def _console_overflow(comparison: Comparison) -> list[str]:
    extra = len(comparison.contracts) - MAX_CONTRACT_ROWS
    return [f"... {extra} more contracts; use --format json for all"] if extra > 0 else []


def _console_outliers(comparison: Comparison) -> list[str]:
    if not comparison.outliers:
        return ["", "consensus: no runner is an outlier"]
    rows: list[tuple[str, ...]] = [("RUNNER", "CONTRACT", "CASES", "WORST CASE", "FINDING")]
    rows += [
        (plain(o.runner, 30), plain(o.contract_id, 30), str(n), plain(o.case_id, 50), outlier_note(o))
        for o, n in outlier_groups(comparison.outliers)[:MAX_OUTLIER_ROWS]
    ]
    return [
        "",
        "consensus outliers (error over 10x the other runners' median, even within tolerance):",
        *align(rows),
    ]


def _title(comparison: Comparison) -> str:
    return f"kcgate compare: {len(comparison.contracts)} contracts x {len(comparison.runners)} runners"


# ---- Markdown ------------------------------------------------------------------------------------


def render_markdown(comparison: Comparison) -> str:
    parts = [f"### {_title(comparison)}", "", _matrix(comparison), ""]
    parts += (
        _md_overflow(comparison) + _md_outliers(comparison) + _md_devices(comparison) + _md_charts(comparison)
    )
    return console_text("\n".join(parts))  # printed by `kcgate compare --format markdown` too


def _matrix(comparison: Comparison) -> str:
    grid = comparison.grid()
    runners = comparison.runners
    lines = [
        "| Contract | " + " | ".join(md_cell(r, 40) for r in runners) + " |",
        "|---" * (len(runners) + 1) + "|",
    ]
    for k in comparison.contracts[:MAX_CONTRACT_ROWS]:
        cells = [cell_text(grid.get((k, r)), icons=True) for r in runners]
        lines.append(f"| {md_code(k, 60)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _md_overflow(comparison: Comparison) -> list[str]:
    extra = len(comparison.contracts) - MAX_CONTRACT_ROWS
    return [f"_{extra} more contracts not shown; see the JSON output._", ""] if extra > 0 else []


def _md_outliers(comparison: Comparison) -> list[str]:
    if not comparison.outliers:
        return ["**Consensus:** no runner is an outlier on any case seen by three or more runners.", ""]
    head = ["**Consensus outliers** (error over 10x the other runners' median, even within tolerance):", ""]
    rows = ["| Runner | Contract | Cases | Worst case | Finding |", "|---|---|---:|---|---|"]
    rows += [
        f"| {md_cell(o.runner, 40)} | {md_code(o.contract_id, 60)} | {n} | {md_code(o.case_id, 80)} | {outlier_note(o)} |"
        for o, n in outlier_groups(comparison.outliers)[:MAX_OUTLIER_ROWS]
    ]
    return head + rows + [""]


def _md_devices(comparison: Comparison) -> list[str]:
    rows = ["| Runner | Device (fingerprint) |", "|---|---|"]
    rows += [f"| {md_cell(r, 40)} | {md_cell(d, 120)} |" for r, d in comparison.devices]
    return rows + [""]


def _md_charts(comparison: Comparison) -> list[str]:
    parts = []
    bars, words = budget_chart(comparison, lambda r: md_cell(r, 40))
    if bars and comparison.cells:
        parts += [bars, "", f"Median severity per runner: {words}.", ""]
    chart, key = k_curve_chart(comparison, lambda r: md_cell(r, 40))
    if chart:
        parts += [chart, "", f"Key: {key}.", ""]
    return parts


# ---- GitHub workflow commands --------------------------------------------------------------------


def render_github(comparison: Comparison, contracts_file: str = "contracts.toml") -> str:
    """A warning for each contract whose runners disagree on its verdict, a notice for each runner that is a
    consensus outlier on a contract (GitHub's per-step caps applied), then the headline. Every untrusted part
    (contract ids, runner names) is escaped by the workflow-command writer."""
    disagree = disagreements(comparison)
    notes = [
        Annotation("warning", contracts_file, None, "kcgate compare: runners disagree", _verdicts(k, cells))
        for k, cells in disagree
    ]
    groups = outlier_groups(comparison.outliers)
    notes += [
        Annotation(
            "notice",
            contracts_file,
            None,
            "kcgate compare: consensus outlier",
            f"{o.runner}: {o.contract_id} ({n} case{'s' * (n > 1)}, worst {o.case_id}): {outlier_note(o)}",
        )
        for o, n in groups
    ]
    kept, omitted = select(notes)
    more = sum(omitted.values())
    return render_workflow_commands(kept) + (
        f"{_title(comparison)}; {len(disagree)} disagree on the verdict, {len(groups)} consensus outlier(s)"
        + (f" ({more} more not annotated: see the Markdown or JSON output)" if more else "")
        + "\n"
    )


def disagreements(comparison: Comparison) -> list[tuple[str, list[Cell]]]:
    """The contracts whose runners give different verdicts, each with its cells in runner order."""
    grid = comparison.grid()
    found = []
    for k in comparison.contracts:
        cells = [c for r in comparison.runners if (c := grid.get((k, r))) is not None]
        if len({c.verdict for c in cells}) > 1:
            found.append((k, cells))
    return found


def _verdicts(contract: str, cells: list[Cell]) -> str:
    """ "gemm: pass on a, b; fail on c (budget 3.2, 1/4 cases)": each verdict with the runners that gave it."""
    by: dict[str, list[Cell]] = {}
    for c in cells:
        by.setdefault(c.verdict, []).append(c)
    parts = [
        f"{verdict} on " + ", ".join(f"{c.runner} ({cell_text(c, icons=False)})" for c in group)
        for verdict, group in by.items()
    ]
    return f"{contract}: " + "; ".join(parts)


# ---- JSON ----------------------------------------------------------------------------------------


def render_json(comparison: Comparison) -> str:
    return json_console_text(
        json.dumps(comparison.to_json(), indent=1, sort_keys=True, allow_nan=False) + "\n"
    )


FORMATS: dict[str, Callable[[Comparison], str]] = {
    "console": render_console,
    "markdown": render_markdown,
    "json": render_json,
    "github": render_github,
}
