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
from kcgate.render.bands import BANDS, FAIL_RED, NO_BUDGET, Band, band_of
from kcgate.render.history_text import divergence_words, move_words, severity_text
from kcgate.results.model import Status

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
# one colour, one dash and one marker per runner, so no runner's line hides another's
PALETTE = ("#0969da", "#8250df", "#1a7f37", "#bc4c00", "#1b7c83", "#bf3989", "#6e7781", "#953800")
DASHES = ("", "6 3", "2 3", "8 3 2 3")
MARKERS = ("circle", "square", "triangle", "diamond")
CHART_W, CHART_H, PAD = 760, 280, 48
AXIS_LO, AXIS_HI = 0.01, 100.0  # the severity axis (log): 1 = at the edge; beyond 100 drawn at the top
AXIS_TICKS = (0.01, 0.1, 0.5, 1.0, 10.0, 100.0)


@dataclass(frozen=True)
class Links:
    """Trusted URL prefixes (from the CI settings, never from the history)."""

    commit: str = ""  # e.g. https://github.com/acme/kernels/commit/
    pull: str = ""  # e.g. https://github.com/acme/kernels/pull/
    contracts_file: str = "contracts.toml"


def band(p: Point | None) -> Band:
    """The colour of a point (``kcgate.render.bands``)."""
    return NO_BUDGET if p is None else band_of(p.status, p.severity)


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


# ---- the index: the commit x contract grid, a chart, the matrix at the head, the moves, the divergences


def render_index(view: HistoryView, links: Links = Links()) -> str:
    body = [f"<h1>kcgate history</h1><p>{len(view.commits)} commits, {len(view.runners)} runners, "
            f"{len(view.contracts)} contracts; head {commit_html(view, view.head, links)}. "
            f"Severity: 1 = at the edge of the contract, over 1 = fails, whichever gate failed it. "
            f"Drift: {e(view.drift_rule)}.</p>"]  # fmt: skip
    body += ["<h2>Commits &times; contracts</h2>", _legend(), _grid(view, links)]
    body += ["<h2>Worst severity over commits</h2>", worst_chart(view, links)]
    body += ["<h2>Runner &times; contract at the head</h2>", _matrix(view)]
    body += ["<h2>Steps past the drift rule, into and out of failure</h2>", _moves(view, links)]
    body += [
        "<h2>Runners diverging from the consensus</h2>",
        _list(divergence_words(d) for d in view.divergences),
    ]
    return _page("kcgate history", body)


def _legend() -> str:
    seen = dict.fromkeys((b.name, b.colour, b.ink) for b in (*BANDS, NO_BUDGET))
    return (
        '<p class="legend">'
        + "".join(f'<span style="background:{c};color:{i}">{e(n)}</span>' for n, c, i in seen)
        + "</p>"
    )


def point_words(p: Point) -> str:
    """A point as a sentence: "fails, 7.00x its allowance (excess-error), 2 of 4 cases"."""
    if p.status in (Status.ERROR, Status.REFUSED):
        what = p.status
    elif p.status == Status.FAIL:
        what = "fails, " + (
            f"{p.severity:.3g}× its allowance" if p.severity != math.inf else "no finite measure"
        )
    else:
        what = f"passes, severity {severity_text(p.severity)}"
    cause = f" ({p.cause})" if p.cause else ""
    return f"{what}{cause}; {p.failing} of {p.cases} cases failing; budget used {severity_text(p.budget)}"


def _cell_text(p: Point) -> str:
    if p.status in (Status.ERROR, Status.REFUSED):
        return p.status
    return severity_text(p.severity) + ("×" if p.status == Status.FAIL and p.severity != math.inf else "")


