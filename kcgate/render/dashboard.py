"""The static history dashboard: plain HTML with inline SVG, no script and no network (a CSP forbids
both), so it opens from a file. Pure: a HistoryView in, {file name: HTML} out. Every string from the
history (contract ids, runner names, causes, messages) is escaped; links come only from ``Links``."""

from __future__ import annotations

import hashlib
import html
import math
import re
import shlex
from collections import Counter
from dataclasses import dataclass

from kcgate.history.view import HistoryView, Point
from kcgate.render.history_text import budget_words, divergence_words, move_words
from kcgate.results.model import Status

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#1b7c83", "#bf3989", "#6e7781")
CHART_W, CHART_H, PAD = 760, 260, 40
BUDGET_AXIS_CAP = 4.0  # budgets above 4x the allowance are drawn at the top edge (and say so)


@dataclass(frozen=True)
class Band:
    """One colour of the matrix: a cell whose status is ``status`` (or any, "") and budget up to ``upto``."""

    name: str
    colour: str
    status: str
    upto: float


BANDS = (  # first match wins; the legend and the tests read this table
    Band("fails", "#f85149", Status.FAIL, math.inf),
    Band("error", "#a371f7", Status.ERROR, math.inf),
    Band("refused by the kernel", "#d0d7de", Status.REFUSED, math.inf),
    Band("at most half the budget", "#7ee787", "", 0.5),
    Band("up to the budget", "#f2cc60", "", 1.0),
    Band("over the budget", "#f85149", "", math.inf),
)
NO_BUDGET = Band("no result or no budget", "#eaeef2", "", math.nan)


@dataclass(frozen=True)
class Links:
    """Trusted URL prefixes (from the CI settings, never from the history)."""

    commit: str = ""  # e.g. https://github.com/acme/kernels/commit/
    pull: str = ""  # e.g. https://github.com/acme/kernels/pull/
    contracts_file: str = "contracts.toml"


def band(p: Point | None) -> Band:
    """The matrix colour of a point: by its status when it did not pass, else by its budget used."""
    if p is None:
        return NO_BUDGET
    for b in BANDS:
        if b.status == p.status or (not b.status and p.budget is not None and p.budget <= b.upto):
            return b
    return NO_BUDGET


def page_name(contract: str) -> str:
    """A contract's page: named by a hash, since the id is untrusted and may hold any character."""
    return "c-" + hashlib.sha256(contract.encode("utf-8", "surrogatepass")).hexdigest()[:16] + ".html"


def render_site(view: HistoryView, links: Links = Links()) -> dict[str, str]:
    pages = {"index.html": render_index(view, links)}
    pages.update((page_name(c), render_contract(view, c, links)) for c in view.contracts)
    return pages


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


_SAFE_PREFIX = re.compile(r"^https://[A-Za-z0-9._~:/@-]+/$")


def _link(prefix: str, tail: str, text: str) -> str:
    if prefix and _SAFE_PREFIX.match(prefix) and re.fullmatch(r"[0-9a-f]{7,64}|\d{1,10}", tail):
        return f'<a href="{e(prefix + tail)}">{text}</a>'
    return text


def commit_html(view: HistoryView, sha: str, links: Links) -> str:
    pr = view.pr_of(sha)
    out = _link(links.commit, sha, f"<code>{e(sha[:10])}</code>")
    return out + (" " + _link(links.pull, str(pr), f"PR #{pr}") if pr else "")


def _page(title: str, body: list[str]) -> str:
    head = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>{e(title)}</title>",
        "<style>body{font:14px system-ui,sans-serif;margin:24px;color:#1f2328}"
        "table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left}"
        "td.cell{text-align:right;font-variant-numeric:tabular-nums}code{font-size:12px}"
        ".legend span{display:inline-block;padding:2px 8px;margin-right:6px}</style>",
        "</head><body>",
    ]
    return "\n".join(head + body + ["</body></html>"]) + "\n"


# ---- the index: the matrix at the head, the moves, the diverging runners -----------------------------


