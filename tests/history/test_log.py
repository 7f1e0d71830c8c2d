"""The history log is untrusted (a data branch anyone with push rights can edit): every defect is
refused with the file, the line and the fix, and a file must sit where its header says it belongs."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from kcgate.errors import ExitCode, ResultsError
from kcgate.history.log import CASE_FIELDS, dumps_log, log_path, parse_log, read_log, read_logs, write_log
from kcgate.history.records import from_run
from tests.testing.history_samples import commit_sha, commit_time, run_at


def entry():  # type: ignore[no-untyped-def]
    return from_run(run_at(4, "amd-mi300x"), commit_sha(4), commit_time(4), "77", 12)


def test_a_log_round_trips() -> None:
    e = entry()
    assert parse_log(dumps_log(e)) == e


def _lines() -> list[str]:
    return dumps_log(entry()).splitlines()


def _with(line: int, value: object) -> str:
    lines = _lines()
    lines[line - 1] = value if isinstance(value, str) else json.dumps(value)
    return "\n".join(lines) + "\n"


HEAD = json.loads(_lines()[0]) if False else None  # built per test below


@pytest.mark.parametrize(
    ("line", "mutate", "words"),
    [
        (1, lambda h: h | {"kind": "kcgate-results"}, "not a kcgate history file"),
        (1, lambda h: h | {"version": 99}, "version must be 1"),
        (1, lambda h: h | {"commit": "zz; rm -rf /"}, "commit must be a lowercase hex"),
        (1, lambda h: h | {"runner": "../../etc"}, "runner must be a runner name"),
        (1, lambda h: h | {"time": "yesterday"}, "time must be YYYY-MM-DDTHH:MM:SSZ"),
        (1, lambda h: h | {"time": "2026-02-30T10:00:00Z"}, "time must be .*, a time that exists"),
        (1, lambda h: h | {"time": "2026-01-01T25:00:00Z"}, "time must be .*, a time that exists"),
        (
            1,
            lambda h: h | {"recorded": "2026-13-01T00:00:00.000000Z"},
            "recorded must be .*, a time that exists",
        ),
        (1, lambda h: h | {"complete": "yes"}, "complete must be true or false"),
        (1, lambda h: h | {"pr": "12"}, "pr must be a pull request number"),
        (1, lambda h: h | {"case_fields": ["case_id"]}, "case_fields must be"),
        (1, lambda h: [h], "the first line must be the run's header object"),
    ],
)
def test_a_bad_header_is_refused_at_line_1(line: int, mutate, words: str) -> None:  # type: ignore[no-untyped-def]
    head = json.loads(_lines()[0])
    with pytest.raises(ResultsError, match=f"^h:1: .*{words}") as info:
        parse_log(_with(line, mutate(head)), "h")
    assert "fix: restore it from the data branch" in info.value.message
    assert info.value.exit_code == ExitCode.BAD_USAGE


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ('["a"', "not a JSON line"),
        ('{"a": 1}', "a case must be a list of the 10 case_fields"),
        (["x", "c", "exploded", None, None, None, None, "", "", None], "status must be one of"),
        (["x", "c", "pass", -1.0, None, None, None, "", "", None], "budget_used must be a finite number"),
        (
            ["x", "c", "pass", 1e400, None, None, None, "", "", None],
            "not a JSON line|budget_used must be a finite",
        ),
        (["x", "c", "pass", "0.5", None, None, None, "", "", None], "budget_used must be a finite number"),
        (["", "c", "pass", None, None, None, None, "", "", None], "case_id must not be empty"),
        (
            ["x" * 301, "c", "pass", None, None, None, None, "", "", None],
            "case_id must be a string of at most 300",
        ),
        ('["x", "c", "pass", NaN, null, null, null, "", "", null]', "not a JSON line"),
        ("[" * 5000, "not a JSON line"),
    ],
)
def test_a_bad_case_line_is_refused_with_its_line(row: object, words: str) -> None:
    with pytest.raises(ResultsError, match=f"^h:3: ({words})"):
        parse_log(_with(3, row), "h")


def test_a_negative_severity_is_refused() -> None:
    with pytest.raises(ResultsError, match="^h:3: severity must be a finite number"):
        parse_log(_with(3, ["x", "c", "fail", 0.5, None, None, None, "", "", -2.0]), "h")


def test_a_log_written_before_severities_reads_them_from_status_and_budget() -> None:
    """Old logs (9 case fields) stay readable: a failure's severity is its budget over 1, or infinite where
    its budget is not over 1 (another gate failed it); a pass's is its budget; an error's infinite."""
    head = json.loads(_lines()[0]) | {"case_fields": list(CASE_FIELDS[:-1])}
    rows = [
        ["a", "c", "fail", 3.0, None, None, None, "", ""],
        ["b", "c", "fail", 0.4, None, None, None, "", ""],
        ["d", "c", "pass", 0.4, None, None, None, "", ""],
        ["e", "c", "error", None, None, None, None, "", ""],
    ]
    got = parse_log("\n".join(json.dumps(x) for x in [head, *rows]) + "\n")
    assert [c.severity for c in got.cases] == [3.0, math.inf, 0.4, math.inf]


def test_a_severity_that_contradicts_its_status_is_read_as_the_status_says() -> None:
    """An edited log cannot draw a failure as a pass: a failing case's severity is over 1, a pass's at most 1."""
    fail = parse_log(_with(2, ["x", "c", "fail", 0.5, None, None, None, "", "", 0.5])).cases[0]
    ok = parse_log(_with(2, ["x", "c", "pass", 0.5, None, None, None, "", "", 7.0])).cases[0]
    assert fail.severity == math.inf and ok.severity == 1.0


def test_an_infinite_severity_round_trips_as_null() -> None:
    e = entry()
    line = json.loads(dumps_log(replace(e, cases=(replace(e.cases[0], status="error"),))).splitlines()[1])
    assert line[-1] is None


def test_a_file_must_sit_where_its_header_says(tmp_path: Path) -> None:
    e = entry()
    path = write_log(tmp_path, e)
    assert path == log_path(tmp_path, e) and read_log(path) == e
    moved = tmp_path / commit_sha(0) / "amd-mi300x.jsonl"
    moved.parent.mkdir()
    moved.write_text(path.read_text())
    with pytest.raises(ResultsError, match=r":1: commit 5{40} does not match its directory"):
        list(read_logs(tmp_path))
    renamed = tmp_path / commit_sha(4) / "nvidia-h100.jsonl"
    renamed.write_text(path.read_text())
    with pytest.raises(ResultsError, match="runner 'amd-mi300x' does not match the file name"):
        read_log(renamed)


def test_empty_binary_and_linked_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match=":1: the file is empty"):
        parse_log("", "h")
    with pytest.raises(ResultsError, match="not UTF-8"):
        parse_log(b"\xff\xfe", "h")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jsonl").symlink_to("/etc/passwd")
    with pytest.raises(ResultsError, match="is a symbolic link"):
        list(read_logs(tmp_path))


def test_a_log_without_the_fields_of_54_reads_as_complete_and_recorded_at_its_commit_time() -> None:
    head = json.loads(_lines()[0])
    del head["complete"], head["recorded"]
    e = parse_log(_with(1, head), "h")
    assert e.complete and e.recorded == commit_time(4)


def test_linked_commit_directories_are_refused_both_ways(tmp_path: Path) -> None:
    """D10: ``history add --log`` does not write through a linked commit directory, and ``rebuild`` does
    not silently skip one."""
    from kcgate.errors import UsageError

    e = entry()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    log = tmp_path / "log"
    log.mkdir()
    (log / e.commit).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UsageError, match="is a symbolic link"):
        write_log(log, e)
    assert list(elsewhere.iterdir()) == []
    write_log(elsewhere, e)  # a run there, reachable only through the link
    with pytest.raises(ResultsError, match=f"{e.commit}: is a symbolic link"):
        list(read_logs(log))


def test_a_complete_run_replaces_an_incomplete_runs_file_and_nothing_else(tmp_path: Path) -> None:
    from dataclasses import replace

    full = entry()
    half = replace(full, cases=full.cases[:1], complete=False)
    assert write_log(tmp_path, half) is not None
    assert write_log(tmp_path, replace(half, cases=full.cases[:2])) is None  # incomplete: the first stays
    assert read_log(log_path(tmp_path, full)) == half
    assert write_log(tmp_path, full) is not None and read_log(log_path(tmp_path, full)) == full
    assert write_log(tmp_path, half) is None and read_log(log_path(tmp_path, full)) == full