def _grid(view: HistoryView, links: Links) -> str:
    """Commits (newest first) by contracts, one square per runner coloured by its severity; radio buttons
    and a CSS rule per runner filter the squares (no script)."""
    ids = {r: f"r{i}" for i, r in enumerate(view.runners)}
    rules = "".join(
        f"#rf-{i}:checked~#grid .sq:not(.{i}){{display:none}}#rf-{i}:checked~label[for=rf-{i}]{{font-weight:bold}}"
        for i in ids.values()
    )
    filters = ['<input type="radio" name="rf" id="rf-all" checked><label for="rf-all">all runners</label>']
    filters += [
        f'<input type="radio" name="rf" id="rf-{i}"><label for="rf-{i}">{e(r)}</label>'
        for r, i in ids.items()
    ]
    points = {(p.commit, p.contract, p.runner): p for p in view.points}
    rows = [
        '<table id="grid"><tr><th>commit</th>' + "".join(f"<th>{e(c)}</th>" for c in view.contracts) + "</tr>"
    ]
    for c in reversed(view.commits):
        cells = []
        for contract in view.contracts:
            found = [(r, q) for r in view.runners if (q := points.get((c.sha, contract, r))) is not None]
            cells.append("<td>" + "".join(_square(q, ids[r]) for r, q in found) + "</td>")
        rows.append(f"<tr><td>{commit_html(view, c.sha, links)}</td>{''.join(cells)}</tr>")
    order = f'<p id="grid-order">One square per runner in each cell, in this order: {e(", ".join(view.runners))}.</p>'
    return (
        f'<div class="filters"><style>{rules}.sq{{display:inline-block;min-width:3.2em;margin:1px;'
        "padding:1px 3px;text-align:right;font-size:12px}</style>"
        + "".join(filters) + order + "\n" + "\n".join(rows) + "</table></div>"
    )  # fmt: skip


