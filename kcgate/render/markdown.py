"""The PR comment and the job summary, rendered from a Diff within a size budget.

Pure: a Diff and a RenderContext in, Markdown out. Every string that came from a results file goes
through ``kcgate.render.escape``; links are built only from the trusted context (settings, not results).
Budgets are counted in UTF-8 bytes, which bounds GitHub's character limits too.

Written for a kernel reviewer who acts in ten seconds: the first screen is the title (verdict, counts,
baseline commit) and the Blocking table, one row per contract and cause (not per case: ``group_changes``)
with the dtypes and shapes that tell rows apart, its runners, seeds, worst severity (over 1 exactly when it
fails, whichever gate failed it: ``kcgate.results.severity``), budget, max ULP and max error; then a
reproduce command per blocking row, the charts, the runners table (verified only against a same-fingerprint
baseline), the other rows and the contract × runner matrix; the legend last, folded. Sections are fitted
to the size budget in priority order (``Section.priority``), whatever their place on the page.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from kcgate.gate.model import CaseChange, Diff, RunnerDiff
from kcgate.history.view import HistoryView
from kcgate.plan import base_seed_for, case_id, nonzero_phrase
from kcgate.render.escape import is_sha, md_cell, md_code, md_text
from kcgate.render.labels import SEVERITY, factor_text, icon, label, rank
from kcgate.render.pr_charts import HEAD as CHARTS_HEAD
from kcgate.render.pr_charts import chart_rows
from kcgate.results.model import UNEVALUATED, Status
from kcgate.results.severity import severity_words
from kcgate.vocab.categories import NO_RESULTS, SILENT, UNKNOWN, WAIVER_APPLIED
from kcgate.vocab.causes import CAUSE
from kcgate.vocab.dtypes import low_precision

COMMENT_LIMIT = 65_536  # GitHub: characters in an issue comment body
COMMENT_BUDGET = COMMENT_LIMIT - 300  # room for the publisher's hidden markers
SUMMARY_LIMIT = 1_048_576  # GitHub: bytes of job summary per step
CHECK_RUN_LIMIT = 65_535  # GitHub: bytes of a check run's output.summary
MATRIX_MAX_RUNNERS = 12  # columns in the cross-vendor table; more do not read on a PR page
_SAFE_URL = re.compile(r"^https://[A-Za-z0-9._~:/?#@!$&'*+,;=%-]+$")
_RESERVE = 200  # bytes kept back for the overflow line


@dataclass(frozen=True)
class Rerun:
    """How one runner's cases were run, read from its results file, so a reproduce line runs them the same
    way. Untrusted: every value is shell-quoted and the line escaped."""

    backend: str = ""  # the fingerprint's device kind: --device
    env: tuple[tuple[str, str], ...] = ()  # environment variables the fingerprint recorded set (NAME=value)
    options: tuple[str, ...] = ()  # command-line settings that override the contract, e.g. --held-out 2


@dataclass(frozen=True)
class RenderContext:
    """Trusted facts about where the report is shown. Nothing here comes from a results file."""

    title: str = "kcgate"
    head_sha: str = ""
    run_url: str = ""  # link to the workflow run
    source_url: str = ""  # contracts.toml at the head commit; "#L<line>" is appended
    overflow_hint: str = "see the job summary"
    devices: tuple[tuple[str, str], ...] = ()  # runner -> device words (from results: escaped)
    base_ref: str = ""  # the commit (or ref) the baselines were read at
    base_source_url: str = ""  # contracts.toml at the base commit, for lines that come from a baseline
    descriptions: tuple[tuple[str, str], ...] = ()  # contract id -> description (contracts.toml)
    drift_rule: str = ""  # the policy's drift rule in words (policy.budget_drift.describe()), for the header
    vendor_run_url: str = ""  # the run that executed the contracts (workflow_run's html_url)
    job_urls: tuple[tuple[str, str], ...] = ()  # runner -> its leg's job log
    notes: tuple[str, ...] = ()  # trusted lines shown under the header (e.g. a watchdog's)
    check_run_url: str = ""  # the verdict's check run on the PR head
    contracts_file: str = "contracts.toml"  # report's --contracts, as given: reproduce lines pass it with -c
    reruns: tuple[tuple[str, Rerun], ...] = ()  # runner -> how its cases were run (from results: quoted)
    charts: bool = False  # Mermaid charts of the contracts that block or drifted (render.pr_charts)
    history: HistoryView | None = None  # their recorded budgets over commits (report --history)


@dataclass(frozen=True)
class Section:
    """A heading and its table rows; rows are dropped from the end when the budget runs out."""

    kind: str  # what a row is, for the overflow line: "changes", "runners", "contracts"
    head: tuple[str, ...]
    rows: tuple[str, ...]
    tail: tuple[str, ...] = ()
    priority: int = 0  # the order sections get room in (lowest first); the page keeps the list's order


def render_comment(verdict: Diff, ctx: RenderContext, budget: int = COMMENT_LIMIT) -> str:
    """The sticky PR comment: blocking changes first, everything else as room allows."""
    return render_report(verdict, ctx, budget, collapse=True)


def render_summary(verdict: Diff, ctx: RenderContext, budget: int = SUMMARY_LIMIT - 4096) -> str:
    """The job summary: the same report with a larger budget and nothing folded away."""
    hint = "see the JUnit XML report"
    return render_report(verdict, _with_hint(ctx, hint), budget, collapse=False)


def render_report(verdict: Diff, ctx: RenderContext, budget: int, *, collapse: bool) -> str:
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
    """Add rows while they fit, sections in priority order; a section with no row that fits is left out
    whole. The lines come in the sections' own order."""
    used = size(head)
    omitted: dict[str, int] = {}
    kept: dict[int, list[str]] = {}
    for i in sorted(range(len(sections)), key=lambda i: sections[i].priority):
        sec = sections[i]
        overhead = size(sec.head) + size(sec.tail)
        kept[i] = _take(sec.rows, budget - used - overhead)
        if kept[i]:
            used += overhead + size(kept[i])
        if len(kept[i]) < len(sec.rows):
            omitted[sec.kind] = omitted.get(sec.kind, 0) + len(sec.rows) - len(kept[i])
    lines = list(head)
    for i, sec in enumerate(sections):
        if kept[i]:
            lines += [*sec.head, *kept[i], *sec.tail]
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

