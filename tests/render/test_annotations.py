"""Annotations: blocking first, GitHub's per-step caps respected, omissions announced, text escaped."""

from __future__ import annotations

from kcgate.gate.model import Diff, RunnerDiff
from kcgate.render.annotations import (
    Caps,
    batches,
    check_annotation,
    make_annotations,
    render_workflow_commands,
    select,
    workflow_command,
)
from tests.testing.golden_files import check_golden
from tests.testing.report_samples import big_verdict, change, hostile_verdict, sample_verdict


def test_annotations_golden() -> None:
    kept, omitted = select(make_annotations(sample_verdict()))
    assert omitted == {}
    check_golden("annotations.txt", render_workflow_commands(kept))


def test_one_annotation_per_contract_and_category() -> None:
    notes = make_annotations(big_verdict(1000))  # 1000 cases of 97 contracts, all new violations
    assert len(notes) == 97 and all(n.level == "error" for n in notes)
    assert "more; see the job summary" in notes[0].message


def test_caps_keep_errors_first_and_say_how_many_were_omitted() -> None:
    changes = [change("new-violation", contract=f"c{i:02d}", line=i + 1) for i in range(25)]
    changes += [change("budget-drift", contract=f"d{i:02d}", blocking=False) for i in range(25)]
    changes += [change("fixed", contract=f"f{i:02d}", blocking=False) for i in range(25)]
    kept, omitted = select(make_annotations(Diff((RunnerDiff("r", "k", "k", tuple(changes)),))))
    levels = [a.level for a in kept]
    assert levels.count("error") == 10 and levels.count("warning") == 9 and levels.count("notice") == 9
    assert levels == sorted(levels, key=["error", "warning", "notice"].index)
    assert omitted == {"error": 16, "warning": 17, "notice": 17}
    assert kept[9].title == "16 more errors omitted"


def test_job_cap_bounds_the_total() -> None:
    changes = [change("new-violation", contract=f"c{i:02d}") for i in range(30)]
    kept, _ = select(
        make_annotations(Diff((RunnerDiff("r", "k", "k", tuple(changes)),))), Caps(error=40, job=12)
    )
    assert len(kept) == 12


def test_workflow_commands_cannot_be_spoofed() -> None:
    [note] = make_annotations(hostile_verdict())
    line = workflow_command(note)
    assert line.count("\n") == 0 and line.startswith("::error file=contracts.toml,line=12,title=")
    # A newline in the message would start a second, spoofed command on the next log line.
    assert "::error::spoof" not in line.split("::", 2)[1] and "%0A## heading" in line
    assert "\r" not in line and "\x1b" not in line


def test_check_annotations_and_batches() -> None:
    records = [check_annotation(a) for a in make_annotations(sample_verdict())]
    assert (
        records[0]["annotation_level"] == "failure" and records[0]["start_line"] == 1
    )  # missing runner: no line
    assert [len(b) for b in batches(records * 30)] == [50, 50, 50, 50, 10]