def _square(p: Point, runner_id: str) -> str:
    b = band(p)
    title = f"{p.runner}, {p.contract} at {p.commit[:10]}: {point_words(p)}"
    return (
        f'<span class="sq {runner_id}" style="background:{b.colour};color:{b.ink}" data-runner="{e(p.runner)}" '
        f'data-contract="{e(p.contract)}" data-commit="{e(p.commit)}" data-band="{e(b.name)}" '
        f'data-status="{e(p.status)}" title="{e(title)}">{e(_cell_text(p))}</span>'
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
    text = "&middot;" if p is None else e(_cell_text(p))
    data = f' data-contract="{e(contract)}" data-runner="{e(runner)}" data-band="{e(b.name)}"'
    if p is not None:
        data += f' data-commit="{e(p.commit)}" data-status="{e(p.status)}" title="{e(point_words(p))}"'
    return f'<td class="cell" style="background:{b.colour};color:{b.ink}"{data}>{text}</td>'


def _moves(view: HistoryView, links: Links) -> str:
    if not view.moves:
        return "<p>None in these commits.</p>"
    items = []
    for m in view.moves:
        style = f' style="color:{FAIL_RED};font-weight:bold"' if m.kind == "fails" else (
            ' style="font-weight:bold"' if m.kind == "drift" else ""
        )  # fmt: skip
        items.append(
            f'<li data-kind="{e(m.kind)}" data-commit="{e(m.commit)}" data-contract="{e(m.contract)}"{style}>{commit_html(view, m.commit, links)}: '
            f'<a href="{page_name(m.contract)}">{e(m.contract)}</a> {e(move_words(m).split(": ", 1)[1])} on {e(m.runner)}</li>'
        )
    return '<ul id="moves">' + "".join(items) + "</ul>"


def _list(items: object) -> str:
    lines = [f"<li>{e(i)}</li>" for i in items]  # type: ignore[attr-defined]
    return "<ul>" + "".join(lines) + "</ul>" if lines else "<p>None.</p>"


# ---- charts: severity (log axis) against commit, one line, dash and marker per runner --------------------


def render_contract(view: HistoryView, contract: str, links: Links = Links()) -> str:
    body = ['<p><a href="index.html">&larr; all contracts</a></p>', f"<h1>{e(contract)}</h1>"]
    body += ["<h2>Severity over commits</h2>", chart_svg(view, contract, links)]
    body += ["<h2>Causes</h2>", _causes(view, contract)]
    body += ["<h2>Reproduce</h2>", _reproduce(view, contract, links)]
    body += ["<h2>History</h2>", _table(view, contract, links)]
    return _page(f"kcgate history: {contract}", body)


def chart_svg(view: HistoryView, contract: str, links: Links = Links()) -> str:
    """One line per runner of the contract's severity against commit (oldest left)."""
    return _chart(view, {r: view.series(contract, r) for r in view.runners}, links)


def worst_chart(view: HistoryView, links: Links = Links()) -> str:
    """One line per runner of its worst contract's severity at each commit (the index's chart)."""
    order = {c.sha: i for i, c in enumerate(view.commits)}
    series: dict[str, list[Point]] = {}
    for r in view.runners:
        worst: dict[str, Point] = {}
        for contract in view.contracts:
            for p in view.series(contract, r):
                held = worst.get(p.commit)
                if held is None or _rank(p) > _rank(held):
                    worst[p.commit] = p
        series[r] = sorted(worst.values(), key=lambda p: order[p.commit])
    return _chart(view, series, links, chart_id="worst")


def _rank(p: Point) -> tuple[bool, float]:
    return (p.status == Status.FAIL or p.status == Status.ERROR, p.severity or 0.0)


def y_of(v: float) -> float:
    """The chart's y for a severity: log axis from AXIS_LO (bottom) to AXIS_HI (top), clamped."""
    lo, hi = math.log10(AXIS_LO), math.log10(AXIS_HI)
    t = (math.log10(min(max(v, AXIS_LO), AXIS_HI)) - lo) / (hi - lo)
    return CHART_H - PAD - t * (CHART_H - 2 * PAD)


def _chart(view: HistoryView, series: dict[str, list[Point]], links: Links, chart_id: str = "chart") -> str:
    n = max(len(view.commits), 2)
    x = {c.sha: PAD + 30 + i * (CHART_W - 2 * PAD - 60) / (n - 1) for i, c in enumerate(view.commits)}
    parts = [f'<svg id="{chart_id}" xmlns="http://www.w3.org/2000/svg" width="{CHART_W}" height="{CHART_H}" role="img">',
             f'<text x="4" y="{PAD - 20}" font-size="11">severity (log; 1 = at the edge, over 1 = fails; '
             f'beyond {AXIS_HI:g} drawn at the top with its value)</text>']  # fmt: skip
    parts += _y_ticks() + _ticks(view, x)
    legend = []
    shown = [(i, r, [p for p in ps if p.severity is not None]) for i, (r, ps) in enumerate(series.items())]
    for i, runner, points in shown:
        if not points:
            continue
        colour, dash, marker = PALETTE[i % len(PALETTE)], DASHES[i % len(DASHES)], MARKERS[i % len(MARKERS)]
        dx = (i - (len(shown) - 1) / 2) * 7.0  # a few pixels apart: equal values stay visible
        coords = " ".join(f"{x[p.commit] + dx:.1f},{y_of(p.severity or 0.0):.1f}" for p in points)
        dashes = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dashes} points="{coords}" data-runner="{e(runner)}"/>'
        )
        parts += [_point(view, p, x[p.commit] + dx, colour, marker, links) for p in points]
        legend.append(_key(runner, colour, dash, marker))
    parts.append("</svg>")
    return "\n".join(parts) + '<p class="legend">' + "".join(legend) + "</p>"


def _y_ticks() -> list[str]:
    """Gridlines and labels on the log axis, the region past the edge (failing) tinted."""
    top, edge = y_of(AXIS_HI), y_of(1.0)
    out = [
        f'<rect class="failing" x="{PAD}" y="{top:.1f}" width="{CHART_W - 2 * PAD}" height="{edge - top:.1f}" fill="#ffebe9"/>'
    ]
    for v in AXIS_TICKS:
        y = y_of(v)
        edge = v == 1.0
        stroke = f'stroke="{FAIL_RED}" stroke-dasharray="4 3"' if edge else 'stroke="#d0d7de"'
        out.append(
            f'<line class="ytick" x1="{PAD}" x2="{CHART_W - PAD}" y1="{y:.1f}" y2="{y:.1f}" {stroke}/>'
        )
        label = f"{v:g}" + (" edge" if edge else "")
        out.append(f'<text x="{PAD - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{label}</text>')
    return out


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