LEGEND = (
    "- **severity**: how far the case is past its contract, whichever gate decided it (the error bound, the "
    "sensitivity gate, a probe, a reproduced mistake): ≤ 1 holds, > 1 fails; ∞: failed with no finite "
    "number; “0.21 → 1.73” is baseline → now.",
    "- **budget used**: measured error ÷ allowed error at the worst element of the error bound alone "
    "(a case can fail another gate within its budget); **NaN/Inf**: non-finite output where the oracle is "
    "finite.",
    "- **max ULP**: units in the last place, shown for 16- and 8-bit outputs only (in fp32 a tiny, allowed "
    "error near zero spans millions of ULPs).",
    "- **verified**: the baseline ran on the same device, driver, torch version and numerics settings, so "
    "its numbers compare with these; **unverified**: they do not, and are shown, never judged good.",
)


def _header(verdict: Diff, ctx: RenderContext) -> list[str]:
    title = md_text(ctx.title, 80)
    n = len(verdict.blocking)
    if n:
        rows = len(group_changes(verdict.blocking))
        runners = len({c.runner for c in verdict.blocking})
        top = (
            f"## ❌ {title}: {rows:,} blocking {_plural(rows, 'change')} "
            f"({n:,} {_plural(n, 'case')} on {runners} {_plural(runners, 'runner')})"
        )
    elif unverified_runners(verdict):
        names = unverified_runners(verdict)
        top = (
            f"## ❔ {title}: no blocking changes, but {len(names)} {_plural(len(names), 'runner')} "
            "unverified (no comparable baseline)"
        )
    else:
        top = f"## ✅ {title}: no blocking changes"
    lines = [top, "", _counts_line(verdict), ""]
    if verdict.version_changes():  # [project] track: the library under test moved
        lines += [md_text("Versions: " + ", ".join(verdict.version_changes()), 400), ""]
    facts = _facts_line(ctx)
    if facts:
        lines += [facts, ""]
    lines += [md_text(note, 400) for note in ctx.notes]
    if ctx.notes:
        lines.append("")
    return lines


def unverified_runners(verdict: Diff) -> list[str]:
    """Runners with results but no same-fingerprint baseline: their numbers are shown, never judged good."""
    return sorted(
        r.runner for r in verdict.runners if r.fingerprint_key and r.base_fingerprint_key != r.fingerprint_key
    )


