"""Progress in CI logs: under CI=true, `kcgate run` writes a line every tenth of the cases or every 30 s
(KCGATE_PROGRESS_S), a slow case included, instead of a line per case or nothing until the table."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from kcgate.render.console import MIN_PROGRESS_S, PROGRESS_S, CiProgress, in_ci, progress_interval
from tests.conftest import DATA, ROOT


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Result:
    def __init__(self, ok: bool = True) -> None:
        self.ok = ok


def _progress(total: int, interval: float = PROGRESS_S) -> tuple[CiProgress, list[str], Clock]:
    lines: list[str] = []
    clock = Clock()
    return CiProgress(total, lines.append, interval, clock), lines, clock


def _done(p: CiProgress, i: int, n: int, ok: bool = True) -> None:
    p.case_done(i, n, Result(ok))  # type: ignore[arg-type]


def test_the_default_is_a_line_every_tenth_or_every_30_seconds() -> None:
    assert PROGRESS_S == 30.0 and progress_interval({}) == 30.0
    assert progress_interval({"KCGATE_PROGRESS_S": "2.5"}) == 2.5
    # #44: a tiny interval flooded the log (1e-300: 29,637 lines for 21 cases); raised to the minimum
    assert progress_interval({"KCGATE_PROGRESS_S": "1e-300"}) == MIN_PROGRESS_S == 1.0
    assert progress_interval({"KCGATE_PROGRESS_S": "0.5"}) == MIN_PROGRESS_S
    assert (
        progress_interval({"KCGATE_PROGRESS_S": "inf"})
        == progress_interval({"KCGATE_PROGRESS_S": "nan"})
        == 30
    )
    assert (
        progress_interval({"KCGATE_PROGRESS_S": "soon"})
        == progress_interval({"KCGATE_PROGRESS_S": "0"})
        == 30.0
    )
    p, lines, clock = _progress(1000)
    for i in range(1, 1001):
        clock.now += 0.01  # fast cases: ten lines, one per tenth
        _done(p, i, 1000, ok=i != 7)
    assert lines == [
        f"[{pct:3d}%] {pct * 10}/1000 cases, 1 not ok, 0m{pct // 10:02d}s" for pct in range(10, 101, 10)
    ]


def test_a_silent_stretch_gets_a_line_after_30_seconds_not_before() -> None:
    p, lines, clock = _progress(1000)
    _done(p, 1, 1000)
    clock.now += 29.9
    p.tick()
    assert lines == []  # 29.9 s: not yet
    clock.now += 0.1
    p.tick()
    assert lines == ["[  0%] 1/1000 cases, 0m30s"]
    clock.now += 10
    _done(p, 100, 1000)  # a tenth: its line, and the 30 s count starts again from it
    clock.now += 29
    p.tick()
    assert lines[1:] == ["[ 10%] 100/1000 cases, 0m40s"]


def test_ci_is_ci_true_not_ci_false() -> None:
    assert in_ci({"CI": "true"}) and in_ci({"CI": "1"})
    assert not in_ci({}) and not in_ci({"CI": "false"}) and not in_ci({"CI": "0"}) and not in_ci({"CI": ""})


def test_a_run_under_ci_prints_progress_at_least_every_interval(tmp_path: Path) -> None:
    """A real `kcgate run` (3 cases of 2.5 s, each longer than the interval) with CI=true and a pipe for
    stderr, as in a CI log: every gap between lines, the first from the start, stays within the interval."""
    interval = 1.0
    env = {**os.environ, "CI": "true", "KCGATE_PROGRESS_S": str(interval), "KCGATE_TEST_SLEEP_S": "2.5"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    cmd = [
        sys.executable,
        "-m",
        "kcgate",
        "run",
        "--contracts",
        "sleepy.toml",
        "--results",
        str(tmp_path / "r.json"),
    ]
    proc = subprocess.Popen(cmd, cwd=DATA, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stamped: list[tuple[float, str]] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        stamped.append((time.monotonic(), line.rstrip("\n")))
    out = proc.stdout.read() if proc.stdout else ""
    assert proc.wait(timeout=300) == 0, out + "\n".join(s for _, s in stamped)
    progress = [(t, s) for t, s in stamped if re.match(r"\[ *\d+%\] \d+/3 cases", s)]
    assert progress[0][1].startswith("[  0%] 0/3 cases") and progress[-1][1].startswith("[100%] 3/3 cases")
    gaps = [b - a for (a, _), (b, _) in zip(progress, progress[1:])]
    slack = 0.75  # the beat thread wakes every interval/4; a loaded 2-core machine delays it a little more
    assert max(gaps) <= interval + slack, gaps
    assert len(progress) >= 7  # 7.5 s of cases at 1 s: timed lines between the cases' own
    assert not any(re.match(r"\[\d+/\d+\]", s) for _, s in stamped)  # no per-case lines under CI
    assert "all contracts hold" in out


def test_the_terminal_bar_rewrites_one_line_and_keeps_failures() -> None:
    from kcgate.render.console import TerminalBar

    out: list[str] = []
    clock = Clock()

    class Case:
        def __init__(self, ok: bool, status: str, case_id: str) -> None:
            self.ok, self.status, self.case_id, self.duration_s = ok, status, case_id, 0.5

    with TerminalBar(out.append, clock) as bar:
        bar.case_done(1, 4, Case(True, "pass", "a"))  # type: ignore[arg-type]
        clock.now += 3
        bar.case_done(2, 4, Case(False, "fail", "b/float16"))  # type: ignore[arg-type]
    screen = "".join(out)
    assert out[0] == "\r\x1b[K[" + "#" * 7 + "." * 23 + "]  25% 1/4 cases, 0s"
    assert "\r\x1b[KFAIL    b/float16 (0.50 s)\n" in screen  # a line of its own, above the bar
    assert out[-2].endswith("]  50% 2/4 cases, 1 not ok, 3s") and out[-1] == "\n"
    assert screen.count("\n") == 2  # the failure and the end: the bar itself never scrolls


def test_outside_ci_and_a_terminal_each_case_line_says_where_its_time_went(tmp_path: Path) -> None:
    """A line per case (a pipe, CI unset) gives the case's duration split into the kernel's own time (a
    0.3 s sleep inside the kernel here), the fp64 oracle's and kcgate's own, which add up to it."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(KCGATE_TEST_SLEEP_S="0.3", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    cmd = [
        sys.executable,
        "-m",
        "kcgate",
        "run",
        "-c",
        "sleepy.toml",
        "-k",
        "sleepy-0",
        "--results",
        str(tmp_path / "r.json"),
    ]
    proc = subprocess.run(cmd, cwd=DATA, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pattern = r"\[1/1\] pass +sleepy-0/\S+ \(([\d.]+) s: kernel ([\d.]+) ms, oracle ([\d.]+) ms, harness ([\d.]+) ms\)"
    found = re.search(pattern, proc.stderr)
    assert found, proc.stderr
    duration, kernel, oracle, harness = (float(x) for x in found.groups())
    assert kernel >= 300.0 and oracle >= 0.0  # this tiny case's fp64 oracle may take under 0.05 ms: "0.0"
    assert abs(duration - (kernel + oracle + harness) / 1e3) <= 0.01  # each rounded to its last digit
