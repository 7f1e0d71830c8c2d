"""The dashboard renderer: pure (a view in, pages out), every untrusted string escaped, colours from
the band table, and no script, stylesheet or image from anywhere (a CSP forbids them)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kcgate.history.store import open_store
from kcgate.history.view import HistoryView, Point, load_view
from kcgate.render.dashboard import BANDS, NO_BUDGET, Links, band, page_name, render_site
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
    ("status", "budget", "name"),
    [
        ("pass", 0.2, "at most half the budget"),
        ("pass", 0.5, "at most half the budget"),
        ("pass", 0.97, "up to the budget"),
        ("pass", 1.0, "up to the budget"),
        ("pass", 1.2, "over the budget"),
        ("fail", 0.1, "fails"),
        ("error", None, "error"),
        ("pass", None, NO_BUDGET.name),
    ],
)
def test_bands(status: str, budget: float | None, name: str) -> None:
    assert band(Point("c", "r", "a" * 40, status, budget, 1, 0, "")).name == name
    assert len({b.name for b in BANDS}) == len(BANDS)


def test_the_renderer_is_pure(view: HistoryView, tmp_path: Path) -> None:
    assert render_site(view) == render_site(view)
    assert not list(tmp_path.iterdir())
