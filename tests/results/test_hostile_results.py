"""Hostile results files: every defect is a clear ResultsError / exit 3 or safe output, never a traceback.

Also runs ``diff`` and ``compare`` in a subprocess where ``import torch`` fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kcgate.cli import app
from kcgate.contracts.policy import Policy
from kcgate.errors import ResultsError
from kcgate.gate.compare import compare_runs
from kcgate.gate.diff import make_diff
from kcgate.render import compare_formats, diff_formats
from kcgate.results.baseline import load_results
from kcgate.results.model import CASE_FIELDS, MAX_TEXT, METRIC_FIELDS, load_run

DATA = Path(__file__).parents[1] / "data" / "diff"
TODAY_ARGS = ["--today", "2026-06-01"]
HOSTILE_ID = (
    "<script>alert(1)</script> | @octocat [x](javascript:alert(1)) ![i](http://e.invalid/p.png) `tick`"
)


def _doc(version: int = 2, **case: object) -> dict[str, object]:
    """The sample results as schema ``version`` (the files in DATA are schema 1), optionally with one case."""
    doc = json.loads((DATA / "current.json").read_text())
    if case:
        doc["cases"] = [{"case_id": "c1", "contract_id": "k", "status": "pass", **case}]
    if version == 2:
        doc.update(schema_version=2, case_fields=list(CASE_FIELDS), metric_fields=list(METRIC_FIELDS))
        doc["cases"] = [_row(c) for c in doc["cases"]]  # type: ignore[attr-defined]
    return doc


def _row(case: dict[str, object]) -> list[object]:
    metrics = case.get("metrics")
    row = [case.get(k) for k in CASE_FIELDS]
    row[CASE_FIELDS.index("metrics")] = (
        [metrics.get(k) for k in METRIC_FIELDS] if isinstance(metrics, dict) else metrics
    )
    return row


def _write(tmp: Path, doc: object, name: str = "r.json") -> Path:
    path = tmp / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


# ---- malformed files -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ((DATA / "current.json").read_text()[:500], "not valid JSON"),
        (
            '{"schema_version": 99, "runner": "x", "fingerprint": {}, "cases": []}',
            "schema_version 99 is not supported",
        ),
        ('{"kind": "something-else"}', "not a kcgate results file"),
        ("\xff\xfe garbage", "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        (
            '{"schema_version": 1, "runner": "x", "fingerprint": {"backend": "cpu"}, "cases": [{"status": "weird"}]}',
            "status",
        ),
    ],
)
def test_malformed_file_is_a_results_error_and_exit_3(tmp_path: Path, content: str, message: str) -> None:
    path = _write(tmp_path, content)
    with pytest.raises(ResultsError, match=re.escape(message)):
        load_results(path)
    code, out = _cli("diff", str(DATA / "base.json"), str(path))
    assert code == 3 and message in out and "Traceback" not in out


def test_100_mb_file_is_refused_by_size_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as fh:
        fh.truncate(100 * 1024 * 1024)  # sparse: the size is real, the disk use is not
    start = time.perf_counter()
    code, out = _cli("compare", str(path))
    assert code == 3 and "over the" in out and "cap" in out
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("version", [1, 2])
def test_huge_strings_are_cut(tmp_path: Path, version: int) -> None:
    path = _write(tmp_path, _doc(version, case_id="x" * 5_000_000, message="m" * 1_000_000))
    (case,) = load_run(path).cases
    assert len(case.case_id) == MAX_TEXT
    run = load_results(path)
    text = compare_formats.render_markdown(compare_runs(run)) + diff_formats.render_markdown(
        make_diff(run, {}, Policy(), __import__("datetime").date(2026, 6, 1))
    )
    assert max(len(line) for line in text.splitlines()) < 2000


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_metrics_become_missing_and_outputs_stay_strict_json(
    tmp_path: Path, number: str, version: int
) -> None:
    text = json.dumps(
        _doc(version, metrics={"budget_used": 0.5, "max_abs_err": 1e-3, "extra": {"norm_err": 1.0}})
    )
    text = (
        text.replace("0.5", number)
        .replace("0.001", number)
        .replace('"norm_err": 1.0', f'"norm_err": {number}')
    )
    path = _write(tmp_path, text)
    (case,) = load_run(path).cases
    assert case.metrics.budget_used is None and case.metrics.max_abs_err is None
    for args in (
        ["diff", str(path), str(path), "--format", "json"],
        ["compare", str(path), "--format", "json"],
    ):
        code, out = _cli(*args)
        assert code == 0, out
        json.loads(out)


def test_unknown_fields_are_ignored(tmp_path: Path) -> None:
    doc = _doc(1)
    doc["future_field"] = {"a": 1}
    doc["cases"][0]["another"] = [1, 2]  # type: ignore[index]
    assert load_run(_write(tmp_path, doc)).cases == load_run(DATA / "current.json").cases
    doc = _doc(2)
    doc["future_field"] = {"a": 1}
    assert load_run(_write(tmp_path, doc)).cases == load_run(DATA / "current.json").cases


def _older(doc: dict[str, object]) -> dict[str, object]:
    """The document as a kcgate before the last case column (``shrunk_nonzero``) was appended wrote it."""
    doc["case_fields"] = doc["case_fields"][:-1]  # type: ignore[index]
    doc["cases"] = [r[:-1] for r in doc["cases"]]  # type: ignore[attr-defined]
    return doc


def test_a_file_written_before_a_column_was_appended_reads_it_as_its_default(tmp_path: Path) -> None:
    assert CASE_FIELDS[-8:-4] == ("source", "harness_s", "shrunk_shape", "shrunk_nonzero")
    assert CASE_FIELDS[-4:] == ("attribution", "base_commit", "base_rerun", "base_summary")
    before_attribution = _doc(2)
    for _ in range(4):
        before_attribution = _older(before_attribution)
    cases = load_run(_write(tmp_path, before_attribution)).cases
    assert cases == load_run(DATA / "current.json").cases and all(c.attribution == "" for c in cases)
    cases = load_run(_write(tmp_path, _older(before_attribution))).cases  # _older edits it in place
    assert cases == load_run(DATA / "current.json").cases and all(c.shrunk_nonzero == () for c in cases)
    two_older = _older(before_attribution)  # before shrunk_shape too
    assert all(c.shrunk_shape == () for c in load_run(_write(tmp_path, two_older)).cases)
    three_older = _older(two_older)  # before harness_s too: read as its default
    assert all(c.harness_s == 0.0 for c in load_run(_write(tmp_path, three_older)).cases)
    four_older = _older(three_older)  # before source too
    assert all(c.source == "" for c in load_run(_write(tmp_path, four_older)).cases)
    doc = _older(_doc(2))
    doc["cases"][0].append(1)  # type: ignore[index]
    code, out = _cli("compare", str(_write(tmp_path, doc)))
    assert code == 3 and f"each case must be a list of the {len(CASE_FIELDS) - 1} case_fields" in out
    doc = _doc(2)
    doc["case_fields"] = doc["case_fields"][:3]  # type: ignore[index]
    code, out = _cli("compare", str(_write(tmp_path, doc)))
    assert code == 3 and "case_fields is not" in out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["cases"][0].append(1),
            f"each case must be a list of the {len(CASE_FIELDS)} case_fields",
        ),
        (
            lambda d: d["cases"].__setitem__(0, {"case_id": "a"}),
            f"each case must be a list of the {len(CASE_FIELDS)} case_fields",
        ),
        (
            lambda d: d["cases"][0][8].pop(),
            f"case.metrics must be a list of the {len(METRIC_FIELDS)} metric_fields",
        ),
        (lambda d: d["case_fields"].reverse(), "case_fields is not case_id, contract_id"),
        (lambda d: d.pop("metric_fields"), "metric_fields is not budget_used"),
        (lambda d: d.__setitem__("schema_version", True), "schema_version True is not supported"),
    ],
)
def test_schema_2_rows_that_do_not_fit_their_columns(tmp_path: Path, change, message: str) -> None:  # type: ignore[no-untyped-def]
    doc = _doc(2)
    change(doc)
    code, out = _cli("compare", str(_write(tmp_path, doc)))
    assert code == 3 and message in out and "Traceback" not in out


@pytest.mark.parametrize("version", [1, 2])
def test_wrong_types_are_named(tmp_path: Path, version: int) -> None:
    path = _write(tmp_path, _doc(version, metrics={"budget_used": "0.5"}))
    code, out = _cli("compare", str(path))
    assert code == 3 and "'budget_used' must be a number" in out


def test_bad_today_and_format_are_usage_errors() -> None:
    assert _cli("diff", str(DATA / "base.json"), str(DATA / "current.json"), "--today", "tomorrow")[0] == 3
    assert _cli("diff", str(DATA / "base.json"), str(DATA / "current.json"), "--format", "xml")[0] == 3


# ---- rendering of hostile ids --------------------------------------------------------------------


def _hostile_run(tmp_path: Path) -> Path:
    doc = _doc(case_id=HOSTILE_ID, contract_id=HOSTILE_ID, message=HOSTILE_ID, status="fail")
    doc["runner"] = "evil|@octocat<b>"
    return _write(tmp_path, doc)


def _assert_safe_markdown(text: str) -> None:
    """Outside code spans (which GitHub renders literally): no HTML, no mention, no link; tables keep shape."""
    text = re.sub(r"`[^`\n]*`", "`code`", text)
    assert "<script>" not in text and "<b>" not in text
    assert not re.search(r"@octocat", text)  # a zero-width space breaks every mention
    assert "](javascript:" not in text and "](http:" not in text and "![" not in text
    for row in (line for line in text.splitlines() if line.startswith("|")):
        assert _columns(row) == _columns(_table_header(text, row)), row


def _columns(row: str) -> int:
    return len(re.findall(r"(?<!\\)\|", row))


def _table_header(text: str, row: str) -> str:
    lines = text.splitlines()
    i = lines.index(row)
    while i > 0 and lines[i - 1].startswith("|"):
        i -= 1
    return lines[i]


def test_diff_markdown_escapes_hostile_ids(tmp_path: Path) -> None:
    path = _hostile_run(tmp_path)
    code, out = _cli("diff", str(DATA / "base.json"), str(path), "--format", "markdown", *TODAY_ARGS)
    assert code == 1
    assert "alert" in out  # the text is there, escaped
    _assert_safe_markdown(out)


def test_compare_markdown_escapes_hostile_ids(tmp_path: Path) -> None:
    hostile = _hostile_run(tmp_path)
    code, out = _cli("compare", str(hostile), str(DATA / "base.json"), "--format", "markdown")
    assert code == 0, out
    _assert_safe_markdown(out)


def test_console_output_has_no_terminal_escapes(tmp_path: Path) -> None:
    path = _write(tmp_path, _doc(case_id="a\x1b[2J\x1b]0;pwned\x07b", status="fail"))
    for args in (["diff", str(DATA / "base.json"), str(path)], ["compare", str(path)]):
        out = _cli(*args)[1]
        assert "\x1b" not in out and "\x07" not in out


# ---- the gate's exit codes -----------------------------------------------------------------------


def test_diff_exit_codes() -> None:
    base, cur = str(DATA / "base.json"), str(DATA / "current.json")
    assert _cli("diff", base, cur, *TODAY_ARGS)[0] == 1
    # its error cases are main's own on the same seeds: pre-existing, never blocking (issue 57)
    assert _cli("diff", cur, cur, *TODAY_ARGS)[0] == 0
    assert _cli("diff", base, base, *TODAY_ARGS)[0] == 0
    code, out = _cli("diff", base, base, "--expect-runner", "gpu-1", *TODAY_ARGS)
    assert code == 1 and "missing-runner" in out


def test_diff_directory_against_directory(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    (tmp_path / "b" / "cpu-ci.json").write_text((DATA / "base.json").read_text())
    (tmp_path / "c" / "cpu-ci.json").write_text((DATA / "base.json").read_text())
    assert _cli("diff", str(tmp_path / "b"), str(tmp_path / "c"))[0] == 0


# ---- no torch ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_diff_and_compare_run_where_torch_cannot_be_imported(tmp_path: Path) -> None:
    fake = tmp_path / "shadow" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ImportError('torch must not be imported by reporting commands')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])}
    probe = "import sys, runpy; sys.argv = ['kcgate', *sys.argv[1:]]; from kcgate.cli import main\n"
    probe += "try:\n    main()\nfinally:\n    assert 'torch' not in sys.modules, 'torch was imported'\n"
    base, cur = str(DATA / "base.json"), str(DATA / "current.json")
    for args, expected in (
        (["diff", base, base, "--format", "markdown"], 0),
        (["diff", base, cur, "--format", "json"], 1),
        (["compare", base, str(DATA / "current-no-baseline.json"), "--format", "markdown"], 0),
    ):
        done = subprocess.run(
            [sys.executable, "-c", probe, *args], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == expected, done.stderr
        assert "Traceback" not in done.stderr


# ---- workflow commands ---------------------------------------------------------------------------


def _injected_lines(text: str) -> list[str]:
    """Lines the Actions runner would run as workflow commands: ``::`` first (after blanks), ``##[`` anywhere."""
    lines = re.split(r"\r\n|\r|\n", text)
    return [line for line in lines if line.lstrip().startswith("::") or "##[" in line]


