"""A history store with the planted drift (tests.testing.history_samples) and one hostile run, filled
through the real ``kcgate history add``; shared by the dashboard and command tests."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kcgate.cli import app
from kcgate.results.model import RunResult, Signature, write_run
from tests.testing.history_samples import RUNNERS, case, commit_sha, commit_time, write_commits

HOSTILE = '<script>alert("id")</script><img src=x onerror=alert(1)>&amp;'
HOSTILE_CAUSE = "<b onmouseover=alert(2)>cause</b>"


def hostile_run(runner: str) -> RunResult:
    sig = Signature(HOSTILE_CAUSE, "</pre><script>alert(3)</script>")
    return RunResult(runner, RUNNERS[runner], (case(HOSTILE, 0, "fail", 2.0, 1e-3, sig),))


def fill_store(root: Path, n: int = 6, hostile: bool = True, contracts: tuple[str, ...] = ()) -> Path:
    """``contracts``: those of ``history_samples.run_at`` (empty: its default two)."""
    db = root / "h.db"
    dirs = (
        write_commits(root / "results", n, contracts=contracts)
        if contracts
        else write_commits(root / "results", n)
    )
    if hostile:
        write_run(dirs[-1] / "hostile" / "cpu-x86.json", hostile_run("cpu-x86"))
    for i, d in enumerate(dirs):
        files = sorted(str(p) for p in d.rglob("*.json") if p.parent == d)
        args = [
            "history",
            "add",
            *files,
            "--commit",
            commit_sha(i),
            "--time",
            commit_time(i),
            "--pr",
            str(10 + i),
        ]
        add(args + ["--db", str(db), "--log", str(root / "log")])
    if hostile:
        add(
            [
                "history",
                "add",
                str(dirs[-1] / "hostile"),
                "--commit",
                "f" * 40,
                "--time",
                commit_time(n),
                "--db",
                str(db),
            ]
        )
    return db


def add(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
