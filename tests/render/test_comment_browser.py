"""The PR comment as a reviewer sees it: rendered GitHub-style (GFM tables, ```mermaid fences as GitHub
hands them to Mermaid) with Mermaid 11 (the version GitHub uses) in Debian's headless Chromium, offline.

Checks that every chart renders (no Mermaid syntax error), each runner's line in its own colour from the
key, the failing contract's line rising above the edge, and the title and Blocking table first. Needs
Chromium (.ci/run installs it) and mermaid@11's bundle (.ci/run: ``npm install --prefix build/node
mermaid@11``; or KCGATE_MERMAID=PATH to mermaid.min.js); without them the test skips and says why."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.render.test_comment_severity import _comment
from tests.render.test_dashboard_browser import CHROMIUM, SCREENSHOTS, Dom, chromium

MERMAID = Path(
    os.environ.get(
        "KCGATE_MERMAID", ROOT / "build" / "node" / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
    )
)
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and MERMAID.is_file()),
    reason="SKIPPED LOUDLY: the comment was not rendered in a browser: needs /usr/bin/chromium and mermaid@11 at "
    f"{MERMAID} (`npm install --prefix build/node mermaid@11`, as .ci/run does, or KCGATE_MERMAID=PATH)",
)


def github_html(markdown: str) -> str:
    """The comment as GitHub renders it: CommonMark with GFM tables and inline HTML (<details>, <sub>), and
    each ```mermaid fence handed to Mermaid as its source text."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")
    default = md.renderer.rules.get("fence")

    def fence(tokens, idx, options, env):  # type: ignore[no-untyped-def]
        token = tokens[idx]
        if token.info.strip() == "mermaid":
            return f'<pre class="mermaid">{html.escape(token.content)}</pre>\n'
        return default(tokens, idx, options, env)  # type: ignore[misc]

    md.renderer.rules["fence"] = fence
    return md.render(markdown)


def _page(tmp: Path, markdown: str) -> Path:
    page = tmp / "comment.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'></head><body style='width:980px'>"
        + github_html(markdown)
        + f"<script src='{MERMAID.as_uri()}'></script>"
        + "<script>mermaid.initialize({startOnLoad: false}); mermaid.run().then(() => "
        + "document.body.setAttribute('data-rendered', 'yes'));</script></body></html>",
        encoding="utf-8",
    )
    return page


def test_the_comment_renders_in_a_browser_with_every_chart_and_runner_visible(tmp_path: Path) -> None:
    page = _page(tmp_path, _comment())
    dom_text = chromium(
        "--allow-file-access-from-files", "--virtual-time-budget=15000", "--dump-dom", page.as_uri()
    )
    dom = Dom(dom_text)
    assert dom.find("body", data_rendered="yes"), "Mermaid did not finish"
    assert "Syntax error" not in dom_text and 'aria-roledescription="error"' not in dom_text
    assert len(dom.find("svg")) >= 1 and 'aria-roledescription="xychart"' in dom_text
    strokes = set(re.findall(r'stroke="(#[0-9a-fA-F]{6})"', dom_text)) | set(
        re.findall(r"stroke:\s*(#[0-9a-fA-F]{6})", dom_text)
    )
    # one colour per runner, as keyed, and the edge in the failure red
    assert {"#0969da", "#e16f24", "#cf222e"} <= {s.lower() for s in strokes}, strokes
    headings = [t.strip() for _, t in dom.find("h2") + dom.find("h3")]
    assert headings[0].startswith("❌") and headings[1] == "Blocking"  # the first screen: title, Blocking
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / "comment.png"
    chromium(
        "--allow-file-access-from-files", "--virtual-time-budget=15000", f"--screenshot={shot}", page.as_uri()
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