def _facts_line(ctx: RenderContext) -> str:
    """Where the numbers come from: the baseline commit, the head commit, the vendor run, the drift rule."""
    bits = []
    if ctx.base_ref:
        bits.append(
            f"baselines from {md_code(ctx.base_ref[:12] if is_sha(ctx.base_ref) else ctx.base_ref, 48)}"
        )
    if ctx.head_sha:
        bits.append(f"head {md_code(ctx.head_sha[:12], 20)}")
    if safe_url(ctx.vendor_run_url):
        bits.append(f"[runner jobs]({ctx.vendor_run_url})")
    if safe_url(ctx.check_run_url):
        bits.append(f"[check run]({ctx.check_run_url})")
    if ctx.drift_rule:
        bits.append(f"drift: {md_text(ctx.drift_rule, 200)}")
    line = " · ".join(bits)
    return line[:1].upper() + line[1:]


def _counts_line(verdict: Diff) -> str:
    counts = verdict.counts()
    blocking = {c.category for c in verdict.blocking}
    parts = []
    for cat in SEVERITY:
        if counts.get(cat):
            num = f"**{counts[cat]:,}**" if cat in blocking else f"{counts[cat]:,}"
            parts.append(f"{num} {label(cat)}")
    return "Cases: " + " · ".join(parts) if parts else "No cases were compared."


def _footer(ctx: RenderContext) -> list[str]:
    bits = []
    if ctx.head_sha:
        bits.append(f"head {md_code(ctx.head_sha[:12], 20)}")
    if safe_url(ctx.run_url):
        bits.append(f"[workflow run]({ctx.run_url})")
    return ["", "<sub>kcgate · " + " · ".join(bits) + "</sub>"] if bits else []


def _with_hint(ctx: RenderContext, hint: str) -> RenderContext:
    return replace(ctx, overflow_hint=hint)


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"


# ---- grouping: one row per contract and cause ------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """The case changes one reviewer-facing row stands for: one contract, one category, one cause."""

    changes: tuple[CaseChange, ...]

    @property
    def first(self) -> CaseChange:
        return self.changes[0]

    @property
    def worst(self) -> CaseChange:
        """The case that decides the row: the most severe (non-finite first), then the largest budget."""
        return max(self.changes, key=_severity_of)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(sorted({c.dtype for c in self.changes} - {""}))

    @property
    def shapes(self) -> tuple[str, ...]:
        return tuple(sorted({shape_of(c.case_id) for c in self.changes} - {""}, key=_shape_order))

    @property
    def runners(self) -> tuple[str, ...]:
        return tuple(sorted({c.runner for c in self.changes}))

    @property
    def seeds(self) -> tuple[str, ...]:
        return tuple(sorted({seed_index(c.case_id) for c in self.changes} - {""}, key=_seed_order))


def group_key(c: CaseChange) -> tuple[bool, str, str, str, str]:
    """Rows group by blocking, category, contract and cause; a change with no contract keeps its runner."""
    cause = c.cause or (c.signature if c.status == Status.FAIL else "")
    return (c.blocking, c.category, c.contract_id, cause, "" if c.contract_id else c.runner)


def group_changes(changes: Iterable[CaseChange]) -> list[Group]:
    """Changes grouped into rows, in the order of each group's most severe change."""
    groups: dict[tuple[bool, str, str, str, str], list[CaseChange]] = {}
    for c in sorted(changes, key=rank):
        groups.setdefault(group_key(c), []).append(c)
    return [Group(tuple(cs)) for cs in groups.values()]


def seed_index(case_id: str) -> str:
    """'s1' from '<contract>/<dtype>/<shape>/s1', 'f0' from a fresh case's id ("" for another form)."""
    last = case_id.rsplit("/", 1)[-1]
    return last if re.fullmatch(r"[sf]\d{1,6}", last) else ""


def _seed_order(s: str) -> tuple[bool, int]:
    return s[0] == "f", int(s[1:])  # the replayed seeds, then the fresh ones


def shape_of(case_id: str) -> str:
    """'128x4096' from '<contract>/<dtype>/<shape>/s1' ("" when the id has another form)."""
    parts = case_id.rsplit("/", 3)
    return parts[-2] if len(parts) == 4 and re.fullmatch(r"\d{1,9}(x\d{1,9}){0,7}", parts[-2]) else ""


def _shape_order(s: str) -> tuple[int, ...]:
    return tuple(int(d) for d in s.split("x"))


