"""The PR comment and the job summary, rendered from a Verdict within a size budget.

Pure: a Verdict and a RenderContext in, Markdown out. Every string that came from a results file goes
through ``kcgate.render.escape``; links are built only from the trusted context (settings, not results).
Budgets are counted in UTF-8 bytes, which bounds GitHub's character limits too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kcgate.diff_model import CaseChange, RunnerDiff, Verdict
from kcgate.render.escape import md_cell, md_code, md_text
from kcgate.render.labels import SEVERITY, factor_text, icon, label, rank

COMMENT_LIMIT = 65_536  # GitHub: characters in an issue comment body
COMMENT_BUDGET = COMMENT_LIMIT - 300  # room for the publisher's hidden markers
SUMMARY_LIMIT = 1_048_576  # GitHub: bytes of job summary per step
CHECK_RUN_LIMIT = 65_535  # GitHub: bytes of a check run's output.summary
MATRIX_MAX_RUNNERS = 12  # columns in the cross-vendor table; more do not read on a PR page
_SAFE_URL = re.compile(r"^https://[A-Za-z0-9._~:/?#@!$&'*+,;=%-]+$")
_RESERVE = 200  # bytes kept back for the overflow line


@dataclass(frozen=True)
class RenderContext:
    """Trusted facts about where the report is shown. Nothing here comes from a results file."""

    title: str = "kcgate"
    head_sha: str = ""
    run_url: str = ""  # link to the workflow run
    source_url: str = ""  # contracts.toml at the head commit; "#L<line>" is appended
    overflow_hint: str = "see the job summary"
    devices: tuple[tuple[str, str], ...] = ()  # runner -> device words (from results: escaped)


@dataclass(frozen=True)
class Section:
    """A heading and its table rows; rows are dropped from the end when the budget runs out."""

    kind: str  # what a row is, for the overflow line: "changes", "runners", "contracts"
    head: tuple[str, ...]
    rows: tuple[str, ...]
    tail: tuple[str, ...] = ()


def render_comment(verdict: Verdict, ctx: RenderContext, budget: int = COMMENT_LIMIT) -> str:
    """The sticky PR comment: blocking changes first, everything else as room allows."""
    return render_report(verdict, ctx, budget, collapse=True)


def render_summary(verdict: Verdict, ctx: RenderContext, budget: int = SUMMARY_LIMIT - 4096) -> str:
    """The job summary: the same report with a larger budget and nothing folded away."""
    hint = "see the JUnit XML report"
    return render_report(verdict, _with_hint(ctx, hint), budget, collapse=False)


def render_report(verdict: Verdict, ctx: RenderContext, budget: int, *, collapse: bool) -> str:
    """Header, then sections in priority order, each cut to what fits, then one overflow line."""
    head = _header(verdict, ctx)
    sections = _sections(verdict, ctx, collapse)
    lines, omitted = fit_sections(head, sections, budget - _RESERVE)
    lines += _overflow(omitted, ctx.overflow_hint)
    lines += _footer(ctx)
    return "\n".join(lines).rstrip("\n") + "\n"


# ---- budgeting ------------------------------------------------------------------------------


def size(lines: Iterable[str]) -> int:
    """Bytes of the lines joined with newlines (GitHub counts characters; bytes are an upper bound)."""
    return sum(len(line.encode("utf-8")) + 1 for line in lines)


def fit_sections(
    head: list[str], sections: Sequence[Section], budget: int
) -> tuple[list[str], dict[str, int]]:
    """Add rows in order while they fit; a section with no row that fits is left out whole."""
    lines, used = list(head), size(head)
    omitted: dict[str, int] = {}
    for sec in sections:
        overhead = size(sec.head) + size(sec.tail)
        kept = _take(sec.rows, budget - used - overhead)
        if kept:
            lines += [*sec.head, *kept, *sec.tail]
            used += overhead + size(kept)
        if len(kept) < len(sec.rows):
            omitted[sec.kind] = omitted.get(sec.kind, 0) + len(sec.rows) - len(kept)
    return lines, omitted


def _take(rows: Sequence[str], room: int) -> list[str]:
    kept: list[str] = []
    for row in rows:
        room -= size([row])
        if room < 0:
            break
        kept.append(row)
    return kept


def _overflow(omitted: dict[str, int], hint: str) -> list[str]:
    if not omitted:
        return []
    parts = [f"{n:,} more {kind}" for kind, n in omitted.items()]
    return ["", f"**… {' and '.join(parts)} not shown here; {hint}.**"]


# ---- header and footer ------------------------------------------------------------------------


def _header(verdict: Verdict, ctx: RenderContext) -> list[str]:
    title = md_text(ctx.title, 80)
    n = len(verdict.blocking)
    if n:
        runners = len({c.runner for c in verdict.blocking})
        top = (
            f"## ❌ {title}: {n:,} blocking {_plural(n, 'change')} on {runners} {_plural(runners, 'runner')}"
        )
    else:
        top = f"## ✅ {title}: no blocking changes"
    return [top, "", _counts_line(verdict), ""]


def _counts_line(verdict: Verdict) -> str:
    counts = verdict.counts()
    blocking = {c.category for c in verdict.blocking}
    parts = []
    for cat in SEVERITY:
        if counts.get(cat):
            num = f"**{counts[cat]:,}**" if cat in blocking else f"{counts[cat]:,}"
            parts.append(f"{num} {label(cat)}")
    return " · ".join(parts) if parts else "No cases were compared."


def _footer(ctx: RenderContext) -> list[str]:
    bits = []
    if ctx.head_sha:
        bits.append(f"head {md_code(ctx.head_sha[:12], 20)}")
    if safe_url(ctx.run_url):
        bits.append(f"[workflow run]({ctx.run_url})")
    return ["", "<sub>kcgate · " + " · ".join(bits) + "</sub>"] if bits else []


def _with_hint(ctx: RenderContext, hint: str) -> RenderContext:
    return RenderContext(ctx.title, ctx.head_sha, ctx.run_url, ctx.source_url, hint, ctx.devices)


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"


# ---- sections ---------------------------------------------------------------------------------

_CHANGE_HEAD = (
    "| | runner | contract | case | change | budget used | signature or message |",
    "|---|---|---|---|---|---|---|",
)


def _sections(verdict: Verdict, ctx: RenderContext, collapse: bool) -> list[Section]:
    changes = sorted((c for c in verdict.changes if c.category != "unchanged"), key=rank)
    blocking = tuple(change_row(c, ctx) for c in changes if c.blocking)
    others = tuple(change_row(c, ctx) for c in changes if not c.blocking)
    return [
        Section("runners", ("### Runners", "", *_RUNNER_HEAD), _runner_rows(verdict, ctx), ("",)),
        Section("changes", ("### Blocking", "", *_CHANGE_HEAD), blocking, ("",)),
        _folded("changes", f"Other changes ({len(others):,})", _CHANGE_HEAD, others, collapse),
        _folded("contracts", "Contract × runner", *matrix(verdict), collapse),
    ]


def _folded(kind: str, title: str, head: Sequence[str], rows: Sequence[str], collapse: bool) -> Section:
    if not collapse:
        return Section(kind, (f"### {title}", "", *head), tuple(rows), ("",))
    opening = ("<details>", f"<summary>{title}</summary>", "", *head)
    return Section(kind, opening, tuple(rows), ("", "</details>", ""))


def change_row(c: CaseChange, ctx: RenderContext) -> str:
    """One table row for a case change; every field from the results is escaped."""
    cells = [
        icon(c),
        md_cell(c.runner, 60),
        _contract_cell(c, ctx),
        md_code(c.case_id, 80) if c.case_id else " ",
        label(c.category),
        budget_text(c.base_budget_used, c.budget_used) + factor_text(c),
        md_cell(c.signature or c.message, 160),
    ]
    return "| " + " | ".join(cells) + " |"


def _contract_cell(c: CaseChange, ctx: RenderContext) -> str:
    name = md_cell(c.contract_id, 80)
    if c.line and c.line > 0 and safe_url(ctx.source_url):
        return f"[{name}]({ctx.source_url}#L{int(c.line)})"
    return name


def budget_text(base: float | None, now: float | None) -> str:
    """'0.21 → 1.73', or one number, or a dash; budget used is measured error / allowed error."""
    if base is None and now is None:
        return "–"
    if base is None or now is None:
        return _num(now if base is None else base)
    return f"{_num(base)} → {_num(now)}"


def _num(x: float | None) -> str:
    if x is None:
        return "–"
    if 0 < abs(x) < 0.01:  # small budgets keep their magnitude: 0.001 is not 0.00
        return f"{x:.1g}"
    if abs(x) < 100:
        return f"{x:.2f}"
    return f"{x:,.0f}" if abs(x) < 1e9 else f"{x:.3g}"


def safe_url(url: str) -> bool:
    """Only https links made of URL characters: no spaces, brackets or quotes to break Markdown."""
    return bool(url) and bool(_SAFE_URL.match(url)) and ")" not in url


# ---- runners ------------------------------------------------------------------------------------

_RUNNER_HEAD = ("| runner | device | baseline | blocking | changed | cases |", "|---|---|---|---|---|---|")


def _runner_rows(verdict: Verdict, ctx: RenderContext) -> tuple[str, ...]:
    devices = dict(ctx.devices)
    return tuple(
        _runner_row(r, devices.get(r.runner, "")) for r in sorted(verdict.runners, key=lambda r: r.runner)
    )


def _runner_row(r: RunnerDiff, device: str) -> str:
    blocking = sum(c.blocking for c in r.changes)
    changed = sum(c.category != "unchanged" for c in r.changes)
    cells = [
        f"{'❌' if blocking else '✅'} {md_cell(r.runner, 60)}",
        md_cell(device, 60),
        _baseline_cell(r),
        str(blocking),
        str(changed),
        str(len(r.changes)),
    ]
    return "| " + " | ".join(cells) + " |"


def _baseline_cell(r: RunnerDiff) -> str:
    if not r.base_fingerprint_key:
        return "none"
    if r.base_fingerprint_key != r.fingerprint_key:
        return f"other fingerprint {md_code(r.base_fingerprint_key, 16)}"
    return f"same fingerprint {md_code(r.fingerprint_key, 16)}"


# ---- the cross-vendor matrix --------------------------------------------------------------------


def matrix(verdict: Verdict) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Contract × runner: the worst change of each contract on each runner, with its largest budget used."""
    runners = sorted({r.runner for r in verdict.runners})[:MATRIX_MAX_RUNNERS]
    cells = _worst_per_cell(verdict.changes)
    contracts = sorted({cid for (cid, _r) in cells})
    head = (
        "| contract | " + " | ".join(md_cell(r, 40) for r in runners) + " |",
        "|---|" + "---|" * len(runners),
    )
    rows = tuple(_matrix_row(cid, runners, cells) for cid in contracts)
    return head, rows


def _worst_per_cell(changes: Iterable[CaseChange]) -> dict[tuple[str, str], tuple[CaseChange, float | None]]:
    out: dict[tuple[str, str], tuple[CaseChange, float | None]] = {}
    for c in changes:
        if not c.contract_id:
            continue
        key = (c.contract_id, c.runner)
        worst, budget = out.get(key, (c, None))
        worst = min(worst, c, key=rank)
        if c.budget_used is not None:
            budget = c.budget_used if budget is None else max(budget, c.budget_used)
        out[key] = (worst, budget)
    return out


def _matrix_row(
    cid: str, runners: Sequence[str], cells: dict[tuple[str, str], tuple[CaseChange, float | None]]
) -> str:
    parts = [md_cell(cid, 80)]
    for runner in runners:
        cell = cells.get((cid, runner))
        parts.append(f"{icon(cell[0])} {_num(cell[1])}" if cell else "·")
    return "| " + " | ".join(parts) + " |"
