"""The dashboard renderer: pure (a view in, pages out), every untrusted string escaped, colours from
the band table, and no script, stylesheet or image from anywhere (a CSP forbids them)."""

from __future__ import annotations

import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kcgate.history.store import open_store
from kcgate.history.view import HistoryView, Point, load_view
from kcgate.render.dashboard import BANDS, FAIL_RED, NO_BUDGET, Links, band, page_name, render_site
from tests.testing.history_samples import EXCESS
from tests.testing.history_site import HOSTILE, HOSTILE_CAUSE, fill_store


def parse_tags(text: str) -> list[tuple[str, list[str]]]:
    """Every element and its attribute names, as an HTML parser sees them."""
    found: list[tuple[str, list[str]]] = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found.append((tag, [a for a, _ in attrs]))

    Collect().feed(text)
    return found


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> HistoryView:
    root = tmp_path_factory.mktemp("hist")
    with open_store(fill_store(root)) as conn:
        return load_view(conn, 20)


def test_planted_markup_renders_as_text(view: HistoryView) -> None:
    pages = render_site(view, Links("https://github.com/acme/k/commit/", "https://github.com/acme/k/pull/"))
    assert HOSTILE in view.contracts and page_name(HOSTILE) in pages
    for name, text in pages.items():
        assert HOSTILE not in text and HOSTILE_CAUSE not in text, name
        tags = parse_tags(text)
        assert not {"script", "img", "b"} & {t for t, _ in tags}, name
        assert not [a for _, attrs in tags for a in attrs if a.startswith("on")], name
    page = pages[page_name(HOSTILE)]
    assert (
        "&lt;script&gt;alert(&quot;id&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&amp;amp;"
        in page
    )
    assert "&lt;b onmouseover=alert(2)&gt;cause&lt;/b&gt;" in page
    assert re.fullmatch(r"c-[0-9a-f]{16}\.html", page_name(HOSTILE))


def test_links_come_only_from_trusted_prefixes(view: HistoryView) -> None:
    plain = render_site(view)["index.html"]
    assert 'href="https' not in plain
    linked = render_site(view, Links("https://github.com/acme/k/commit/", "https://github.com/acme/k/pull/"))[
        "index.html"
    ]
    assert (
        f'href="https://github.com/acme/k/commit/{"4" * 40}"' in linked
        and 'href="https://github.com/acme/k/pull/13"' in linked
    )
    odd = render_site(view, Links('javascript:alert(1)//"', "https://x/ y/"))["index.html"]
    assert "javascript:" not in odd and "https://x/ y/" not in odd


def test_every_page_forbids_scripts_and_the_network(view: HistoryView) -> None:
    for text in render_site(view).values():
        assert "default-src 'none'" in text and "http://" not in text.replace(
            "http://www.w3.org/2000/svg", ""
        )


@pytest.mark.parametrize(
    ("status", "severity", "name"),
    [
        ("pass", 0.2, "passes, at most half the allowance"),
        ("pass", 0.5, "passes, at most half the allowance"),
        ("pass", 0.97, "passes, near the edge"),
        ("pass", 1.0, "passes, near the edge"),
        ("fail", 7.0, "fails"),
        ("fail", math.inf, "fails"),
        ("error", math.inf, "error"),
        ("pass", None, NO_BUDGET.name),
    ],
)
def test_bands(status: str, severity: float | None, name: str) -> None:
    budget = None if severity is None else 0.1
    assert band(Point("c", "r", "a" * 40, status, budget, 1, 0, "", severity)).name == name
    assert len({b.name for b in BANDS}) == len(BANDS)


def test_only_a_failure_is_red() -> None:
    """One red, for failures only: no band a passing point can fall in shares the failure's colour."""
    assert [b.name for b in BANDS if b.colour == FAIL_RED] == ["fails"]
    assert NO_BUDGET.colour != FAIL_RED


@pytest.fixture(scope="module")
def excess(tmp_path_factory: pytest.TempPathFactory) -> HistoryView:
    root = tmp_path_factory.mktemp("excess")
    with open_store(fill_store(root, hostile=False, contracts=("gemm-bf16", EXCESS))) as conn:
        return load_view(conn, 20)