def nonfinite(c: CaseChange) -> bool:
    """A failure whose error is not a number: the kernel gave NaN or Inf where the oracle is finite."""
    if c.status != Status.FAIL or c.budget_used is not None:
        return False
    return c.cause not in CAUSE or CAUSE[c.cause].budget_meaningful  # integrity: nothing was compared


def _severity_of(c: CaseChange) -> tuple[int, float, float]:
    if nonfinite(c):
        return (2, 0.0, 0.0)
    if c.severity is None:
        return (0, 0.0, c.budget_used or 0.0)
    return (1, c.severity, c.budget_used or 0.0)


# ---- sections ---------------------------------------------------------------------------------

_GROUP_HEAD = (
    "| | contract | change | runners | dtype | shape | cases (seeds) | severity | budget used | max ULP "
    "| max error | cause or message |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
)


def _sections(verdict: Diff, ctx: RenderContext, collapse: bool) -> list[Section]:
    changes = [c for c in verdict.changes if c.category not in SILENT]
    blocking = group_changes(c for c in changes if c.blocking)
    others = group_changes(c for c in changes if not c.blocking)
    descriptions = dict(ctx.descriptions)
    rows = tuple(group_row(g, ctx, descriptions) for g in blocking)
    repro = tuple(r for g in blocking if (r := reproduce_line(g, ctx)))
    return [  # the runners table is short and says which numbers can be trusted: it gets room first
        Section("rows", ("### Blocking", "", *_GROUP_HEAD), rows, ("",), priority=1),
        Section("reproduce commands", (REPRODUCE_HEAD, ""), repro, ("",), priority=2),
        Section("charts", CHARTS_HEAD, _charts(verdict, ctx), ("",), priority=3),
        Section("runners", ("### Runners", "", *_RUNNER_HEAD), _runner_rows(verdict, ctx), ("",), priority=0),
        _folded(
            "rows",
            f"Other changes ({len(others):,})",
            _GROUP_HEAD,
            tuple(group_row(g, ctx, descriptions) for g in others),
            collapse,
            4,
        ),
        _folded("contracts", "Contract × runner", *matrix(verdict), collapse, 5),
        _folded("legend", "How to read these numbers", (), LEGEND, True, 6),
    ]


def _charts(verdict: Diff, ctx: RenderContext) -> tuple[str, ...]:
    rows = chart_rows(verdict, ctx.history, ctx.base_ref) if ctx.charts else ()
    return tuple(r + "\n" for r in rows)  # a blank line between a fence and the next line of text


def _folded(
    kind: str, title: str, head: Sequence[str], rows: Sequence[str], collapse: bool, priority: int
) -> Section:
    if not collapse:
        return Section(kind, (f"### {title}", "", *head), tuple(rows), ("",), priority)
    opening = ("<details>", f"<summary>{title}</summary>", "", *head)
    return Section(kind, opening, tuple(rows), ("", "</details>", ""), priority)


def group_row(g: Group, ctx: RenderContext, descriptions: dict[str, str]) -> str:
    """One row for a group of case changes; every field from the results is escaped."""
    worst = g.worst
    cells = [
        icon(worst),
        _contract_cell(worst, ctx, descriptions),
        _change_cell(g),
        md_cell(", ".join(g.runners), 200),
        _list_cell(g.dtypes),
        _list_cell(g.shapes),
        _cases_cell(g),
        severity_cell(worst),
        _budget_cell(g, worst),
        _num(_max(c.max_ulp for c in g.changes if low_precision(c.dtype))),
        _sci(_max(c.max_abs_err for c in g.changes)),
        md_cell(_cause_text(worst), 160),
    ]
    return "| " + " | ".join(cells) + " |"


def _list_cell(values: Sequence[str]) -> str:
    shown = ", ".join(values[:4]) + (", …" if len(values) > 4 else "")
    return md_cell(shown, 120) if values else "–"


def severity_cell(c: CaseChange) -> str:
    """Baseline → now severity of the row's worst case; a failing one is bold, an error says so."""
    if c.status in UNEVALUATED:
        return str(c.status)
    if c.severity is None and not nonfinite(c):
        return "–"
    now = "NaN/Inf" if nonfinite(c) else severity_words(c.severity, c.status)
    now = f"**{now}**" if c.status == Status.FAIL else now
    if c.base_severity is None or not c.base_status or nonfinite(c):  # never a number standing in for NaN
        return now
    return f"{severity_words(c.base_severity, c.base_status)} → {now}"


