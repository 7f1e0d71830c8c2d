"""The PR comment and job summary: golden files, size budgets, overflow lines and hostile input."""

from __future__ import annotations

import re

import pytest

from kcgate.render.markdown import (
    COMMENT_BUDGET,
    COMMENT_LIMIT,
    SUMMARY_LIMIT,
    RenderContext,
    budget_text,
    group_changes,
    render_comment,
    render_summary,
    safe_url,
)
from tests.testing.golden_files import check_golden
from tests.testing.report_samples import (
    HOSTILE,
    SHA_NEW,
    big_verdict,
    hostile_verdict,
    passing_verdict,
    sample_verdict,
)

CTX = RenderContext(
    head_sha=SHA_NEW,
    run_url="https://github.com/acme/kernels/actions/runs/42",
    source_url=f"https://github.com/acme/kernels/blob/{SHA_NEW}/contracts.toml",
    devices=(("nvidia-h100", "cuda H100 80GB sm_90"), ("amd-mi300x", "rocm MI300X gfx942")),
)


def test_comment_golden() -> None:
    check_golden("comment.md", render_comment(sample_verdict(), CTX))


def test_summary_golden() -> None:
    check_golden("summary.md", render_summary(sample_verdict(), CTX))


def test_passing_comment_golden() -> None:
    check_golden("comment-pass.md", render_comment(passing_verdict(), CTX))


def test_blocking_rows_come_first_and_unchanged_is_only_counted() -> None:
    text = render_comment(sample_verdict(), CTX)
    assert text.index("### Blocking") < text.index("Other changes")
    assert "1 unchanged" in text and "softmax-fp32/float32/8x1024/s0` | unchanged" not in text


@pytest.mark.parametrize("n", [5000, 20000])
@pytest.mark.slow
def test_comment_stays_under_githubs_limit_and_says_what_overflowed(n: int) -> None:
    verdict = big_verdict(n, contracts=n)
    text = render_comment(verdict, CTX, COMMENT_BUDGET)
    assert len(text) <= COMMENT_BUDGET < COMMENT_LIMIT
    shown = len(re.findall(r"^\| ❌ \| ", text, flags=re.M))
    match = re.search(r"… ([\d,]+) more rows", text)
    assert match and shown + int(match.group(1).replace(",", "")) == len(group_changes(verdict.blocking))
    assert "see the job summary" in text


def test_summary_stays_under_a_mebibyte() -> None:
    text = render_summary(big_verdict(20000, contracts=20000), CTX)
    assert len(text.encode("utf-8")) <= SUMMARY_LIMIT
    assert "see the JUnit XML report" in text


def _tables(text: str) -> list[list[int]]:
    """Cell counts of each table's rows (an escaped pipe or one inside a code span is not a separator)."""
    tables: list[list[int]] = []
    prev = False
    for line in text.splitlines():
        is_row = line.startswith("|")
        if is_row and not prev:
            tables.append([])
        if is_row:
            tables[-1].append(len(re.split(r"(?<!\\)\|", line)))  # GFM splits on pipes even in code spans
        prev = is_row
    return tables


def test_tables_keep_their_shape() -> None:
    for verdict in (sample_verdict(), hostile_verdict(), big_verdict(400)):
        for counts in _tables(render_summary(verdict, CTX) + render_comment(verdict, CTX)):
            assert len(set(counts)) == 1, counts


def test_hostile_ids_are_defused() -> None:
    text = render_comment(hostile_verdict(), CTX) + render_summary(hostile_verdict(), CTX)
    prose = re.sub(r"(?<!\\)`[^`\n]*`", "", text)  # code spans are inert: no pings, HTML or links inside them
    assert "@octocat" not in prose  # a zero-width space follows the @
    assert not re.search(r"(?<!\\)<img", prose) and "<!-- kcgate:sticky -->" not in text
    assert "](https://evil" not in prose and "https://evil" not in prose
    assert "```" not in text and "\x1b" not in text and "\u202e" not in text
    assert "\n## heading" not in text
    check_golden("comment-hostile.md", render_comment(hostile_verdict(), CTX))
    assert HOSTILE  # the fixture is what the golden file shows escaped


def test_links_come_only_from_safe_trusted_urls() -> None:
    assert safe_url("https://github.com/a/b/blob/abc/contracts.toml")
    assert (
        not safe_url("javascript:alert(1)")
        and not safe_url("https://x/a b")
        and not safe_url("https://x/(y)")
    )
    bad = RenderContext(source_url="https://x/) [evil](https://e")
    assert "evil" not in render_comment(sample_verdict(), bad)


def test_budget_text() -> None:
    assert budget_text(0.21, 1873.2) == "0.21 → 1,873"
    assert budget_text(None, 0.5) == "0.50" and budget_text(None, None) == "–"


def test_www_and_bare_domains_are_not_autolinked() -> None:
    from kcgate.gate.model import Diff, RunnerDiff
    from kcgate.render.diff_formats import render_markdown as diff_markdown
    from tests.testing.report_samples import change

    text = "see www.evil.example or phish.example.com/login"
    c = change("new-violation", runner="cpu-ci", contract="k", case="k-1", signature=text, message=text)
    verdict = Diff((RunnerDiff("cpu-ci", "eeeeeeeeeeee", "eeeeeeeeeeee", (c,)),))
    for out in (render_comment(verdict, CTX), render_summary(verdict, CTX), diff_markdown(verdict)):
        prose = re.sub(r"(?<!\\)`[^`\n]*`", "", out)
        assert "evil" in prose and "phish" in prose
        assert not re.search(r"(?i)\bwww\.", prose)  # GFM's extended www autolink
        assert not re.search(r"(?i)(evil|phish|example)\.[a-z]", prose)  # no bare domain GitHub could link
