"""One escaping for every renderer: Unicode line and paragraph separators (U+2028, U+2029, NEL) never
reach an output raw, where compare already dropped them and diff and report passed them through (#44)."""

from __future__ import annotations

import pytest

from kcgate.gate.model import Diff, RunnerDiff
from kcgate.render.annotations import make_annotations, render_workflow_commands
from kcgate.render.diff_formats import FORMATS, plain
from kcgate.render.escape import annotation_text, md_code, md_text
from kcgate.render.markdown import RenderContext, render_comment
from tests.testing.report_samples import change

SEPARATORS = ("\u2028", "\u2029", "\x85", "\u200b\u200e")
HOSTILE = "line one\u2028::error::spoofed\u2029##[error]x\x85y"


def _diff() -> Diff:
    c = change("new-violation", contract=f"gemm{HOSTILE}", message=HOSTILE, signature=HOSTILE, runner="nv")
    return Diff((RunnerDiff("nv", "aaaaaaaaaaaa", "aaaaaaaaaaaa", (c,)),))


def _clean(text: str) -> bool:
    return not any(s in text for s in ("\u2028", "\u2029", "\x85"))


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_diff_formats_carry_no_raw_separator(name: str) -> None:
    assert _clean(FORMATS[name](_diff()))


def test_report_comment_and_annotations_carry_no_raw_separator() -> None:
    assert _clean(render_comment(_diff(), RenderContext()))
    commands = render_workflow_commands(make_annotations(_diff()))
    assert _clean(commands)
    assert all(line.startswith("::") for line in commands.splitlines() if line)  # one command per line


@pytest.mark.parametrize("escape", [md_text, md_code, annotation_text, plain])
@pytest.mark.parametrize("sep", SEPARATORS)
def test_every_escaper_drops_them(escape, sep: str) -> None:  # type: ignore[no-untyped-def]
    assert _clean(escape(f"a{sep}b")) and "\u200e" not in escape(f"a{sep}b")