def _budget_cell(g: Group, worst: CaseChange) -> str:
    """The worst case's budget used (and its drift factor); never the baseline's number standing in for a
    missing one."""
    if any(nonfinite(c) for c in g.changes):
        return "NaN/Inf"
    if worst.budget_used is None:
        return "–"
    return budget_text(worst.base_budget_used, worst.budget_used) + factor_text(worst)


def _contract_cell(c: CaseChange, ctx: RenderContext, descriptions: dict[str, str]) -> str:
    if not c.contract_id:
        return "–"
    name = md_cell(c.contract_id, 80)
    # a current case's line is the PR head's contracts.toml; a vanished case's line is the baseline's
    url = ctx.source_url if c.status else ctx.base_source_url
    if c.line and c.line > 0 and not c.source and safe_url(url):  # a discovered one's line is its .py's
        name = f"[{name}]({url}#L{int(c.line)})"
    about = descriptions.get(c.contract_id, "")
    return f"{name}: {md_text(about, 100)}" if about else name


def _change_cell(g: Group) -> str:
    c = g.first
    words = label(c.category)
    if c.category in WAIVER_APPLIED and c.status in UNEVALUATED:
        words += f" ({c.status})"
    elif c.category in UNKNOWN and c.status:
        words += f" ({'fails' if c.status == Status.FAIL else c.status})"
    return words


def _cases_cell(g: Group) -> str:
    if not g.first.case_id:
        return "no results"
    seeds = g.seeds
    shown = ", ".join(seeds[:6]) + (", …" if len(seeds) > 6 else "")
    return f"{len(g.changes):,} ({shown})" if seeds else f"{len(g.changes):,}"


def _cause_text(c: CaseChange) -> str:
    if c.category in NO_RESULTS:
        return f"no results: {c.message}" if c.message else "no results"
    return c.signature or c.message


REPRODUCE_HEAD = (
    "**Reproduce** (the worst case of each row; run from the repository root on a machine like the runner's; "
    "a rerun never replaces a fuller results file: it writes into a repro/ folder beside it and says so):"
)


def reproduce_line(g: Group, ctx: RenderContext) -> str:
    """A list item with the command that reruns the row's worst case, and its runner's job log."""
    c = g.worst
    if not (c.case_id and c.status and c.seed is not None):
        return ""
    rerun = dict(ctx.reruns).get(c.runner, Rerun())
    command = reproduce_command(c, ctx.contracts_file, rerun)
    where = f" on {md_text(c.runner, 60)}"
    log = dict(ctx.job_urls).get(c.runner, "") or ctx.vendor_run_url
    if safe_url(log):
        where += f" ([job log]({log}))"
    line = f"- {md_text(c.contract_id, 80)}{where}: {md_code(command, 600)}"
    if c.shrunk_shape and c.dtype:
        shape = tuple(c.shrunk_shape)
        shrunk = replace(c, case_id=case_id(c.contract_id, c.dtype, shape, 0))
        cmd = reproduce_command(shrunk, ctx.contracts_file, rerun) + " --shape " + "x".join(map(str, shape))
        line += f"; smallest failing shape {'x'.join(map(str, shape))}: {md_code(cmd, 600)}"
    if c.shrunk_nonzero:
        where = "there it" if c.shrunk_shape else "at its own shape it"
        line += f"; {where} {nonzero_phrase(tuple(c.shrunk_nonzero))}"
    return line


def reproduce_command(c: CaseChange, contracts_file: str, rerun: Rerun) -> str:
    """The shell command that reruns case ``c`` as its runner ran it: the contracts file, runner, device,
    recorded environment and overriding options, the case id, the seed that gives it its seed, its dtype."""
    env = [f"{name}={shlex.quote(value)}" for name, value in rerun.env]
    parts = [*env, "kcgate run -c", shlex.quote(contracts_file or "contracts.toml")]
    parts += ["--runner", shlex.quote(c.runner)]
    if rerun.backend:
        parts += ["--device", shlex.quote(rerun.backend)]
    parts += map(shlex.quote, rerun.options)
    parts += ["-k", shlex.quote(c.case_id), "--seed", str(base_seed_for(c.seed or 0, c.case_id))]
    if c.dtype:
        parts += ["--dtype", shlex.quote(c.dtype)]
    return " ".join(parts)


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