def test_a_failure_of_another_gate_is_failing_on_every_page(excess: HistoryView) -> None:
    """rms-norm stays within its bound (budget 0.5) while it fails the sensitivity gate: the grid, the
    matrix, the chart and the table all say fails, with its severity (7x), never a flat 0.50."""
    pages = render_site(excess)
    index, page = pages["index.html"], pages[page_name(EXCESS)]
    squares = re.findall(
        r'<span class="sq [^>]*data-contract="rms-norm"[^>]*data-status="(\w+)"[^>]*>([^<]*)<', index
    )
    assert squares.count(("fail", "7.00×")) == 4 * 3 and squares.count(("pass", "0.80")) == 2 * 3
    assert re.search(r'data-contract="rms-norm" data-runner="cpu-x86" data-band="fails"[^>]*>7.00×<', index)
    points = re.findall(
        r'class="point" data-runner="cpu-x86"[^>]*data-severity="([^"]+)" data-status="(\w+)"', page
    )
    assert points == [("0.8", "pass")] * 2 + [("7.0", "fail")] * 4
    assert "fails, severity 0.80 -&gt; 7.00 (8.75x worse)" in index


def test_every_runner_has_its_own_line_dash_and_marker(excess: HistoryView) -> None:
    page = render_site(excess)[page_name(EXCESS)]
    lines = re.findall(
        r'<polyline fill="none" stroke="([^"]+)" stroke-width="2"(?: stroke-dasharray="([^"]+)")?', page
    )
    assert len(lines) == 3 and len(set(lines)) == 3
    first = re.findall(r'class="point" data-runner="([^"]+)" data-commit="' + "1" * 40, page)
    assert sorted(first) == sorted(excess.runners)
    xs = re.findall(r'(?:cx|x|points)="([0-9.]+)[^"]*"[^>]*class="point"[^>]*data-commit="' + "1" * 40, page)
    assert len(set(xs)) == 3  # the equal values sit apart: no marker hides another


def test_the_chart_has_ticks_on_both_axes(excess: HistoryView) -> None:
    page = render_site(excess)[page_name(EXCESS)]
    assert page.count('class="ytick"') == 6 and "1 edge" in page and page.count('class="tick"') == 6


def test_the_renderer_is_pure(view: HistoryView, tmp_path: Path) -> None:
    assert render_site(view) == render_site(view)
    assert not list(tmp_path.iterdir())


def _contrast(a: str, b: str) -> float:
    """WCAG's contrast ratio of two #rrggbb colours."""

    def luminance(c: str) -> float:
        rgb = [int(c[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_every_number_on_a_band_is_readable(excess: HistoryView) -> None:
    """Issue 55's review: the failing cells wrote their severity in dark ink on the red (2.9:1); each band
    names an ink of at least 4.5:1 (WCAG AA), and the grid, the matrix and the table use it."""
    for b in (*BANDS, NO_BUDGET):
        assert _contrast(b.colour, b.ink) >= 4.5, b.name
    pages = render_site(excess)
    fails = next(b for b in BANDS if b.name == "fails")
    assert re.search(
        rf'class="sq [^"]*" style="background:{fails.colour};color:{fails.ink}"[^>]*>7.00×<',
        pages["index.html"],
    )
    assert re.search(
        rf'style="background:{fails.colour};color:{fails.ink}"[^>]*data-band="fails"', pages["index.html"]
    )
    assert f'style="background:{fails.colour};color:{fails.ink}">7.00×<' in pages[page_name(EXCESS)]


def test_the_grid_says_which_square_is_which_runner(excess: HistoryView) -> None:
    """Three unlabelled squares per cell: the grid names the runners' order (a filter shows one alone)."""
    index = render_site(excess)["index.html"]
    assert "One square per runner in each cell, in this order: amd-mi300x, cpu-x86, nvidia-h100." in index
    squares = re.findall(r'<td><span class="sq[^<]*data-runner="([^"]+)"', index)
    assert set(squares) == {"amd-mi300x"}  # each cell starts with the first runner named


def test_a_cause_seen_at_one_commit_is_counted_in_the_singular(tmp_path: Path) -> None:
    with open_store(fill_store(tmp_path, n=5, hostile=False)) as conn:
        page = render_site(load_view(conn, 20))[page_name("gemm-bf16")]
    assert "low-precision-accumulator on amd-mi300x: 1 commit</li>" in page
