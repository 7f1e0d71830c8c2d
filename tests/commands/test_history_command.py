"""``kcgate history``, ``history add`` and ``history rebuild`` end to end: several commits and runners
in, the planted drift found at its commit, JSON and --output, and bad input refused with exit 3."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from kcgate.cli import app
from kcgate.results.model import load_run, write_run
from tests.conftest import ROOT
from tests.testing.history_samples import DRIFT_AT, DRIFT_RUNNER, FAIL_AT, commit_sha
from tests.testing.history_site import fill_store


def kcgate(*args: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "kcgate", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_the_console_shows_the_drift_at_its_commit(tmp_path: Path) -> None:
    db = fill_store(tmp_path, hostile=False)
    code, out = kcgate("history", "--db", str(db), "--contract", "gemm-bf16")
    assert code == 0, out
    assert (
        f"gemm-bf16 on {DRIFT_RUNNER} at {commit_sha(DRIFT_AT)[:8]} (PR #{10 + DRIFT_AT}): drift, severity 0.05 -> 0.60 (11.8x worse)"
        in out
    )
    assert (
        f"gemm-bf16 on {DRIFT_RUNNER} at {commit_sha(FAIL_AT)[:8]} (PR #{10 + FAIL_AT}): fails, severity 0.60 -> 3.50"
        in out
    )
    row = next(line for line in out.splitlines() if line.strip().startswith(DRIFT_RUNNER))
    assert row.split()[1:] == ["0.05", "0.05", "0.05", "0.60", "3.50!", "3.50!"]
    assert "softmax-fp32" not in out.split("Steps past")[0]


def test_json_and_output(tmp_path: Path) -> None:
    db = fill_store(tmp_path, hostile=False)
    out = tmp_path / "view.json"
    result = CliRunner().invoke(
        app, ["history", "--db", str(db), "--format", "json", "--output", str(out), "--last", "3"]
    )
    assert result.exit_code == 0 and result.output == ""
    view = json.loads(out.read_text())
    assert [c["sha"] for c in view["commits"]] == [commit_sha(i) for i in (3, 4, 5)]
    assert [(m["commit"], m["kind"]) for m in view["moves"]] == [(commit_sha(FAIL_AT), "fails")]
    assert {(d["contract"], d["runner"]) for d in view["divergences"]} == {
        ("gemm-bf16", DRIFT_RUNNER),
        ("softmax-fp32", DRIFT_RUNNER),
    }


def test_re_adding_and_rebuilding_change_nothing(tmp_path: Path) -> None:
    db = fill_store(tmp_path, hostile=False)
    code, out = kcgate(
        "history", "add", str(tmp_path / "results" / "c0"), "--commit", commit_sha(0), "--db", str(db)
    )
    assert code == 0 and "0 runs added (0 cases), 3 already recorded" in out
    code, out = kcgate("history", "rebuild", str(tmp_path / "log"), "--db", str(tmp_path / "re.db"))
    assert code == 0 and "18 runs added (72 cases), 0 already recorded" in out
    a = CliRunner().invoke(app, ["history", "--db", str(db), "--format", "json"]).output
    b = CliRunner().invoke(app, ["history", "--db", str(tmp_path / "re.db"), "--format", "json"]).output
    assert a == b


def test_bad_input_exits_3_with_the_place_and_the_fix(tmp_path: Path) -> None:
    db = fill_store(tmp_path, n=2, hostile=False)
    log = tmp_path / "log" / commit_sha(1) / "cpu-x86.jsonl"
    lines = log.read_text().splitlines()
    lines[2] = '["x", "c", "pass", "<script>", null, null, null, "", "", null]'
    log.write_text("\n".join(lines) + "\n")
    code, out = kcgate("history", "rebuild", str(tmp_path / "log"), "--db", str(tmp_path / "re.db"))
    assert code == 3 and f"{log}:3: budget_used must be a finite number >= 0 or null; fix: restore it" in out
    assert "Traceback" not in out and not (tmp_path / "re.db").exists()
    code, out = kcgate(
        "history", "add", str(tmp_path / "results" / "c0"), "--commit", "HEAD~1", "--db", str(db)
    )
    assert code == 3 and "--commit 'HEAD~1': pass the commit's hex SHA" in out
    code, out = kcgate("history", "--db", str(tmp_path / "absent.db"))
    assert code == 3 and "no history database" in out
    code, out = kcgate("history", "--db", str(db), "--format", "html")
    assert code == 3


def test_report_with_an_unreadable_history_warns_and_keeps_its_verdict(tmp_path: Path) -> None:
    from tests.testing.report_samples import write_results_pair

    base, artifacts = write_results_pair(tmp_path)
    junk = tmp_path / "junk.db"
    junk.write_text("not a database" * 50)
    out_md = tmp_path / "comment.md"
    code, out = kcgate(
        "report",
        str(artifacts),
        "--baseline",
        str(base),
        "--history",
        str(junk),
        "--comment-out",
        str(out_md),
    )
    assert code == 1 and "warning: " in out and "not a kcgate history database" in out and "delete" not in out
    assert 'x-axis ["base' in out_md.read_text()  # the chart without recorded commits


def test_report_with_a_hostile_history_warns_and_keeps_its_verdict(tmp_path: Path) -> None:
    """D5: hostile rows are exit 3 from `history`, and a warning that changes nothing in `report`."""
    import sqlite3

    from tests.testing.report_samples import write_results_pair

    db = fill_store(tmp_path, n=2, hostile=False)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE cells SET status = 99 WHERE run = 1")
    conn.close()
    code, out = kcgate("history", "--db", str(db))
    assert code == 3 and "the history database holds a case status '99'" in out and "Traceback" not in out
    base, artifacts = write_results_pair(tmp_path)
    code, out = kcgate("report", str(artifacts), "--baseline", str(base), "--history", str(db))
    assert code == 1 and "warning: " in out and "which kcgate never writes" in out, out


def _results(root: Path, run: object) -> Path:
    from kcgate.results.model import write_run

    write_run(root / "cpu-x86.json", run)  # type: ignore[arg-type]
    return root / "cpu-x86.json"


def test_a_complete_run_supersedes_the_incomplete_one_of_its_commit_and_runner(tmp_path: Path) -> None:
    """D2: the passing half recorded first; the complete run then reaches the history, its log file too."""
    from dataclasses import replace

    from tests.testing.history_samples import run_at

    full = run_at(FAIL_AT, DRIFT_RUNNER)
    half = full.with_cases(tuple(c for c in full.cases if c.status == "pass"), complete=False)
    db, log, sha = tmp_path / "h.db", tmp_path / "log", commit_sha(FAIL_AT)
    add = ["history", "add", "--commit", sha, "--db", str(db), "--log", str(log), "--format", "json"]
    code, out = kcgate(*add[:2], str(_results(tmp_path / "half", replace(half, runner="cpu-x86"))), *add[2:])
    assert code == 0 and json.loads(out)["added"] == 1, out
    code, out = kcgate(*add[:2], str(_results(tmp_path / "full", replace(full, runner="cpu-x86"))), *add[2:])
    assert code == 0 and json.loads(out) == {
        "added": 0,
        "cases": 4,
        "log_files": 1,
        "replaced": 1,
        "skipped": 0,
    }
    view = json.loads(kcgate("history", "--db", str(db), "--format", "json")[1])
    assert {(p["contract"], p["status"], p["failing"]) for p in view["points"]} == {
        ("gemm-bf16", "fail", 2),
        ("softmax-fp32", "pass", 0),
    }
    code, _ = kcgate("history", "rebuild", str(log), "--db", str(tmp_path / "re.db"))
    again = json.loads(kcgate("history", "--db", str(tmp_path / "re.db"), "--format", "json")[1])
    assert code == 0 and again["points"] == view["points"]


def test_add_refuses_what_rebuild_would_refuse_before_writing_anything(tmp_path: Path) -> None:
    """D3: an id over 300 characters, a device over 200, --pr 2^31: exit 3, no database, no log file."""
    from dataclasses import replace

    from tests.testing.history_samples import run_at

    run = run_at(0, "cpu-x86")
    long_id = run.with_cases((replace(run.cases[0], case_id="x" * 301), *run.cases[1:]))
    long_device = replace(run, fingerprint=replace(run.fingerprint, device="d" * 201))
    db, log = tmp_path / "h.db", tmp_path / "log"
    for i, (bad, words) in enumerate(
        [
            (long_id, "case_id must be a string of at most 300"),
            (long_device, "device must be a string of at most 200"),
        ]
    ):
        results = _results(tmp_path / str(i), bad)
        code, out = kcgate(
            "history", "add", str(results), "--commit", "a" * 40, "--db", str(db), "--log", str(log)
        )
        assert code == 3 and words in out and "nothing was recorded" in out, out
    code, out = kcgate(
        "history", "add", str(_results(tmp_path / "ok", run)), "--commit", "a" * 40, "--pr", str(2**31),
        "--db", str(db), "--log", str(log),
    )  # fmt: skip
    assert code == 3 and "--pr 2147483648: a pull request number is below 2^31" in out, out
    assert "Traceback" not in out and not db.exists() and not log.exists()


def test_the_head_is_the_last_run_recorded_whatever_its_commit_date(tmp_path: Path) -> None:
    """D4: a commit dated 2099 does not stay the head; a 1970-dated failure recorded later is the head and
    within --last 2; commit times are shown as given; a date that does not exist is refused."""
    from tests.testing.history_samples import run_at

    db = tmp_path / "h.db"
    for i, when in (
        (0, "2099-01-01T00:00:00Z"),
        (1, "2026-11-02T00:00:00Z"),
        (FAIL_AT, "1970-01-01T00:00:00Z"),
    ):
        results = _results(tmp_path / str(i), run_at(i, DRIFT_RUNNER))
        code, out = kcgate(
            "history", "add", str(results), "--commit", commit_sha(i), "--time", when, "--db", str(db)
        )
        assert code == 0, out
    view = json.loads(kcgate("history", "--db", str(db), "--format", "json", "--last", "2")[1])
    assert [(c["sha"], c["time"]) for c in view["commits"]] == [
        (commit_sha(1), "2026-11-02T00:00:00Z"),
        (commit_sha(FAIL_AT), "1970-01-01T00:00:00Z"),
    ]
    assert [(m["commit"], m["kind"]) for m in view["moves"]] == [(commit_sha(FAIL_AT), "fails")]
    for when in ("2026-02-30T10:00:00Z", "2026-04-31T00:00:00+01:00", "0001-01-01T00:00:00+01:00"):
        code, out = kcgate(
            "history", "add", str(results), "--commit", "b" * 40, "--time", when, "--db", str(db)
        )
        assert code == 3 and "a date that exists" in out and "Traceback" not in out, (when, out)


def test_another_applications_database_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    """D7: `history add --db` on another application's SQLite file."""
    import sqlite3

    from tests.testing.history_samples import run_at

    other = tmp_path / "app.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
    conn.close()
    before = other.read_bytes()
    results = _results(tmp_path / "r", run_at(0, "cpu-x86"))
    code, out = kcgate("history", "add", str(results), "--commit", "a" * 40, "--db", str(other))
    assert code == 3 and "another application (tables: users), left unchanged" in out, out
    assert other.read_bytes() == before and "delete" not in out
    code, out = kcgate("history", "--db", str(other))
    assert code == 3 and other.read_bytes() == before