def _sci(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def _max(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def safe_url(url: str) -> bool:
    """Only https links made of URL characters: no spaces, brackets or quotes to break Markdown."""
    return bool(url) and bool(_SAFE_URL.match(url)) and ")" not in url


# ---- runners ------------------------------------------------------------------------------------

_RUNNER_HEAD = (
    "| runner | device | status | blocking | changed | cases | log |",
    "|---|---|---|---|---|---|---|",
)


def _runner_rows(verdict: Diff, ctx: RenderContext) -> tuple[str, ...]:
    devices, logs = dict(ctx.devices), dict(ctx.job_urls)
    return tuple(
        _runner_row(r, devices.get(r.runner, ""), logs.get(r.runner, ""))
        for r in sorted(verdict.runners, key=lambda r: r.runner)
    )


def _runner_row(r: RunnerDiff, device: str, log: str) -> str:
    blocking = sum(c.blocking for c in r.changes)
    changed = sum(c.category not in SILENT for c in r.changes)
    present = bool(r.fingerprint_key)
    cells = [
        md_cell(r.runner, 60),
        md_cell(device, 60) if present else "–",
        runner_status(r, blocking),
        str(blocking),
        str(changed),
        str(len(r.changes)) if present else "no results",
        f"[job log]({log})" if safe_url(log) else "–",
    ]
    return "| " + " | ".join(cells) + " |"


def runner_status(r: RunnerDiff, blocking: int) -> str:
    """What a reviewer can trust about a runner: only a same-fingerprint baseline makes it verified."""
    if not r.fingerprint_key:
        return f"{'❌' if blocking else '⚠️'} no results"
    if not r.base_fingerprint_key:
        state = "❔ unverified: no baseline"
    elif r.base_fingerprint_key != r.fingerprint_key:
        state = (
            "❔ unverified: other hardware or software "
            f"(fingerprint {md_code(r.base_fingerprint_key, 16)} → {md_code(r.fingerprint_key, 16)})"
        )
    else:
        state = f"✅ verified (fingerprint {md_code(r.fingerprint_key, 16)})"
    return f"❌ blocking · {state[2:]}" if blocking else state


# ---- the cross-vendor matrix --------------------------------------------------------------------


def matrix(verdict: Diff) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Contract × runner: each cell's status, then the number of the case that decides it."""
    runners = sorted({r.runner for r in verdict.runners})[:MATRIX_MAX_RUNNERS]
    absent = {r.runner for r in verdict.runners if not r.fingerprint_key}
    cells = _worst_per_cell(verdict.changes)
    contracts = sorted({cid for (cid, _r) in cells})
    head = (
        "| contract | " + " | ".join(md_cell(r, 40) for r in runners) + " |",
        "|---|" + "---|" * len(runners),
    )
    rows = tuple(_matrix_row(cid, runners, cells, absent) for cid in contracts)
    return head, rows


def _worst_per_cell(changes: Iterable[CaseChange]) -> dict[tuple[str, str], CaseChange]:
    """The change that decides each (contract, runner) cell: the most severe, then the largest budget."""
    out: dict[tuple[str, str], CaseChange] = {}
    for c in changes:
        if not c.contract_id:
            continue
        key = (c.contract_id, c.runner)
        held = out.get(key)
        if held is None or _cell_order(c) < _cell_order(held):
            out[key] = c
    return out


def _cell_order(c: CaseChange) -> tuple[int, int, int, float, float]:
    blocking_first, category = rank(c)[:2]
    level, severe, budget = _severity_of(c)
    return (blocking_first, category, -level, -severe, -budget)


def _matrix_row(
    cid: str, runners: Sequence[str], cells: dict[tuple[str, str], CaseChange], absent: set[str]
) -> str:
    parts = [md_cell(cid, 80)]
    for runner in runners:
        c = cells.get((cid, runner))
        parts.append(matrix_cell(c) if c else ("no results" if runner in absent else "·"))
    return "| " + " | ".join(parts) + " |"


def matrix_cell(c: CaseChange) -> str:
    """'❌ fail 7.20×': the icon and the case's status, then its severity (NaN/Inf when non-finite)."""
    status = c.status or c.category  # a removed case has no status now: its category says so
    if nonfinite(c):
        number = "NaN/Inf"
    elif c.status in UNEVALUATED or c.severity is None:
        number = ""
    else:
        number = severity_words(c.severity, c.status)
    return f"{icon(c)} {status} {number}".rstrip()
