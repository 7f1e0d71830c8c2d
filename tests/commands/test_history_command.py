"""``kcgate history``, ``history add`` and ``history rebuild`` end to end: several commits and runners
in, the planted drift found at its commit, JSON and --output, and bad input refused with exit 3."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from kcgate.cli import app
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
    assert code == 1 and "warning: " in out and "not a kcgate history database" in out
    assert 'x-axis ["base' in out_md.read_text()  # the chart without recorded commits


def test_commit_times_are_stored_in_utc() -> None:
    from kcgate.commands.history import utc_time

    assert utc_time("2026-11-01T12:00:00+01:00") == "2026-11-01T11:00:00Z"
    assert utc_time("2026-11-01T12:00:00Z") == "2026-11-01T12:00:00Z"
    assert utc_time("2026-11-01T12:00:00") == "2026-11-01T12:00:00"  # no zone: left to be refused
    assert utc_time("").endswith("Z")