def render_index(view: HistoryView, links: Links = Links()) -> str:
    body = [f"<h1>kcgate history</h1><p>{len(view.commits)} commits, {len(view.runners)} runners, "
            f"{len(view.contracts)} contracts; head {commit_html(view, view.head, links)}. "
            f"Budget drift: {e(view.drift_rule)}.</p>"]  # fmt: skip
    body += ["<h2>Runner &times; contract at the head</h2>", _legend(), _matrix(view)]
    body += ["<h2>Steps past the drift rule</h2>", _moves(view, links)]
    body += [
        "<h2>Runners diverging from the consensus</h2>",
        _list(divergence_words(d) for d in view.divergences),
    ]
    return _page("kcgate history", body)


def _legend() -> str:
    seen = dict.fromkeys((b.name, b.colour) for b in (*BANDS, NO_BUDGET))
    return (
        '<p class="legend">'
        + "".join(f'<span style="background:{c}">{e(n)}</span>' for n, c in seen)
        + "</p>"
    )


def _matrix(view: HistoryView) -> str:
    head = view.at_head()
    rows = [
        '<table id="matrix"><tr><th>contract</th>'
        + "".join(f"<th>{e(r)}</th>" for r in view.runners)
        + "</tr>"
    ]
    for contract in view.contracts:
        cells = "".join(_matrix_cell(head.get((contract, r)), contract, r) for r in view.runners)
        rows.append(f'<tr><td><a href="{page_name(contract)}">{e(contract)}</a></td>{cells}</tr>')
    return "\n".join(rows + ["</table>"])


def _matrix_cell(p: Point | None, contract: str, runner: str) -> str:
    b = band(p)
    text = "&middot;" if p is None else e(budget_words(p.budget) if p.budget is not None else p.status)
    data = f' data-contract="{e(contract)}" data-runner="{e(runner)}" data-band="{e(b.name)}"'
    if p is not None:
        data += f' data-commit="{e(p.commit)}" data-status="{e(p.status)}"'
    return f'<td class="cell" style="background:{b.colour}"{data}>{text}</td>'


def _moves(view: HistoryView, links: Links) -> str:
    if not view.moves:
        return "<p>None in these commits.</p>"
    items = [
        f'<li data-kind="{e(m.kind)}" data-commit="{e(m.commit)}">{commit_html(view, m.commit, links)}: '
        f'<a href="{page_name(m.contract)}">{e(m.contract)}</a> {e(move_words(m).split(": ", 1)[1])} on {e(m.runner)}</li>'
        for m in view.moves
    ]
    return '<ul id="moves">' + "".join(items) + "</ul>"


def _list(items: object) -> str:
    lines = [f"<li>{e(i)}</li>" for i in items]  # type: ignore[attr-defined]
    return "<ul>" + "".join(lines) + "</ul>" if lines else "<p>None.</p>"


# ---- a contract's page -----------------------------------------------------------------------------------


def render_contract(view: HistoryView, contract: str, links: Links = Links()) -> str:
    body = ['<p><a href="index.html">&larr; all contracts</a></p>', f"<h1>{e(contract)}</h1>"]
    body += ["<h2>Budget used over commits</h2>", chart_svg(view, contract, links)]
    body += ["<h2>Causes</h2>", _causes(view, contract)]
    body += ["<h2>Reproduce</h2>", _reproduce(view, contract, links)]
    body += ["<h2>History</h2>", _table(view, contract, links)]
    return _page(f"kcgate history: {contract}", body)


def chart_svg(view: HistoryView, contract: str, links: Links = Links()) -> str:
    """One line per runner of budget used against commit (oldest left); each point links to its commit."""
    n = max(len(view.commits), 2)
    budgets = [min(p.budget, BUDGET_AXIS_CAP) for p in view.of_contract(contract) if p.budget is not None]
    top = max([1.2, *budgets])
    x = {c.sha: PAD + i * (CHART_W - 2 * PAD) / (n - 1) for i, c in enumerate(view.commits)}

    def y(b: float) -> float:
        return CHART_H - PAD - min(b, BUDGET_AXIS_CAP) / top * (CHART_H - 2 * PAD)

    parts = [f'<svg id="chart" xmlns="http://www.w3.org/2000/svg" width="{CHART_W}" height="{CHART_H}" role="img">',
             f'<line x1="{PAD}" x2="{CHART_W - PAD}" y1="{y(1.0):.1f}" y2="{y(1.0):.1f}" stroke="#cf222e" stroke-dasharray="4 3"/>',
             f'<text x="{CHART_W - PAD + 2}" y="{y(1.0) + 4:.1f}" font-size="11">1.0</text>',
             f'<text x="2" y="{PAD - 10}" font-size="11">budget used (capped at {BUDGET_AXIS_CAP:g})</text>']  # fmt: skip
    parts += _ticks(view, x)
    legend = []
    for i, runner in enumerate(view.runners):
        series = [p for p in view.series(contract, runner) if p.budget is not None]
        if not series:
            continue
        colour = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{x[p.commit]:.1f},{y(p.budget or 0.0):.1f}" for p in series)
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}" data-runner="{e(runner)}"/>'
        )
        parts += [_point(view, p, x[p.commit], y(p.budget or 0.0), colour, links) for p in series]
        legend.append(f'<span style="border-left:12px solid {colour}">{e(runner)}</span>')
    parts.append("</svg>")
    return "\n".join(parts) + '<p class="legend">' + "".join(legend) + "</p>"