def test_add_log_and_rebuild_refuse_a_linked_commit_directory(tmp_path: Path) -> None:
    """D10: links are refused on both sides, with exit 3."""
    from tests.testing.history_samples import run_at

    log, elsewhere = tmp_path / "log", tmp_path / "elsewhere"
    log.mkdir()
    elsewhere.mkdir()
    (log / ("a" * 40)).symlink_to(elsewhere, target_is_directory=True)
    results = _results(tmp_path / "r", run_at(0, "cpu-x86"))
    add = ["history", "add", str(results), "--db", str(tmp_path / "h.db"), "--log", str(log)]
    code, out = kcgate(*add, "--commit", "a" * 40)
    assert code == 3 and "is a symbolic link" in out and list(elsewhere.iterdir()) == [], out
    code, out = kcgate("history", "rebuild", str(log), "--db", str(tmp_path / "re.db"))
    assert code == 3 and "is a symbolic link" in out and not (tmp_path / "re.db").exists(), out


def test_commit_times_are_stored_in_utc() -> None:
    from kcgate.commands.history import utc_time

    assert utc_time("2026-11-01T12:00:00+01:00") == "2026-11-01T11:00:00Z"
    assert utc_time("2026-11-01T12:00:00Z") == "2026-11-01T12:00:00Z"
    assert utc_time("2026-11-01T12:00:00") == "2026-11-01T12:00:00"  # no zone: left to be refused
    assert utc_time("").endswith("Z")