def _shape(marker: str, cx: float, cy: float, fill: str, stroke: str) -> str:
    paint = f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"'
    if marker == "square":
        return f'<rect x="{cx - 4:.1f}" y="{cy - 4:.1f}" width="8" height="8" {paint}'
    if marker == "triangle":
        return f'<polygon points="{cx:.1f},{cy - 5:.1f} {cx - 5:.1f},{cy + 4:.1f} {cx + 5:.1f},{cy + 4:.1f}" {paint}'
    if marker == "diamond":
        return f'<polygon points="{cx:.1f},{cy - 5:.1f} {cx + 5:.1f},{cy:.1f} {cx:.1f},{cy + 5:.1f} {cx - 5:.1f},{cy:.1f}" {paint}'
    return f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" {paint}'


def _key(runner: str, colour: str, dash: str, marker: str) -> str:
    dashes = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<span class="key" data-runner="{e(runner)}"><svg width="34" height="12"><line x1="1" x2="33" y1="6" y2="6" '
        f'stroke="{colour}" stroke-width="2"{dashes}/>{_shape(marker, 17, 6, "#fff", colour)}/></svg> {e(runner)}</span>'
    )


def _point(view: HistoryView, p: Point, cx: float, colour: str, marker: str, links: Links) -> str:
    pr = view.pr_of(p.commit)
    cy = y_of(p.severity or 0.0)
    title = f"{p.runner} at {p.commit[:10]}{f' (PR #{pr})' if pr else ''}: {point_words(p)}"
    fill = FAIL_RED if p.status in (Status.FAIL, Status.ERROR) else "#fff"
    shape = (
        f'{_shape(marker, cx, cy, fill, colour)} class="point" data-runner="{e(p.runner)}" data-commit="{e(p.commit)}" '
        f'data-severity="{p.severity!r}" data-status="{e(p.status)}"><title>{e(title)}</title></{_tag(marker)}>'
    )
    if (p.severity or 0.0) > AXIS_HI:
        shape += f'<text x="{cx + 6:.1f}" y="{cy + 4:.1f}" font-size="10" fill="{FAIL_RED}">{e(_cell_text(p))}</text>'
    href = links.commit + p.commit if links.commit and _SAFE_PREFIX.match(links.commit) else ""
    return f'<a href="{e(href)}">{shape}</a>' if href else shape


def _tag(marker: str) -> str:
    return {"square": "rect", "triangle": "polygon", "diamond": "polygon"}.get(marker, "circle")


def _causes(view: HistoryView, contract: str) -> str:
    counts = Counter((p.cause, p.runner) for p in view.of_contract(contract) if p.cause)
    if not counts:
        return "<p>No failure diagnosed in these commits.</p>"
    rows = [
        f"<li>{e(cause)} on {e(runner)}: {n} commit{'' if n == 1 else 's'}</li>"
        for (cause, runner), n in sorted(counts.items())
    ]
    return "<ul>" + "".join(rows) + "</ul>"


def _reproduce(view: HistoryView, contract: str, links: Links) -> str:
    head = view.at_head()
    ranked = sorted(
        (p for (c, _r), p in head.items() if c == contract),
        key=lambda p: (p.status != Status.FAIL, -(p.severity or 0.0)),
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
        "<table><tr><th>commit</th><th>runner</th><th>status</th><th>severity</th><th>budget used</th><th>cases</th>"
        "<th>failing</th><th>cause</th></tr>"
    ]
    order = {c.sha: i for i, c in enumerate(view.commits)}
    points = sorted(view.of_contract(contract), key=lambda p: (-order[p.commit], p.runner))
    for p in points:
        rows.append(
            f"<tr><td>{commit_html(view, p.commit, links)}</td><td>{e(p.runner)}</td><td>{e(p.status)}</td>"
            f'<td class="cell" style="background:{band(p).colour};color:{band(p).ink}">{e(_cell_text(p))}</td>'
            f'<td class="cell">{e(severity_text(p.budget))}</td>'
            f"<td>{p.cases}</td><td>{p.failing}</td><td>{e(p.cause)}</td></tr>"
        )
    return "\n".join(rows + ["</table>"])
