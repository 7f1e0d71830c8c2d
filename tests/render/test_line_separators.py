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


def test_validate_format_github_quotes_a_hostile_value_on_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import kcgate

    (tmp_path / "contracts.toml").write_text(
        '[project]\n\n[[contract]]\nid = "c"\nclass = "C-PRC-01"\nkernel = "torch:matmul"\n'
        'op = "mm\\u2028::error::spoofed\\u0085##[error]x"\n',
        encoding="utf-8",
    )
    proc = kcgate("validate", "contracts.toml", "--format", "github", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert _clean(proc.stdout + proc.stderr)
    assert not any(line.lstrip().startswith("::error::spoofed") for line in proc.stdout.splitlines())


def test_a_survivors_diff_cannot_close_its_code_block() -> None:
    """mutate's Markdown shows a survivor's diff of the kernel's own source: a ``` there ended the fence."""
    from kcgate.render.escape import md_fenced

    block = md_fenced(["- x = 1", "+ ```", "+ @octocat <img src=x>\u2028::error::y", "+ ````"], "diff", "  ")
    assert block[0] == "  `````diff" and block[-1] == "  `````"
    assert all(line.startswith("  ") for line in block) and _clean("\n".join(block))