def test_a_baseline_given_by_path_is_found_in_the_history_and_drawn_once(tmp_path: Path) -> None:
    """Issue 55: the base commit was drawn twice ("4444444", then "base") when the baseline files came by
    path, so no commit was known; the recorded run they are, case for case, names it."""
    db = fill_store(tmp_path, n=FAIL_AT + 1, hostile=False)
    results, out_md = tmp_path / "results", tmp_path / "comment.md"
    base = commit_sha(FAIL_AT - 1)
    code, out = kcgate(
        "report", str(results / f"c{FAIL_AT}"), "--baseline", str(results / f"c{FAIL_AT - 1}"),
        "--history", str(db), "--comment-out", str(out_md),
    )  # fmt: skip
    assert code == 1, out
    text = out_md.read_text()
    [axis] = re.findall(r"x-axis \[(.*)\]", text)
    assert f'"base {base[:7]}"' in axis and axis.count(base[:7]) == 1, axis
    assert f'"{commit_sha(FAIL_AT - 2)[:7]}"' in axis  # the commits before it still drawn
    assert f"Baselines from `{base[:12]}`" in text
    # a baseline that is no recorded run (one budget changed) names no commit: drawn after the history
    other = tmp_path / "other"
    for f in (results / f"c{FAIL_AT - 1}").glob("*.json"):
        run = load_run(f)
        first = run.cases[0]
        changed = replace(first, metrics=replace(first.metrics, budget_used=0.0123))
        write_run(other / f.name, replace(run, cases=(changed, *run.cases[1:])))
    code, out = kcgate(
        "report", str(results / f"c{FAIL_AT}"), "--baseline", str(other), "--history", str(db),
        "--comment-out", str(out_md),
    )  # fmt: skip
    [axis] = re.findall(r"x-axis \[(.*)\]", out_md.read_text())
    assert axis.endswith('"base", "head (3.5 capped)"') and f'"{base[:7]}"' in axis, axis