def _ticks(view: HistoryView, x: dict[str, float]) -> list[str]:
    """The commit (and PR) under each step; every k-th when there are many."""
    step = max(1, len(view.commits) // 12)
    out = []
    for c in view.commits[::step]:
        label = c.sha[:7] + (f" #{c.pr}" if c.pr else "")
        out.append(
            f'<text class="tick" x="{x[c.sha]:.1f}" y="{CHART_H - PAD + 16}" font-size="10" text-anchor="middle">{e(label)}</text>'
        )
    return out


def _point(view: HistoryView, p: Point, cx: float, cy: float, colour: str, links: Links) -> str:
    pr = view.pr_of(p.commit)
    title = f"{p.runner} at {p.commit[:10]}{f' (PR #{pr})' if pr else ''}: budget used {budget_words(p.budget)}, {p.status}"
    fill = band(p).colour if p.status == Status.FAIL else colour
    circle = (
        f'<circle class="point" cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{fill}" data-runner="{e(p.runner)}" '
        f'data-commit="{e(p.commit)}" data-budget="{p.budget!r}" data-status="{e(p.status)}"><title>{e(title)}</title></circle>'
    )
    href = links.commit + p.commit if links.commit and _SAFE_PREFIX.match(links.commit) else ""
    return f'<a href="{e(href)}">{circle}</a>' if href else circle


def _causes(view: HistoryView, contract: str) -> str:
    counts = Counter((p.cause, p.runner) for p in view.of_contract(contract) if p.cause)
    if not counts:
        return "<p>No failure diagnosed in these commits.</p>"
    rows = [
        f"<li>{e(cause)} on {e(runner)}: {n} commits</li>" for (cause, runner), n in sorted(counts.items())
    ]
    return "<ul>" + "".join(rows) + "</ul>"


def _reproduce(view: HistoryView, contract: str, links: Links) -> str:
    head = view.at_head()
    ranked = sorted(
        (p for (c, _r), p in head.items() if c == contract),
        key=lambda p: (p.status != Status.FAIL, -(p.budget or 0.0)),
    )
    if not ranked:
        return "<p>No run at the head.</p>"
    worst = ranked[0]
    cmd = " ".join(
        [
            "kcgate run -c",
            shlex.quote(links.contracts_file),
            "--runner",
            shlex.quote(worst.runner),
            "-k",
            shlex.quote(contract),
        ]
    )
    return f"<p>The worst runner at the head, on a machine like it:</p><pre><code>{e(cmd)}</code></pre>"


def _table(view: HistoryView, contract: str, links: Links) -> str:
    rows = [
        "<table><tr><th>commit</th><th>runner</th><th>status</th><th>budget used</th><th>cases</th><th>failing</th><th>cause</th></tr>"
    ]
    order = {c.sha: i for i, c in enumerate(view.commits)}
    points = sorted(view.of_contract(contract), key=lambda p: (-order[p.commit], p.runner))
    for p in points:
        rows.append(
            f"<tr><td>{commit_html(view, p.commit, links)}</td><td>{e(p.runner)}</td><td>{e(p.status)}</td>"
            f'<td class="cell" style="background:{band(p).colour}">{e(budget_words(p.budget))}</td>'
            f"<td>{p.cases}</td><td>{p.failing}</td><td>{e(p.cause)}</td></tr>"
        )
    return "\n".join(rows + ["</table>"])