@pytest.mark.parametrize("fmt", ["console", "markdown", "json"])
def test_workflow_commands_in_untrusted_fields_never_reach_the_log(tmp_path: Path, fmt: str) -> None:
    doc = _doc(
        case_id="##[error]case",
        contract_id="::error title=Injected::contract",
        message="::stop-commands::token",
        status="fail",
    )
    doc["runner"] = "::error title=Injected::runner"
    path = _write(tmp_path, doc)
    for args in (
        ["diff", str(DATA / "base.json"), str(path), "--format", fmt, *TODAY_ARGS],
        ["diff", str(path), str(path), "--format", fmt, *TODAY_ARGS],
        ["compare", str(path), str(DATA / "base.json"), "--format", fmt],
    ):
        out = _cli(*args)[1]
        assert "Injected" in out, args  # the text is shown, defused
        assert _injected_lines(out) == [], args
        if fmt == "json":
            data = json.dumps(json.loads(out))  # the same data, only written differently
            assert "::error title=Injected::runner" in data and ("##[error]case" in data) == (
                args[0] == "diff"
            )


def test_workflow_commands_in_an_error_message_are_neutralised(tmp_path: Path) -> None:
    path = _write(tmp_path, _doc(status="##[error]forged"))
    code, out = _cli("diff", str(path), str(path))
    assert code == 3 and "is not one of" in out
    assert _injected_lines(out) == []


# ---- bounded parsing -----------------------------------------------------------------------------


def _five_commands(path: Path, tmp: Path) -> list[list[str]]:
    """Every command that reads results files, each given ``path``."""
    base = str(DATA / "base.json")
    return [
        ["diff", base, str(path), *TODAY_ARGS],
        ["report", str(path), "--baseline", base, "--no-publish", "--no-annotations", *TODAY_ARGS],
        ["compare", str(path)],
        ["merge", str(path), "--results", str(tmp / "merged.json")],
        ["baseline", "update", str(path), "--dir", str(tmp / "baselines")],
    ]


def _run_cli(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    # a subprocess with a timeout: the defect was a hang, which CliRunner would share
    return subprocess.run(
        [sys.executable, "-m", "kcgate", *args], cwd=tmp, capture_output=True, text=True, timeout=60
    )


def _special_files(tmp: Path) -> list[Path]:
    fifo = tmp / "fifo.json"
    os.mkfifo(fifo)
    return [fifo, Path("/dev/zero"), tmp]  # a FIFO with no writer, an endless device, a directory


@pytest.mark.parametrize("kind", [0, 1, 2], ids=["fifo", "dev-zero", "directory-named-as-file"])
@pytest.mark.slow
def test_only_regular_files_are_read_and_nothing_hangs(tmp_path: Path, kind: int) -> None:
    path = _special_files(tmp_path)[kind]
    if kind == 2:  # a directory is a directory source for diff/compare/report; name it as a member instead
        path = tmp_path / "d.json"
        path.mkdir()
    for args in _five_commands(path, tmp_path):
        t0 = time.monotonic()
        done = _run_cli(args, tmp_path)
        assert time.monotonic() - t0 < 30, args
        assert done.returncode == 3, (args, done.stdout, done.stderr)
        assert "not a regular file" in done.stderr or "no results files" in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_a_cap_is_enforced_while_reading_not_from_st_size(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps(_doc()) + " " * 2000)
    with pytest.raises(ResultsError, match="over the 1000-byte cap"):
        load_run(path, max_bytes=1000)


@pytest.mark.parametrize("depth", [100_000, 950])
@pytest.mark.slow
def test_deep_nesting_is_exit_3(tmp_path: Path, depth: int) -> None:
    deep = "[" * depth + "]" * depth
    text = json.dumps(_doc()).replace('"meta": {', '"meta": {"x": ' + deep + ", ", 1)
    path = _write(tmp_path, text)
    for args in _five_commands(path, tmp_path)[:3]:
        done = _run_cli(args, tmp_path)
        assert done.returncode == 3, (args, done.stderr)
        assert "nested" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_lone_surrogate_is_exit_3(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps(_doc(case_id="a\ud800b", status="fail")))  # json writes \\ud800
    assert "\\ud800" in path.read_text()
    for args in _five_commands(path, tmp_path):
        done = _run_cli(args, tmp_path)
        assert done.returncode == 3, (args, done.stderr)
        assert "lone surrogate" in done.stderr and "Traceback" not in done.stderr


def test_a_surrogate_pair_is_text(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps(_doc(case_id="emoji \U0001f600", status="pass")))
    assert "\\ud83d\\ude00" in path.read_text()
    assert next(iter(load_run(path).cases)).case_id == "emoji \U0001f600"


def test_merge_refuses_a_case_twice_in_one_file(tmp_path: Path) -> None:
    doc = _doc(case_id="c1", status="pass")
    doc["cases"] = doc["cases"] * 2  # type: ignore[operator]
    path = _write(tmp_path, doc)
    code, out = _cli("merge", str(path), "--results", str(tmp_path / "m.json"))
    assert code == 3 and "appears twice in this file" in out
    assert not (tmp_path / "m.json").exists()
