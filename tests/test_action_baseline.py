"""The action's Baseline step, run the way the runner runs it (test_action.run_action) against real git
repositories: a bare ``origin`` stands for github.com, with main, a kcgate-history data branch holding
main's recorded runs, and a fork's PR head reachable only as ``refs/pull/5/head`` (as GitHub serves it).

Report mode reads the PR's merge base from the default branch's checkout and the PR head's objects
(never checked out), takes the nearest recorded ancestor's run from history-dir and names its commit in
the comment; run mode reads the data branch itself, read-only, and hands kcgate run the baseline and the
merge base. Nothing recorded is a first run, never a failed step."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from test_action import ran, run_action, runner_env, step_of

from kcgate.history.runs import record_runs
from kcgate.results.model import load_run, write_run
from tests.testing.git_history import git, make_repo
from tests.testing.history_samples import run_at

pytest.importorskip("yaml")


def _origin(tmp: Path, record_at: tuple[int, ...] = (1,)) -> tuple[Path, list[str], list[str]]:
    """origin.git: main (5 commits), a fork's PR (2 commits from main[2]) only under refs/pull/5/head,
    and kcgate-history with main's runs of cpu-x86 recorded at ``record_at``."""
    src = tmp / "src"
    main, pr = make_repo(src, 5, 2, fork_at=2)
    history = tmp / "history-src"
    history.mkdir()
    git(history, "init", "-q", "-b", "kcgate-history")
    for i in record_at:
        record_runs(history, main[i], {"cpu-x86": run_at(i, "cpu-x86")})
    (history / "README").write_text("kcgate history\n")
    git(history, "add", "-A")
    git(history, "commit", "-q", "-m", "history")
    origin = tmp / "origin.git"
    git(tmp, "init", "-q", "--bare", str(origin))
    git(origin, "config", "uploadpack.allowAnySHA1InWant", "true")  # github.com serves any reachable SHA
    git(src, "push", "-q", str(origin), "main", f"{pr[-1]}:refs/pull/5/head")
    git(history, "push", "-q", str(origin), "kcgate-history")
    return origin, main, pr


def _checkout(origin: Path, ws: Path, ref: str = "main") -> None:
    git(origin.parent, "clone", "-q", str(origin), str(ws))
    git(ws, "checkout", "-q", ref)


def _env(ws: Path, origin: Path, event: dict[str, object], name: str) -> dict[str, str]:
    (ws / "event.json").write_text(json.dumps(event))
    return runner_env(
        ws,
        GITHUB_EVENT_PATH=str(ws / "event.json"),
        GITHUB_EVENT_NAME=name,
        GITHUB_SERVER_URL=f"file://{origin.parent}",
        GITHUB_REPOSITORY=origin.stem,  # the data branch's remote: file://<tmp>/origin.git
    )


def _report(tmp: Path, record_at: tuple[int, ...]) -> tuple[str, list[str], Path, object]:
    origin, main, pr = _origin(tmp, record_at)
    ws = tmp / "ws"
    _checkout(origin, ws)  # the report job's checkout: the default branch, full history
    git(ws, "clone", "-q", "--branch", "kcgate-history", str(origin), str(ws / "kcgate-history"))
    write_run(ws / "kcgate-artifacts" / "kcgate-results-cpu-x86" / "cpu-x86.json", run_at(4, "cpu-x86"))
    event = {"workflow_run": {"event": "pull_request", "head_sha": pr[-1], "pull_requests": []}}  # a fork
    with_ = {"mode": "report", "results-dir": "kcgate-artifacts", "history-dir": "kcgate-history",
             "github-token": "", "cache": "false"}  # fmt: skip
    _out, procs = run_action(with_, _env(ws, origin, event, "workflow_run"), ws)
    assert [code for _name, code in ran(procs)] == [0] * len(procs), procs[-1].stdout + procs[-1].stderr
    comment = (ws / "runner-temp" / "kcgate-report" / "comment.md").read_text()
    return comment, main, ws, procs


@pytest.mark.slow
def test_report_mode_judges_a_fork_pr_against_the_merge_base_s_nearest_recorded_run(tmp_path: Path) -> None:
    comment, main, ws, procs = _report(tmp_path, (1,))
    baseline = step_of(procs, "Baseline").stdout  # type: ignore[arg-type]
    assert f"merge base {main[2]}" in baseline
    assert f"Baselines from `{main[1][:12]}`" in comment
    assert (
        f"Baseline for cpu-x86: the default branch's run of {main[1][:12]}, 1 commit before the merge base {main[2][:12]}"
        in comment
    )
    # the fork's commits came in as objects only: the checkout is still the default branch, untouched
    assert git(ws, "rev-parse", "HEAD") == main[-1] and (ws / "file.txt").read_text() == "main 4"
    assert git(ws, "status", "--porcelain", "--untracked-files=no") == ""


@pytest.mark.slow
def test_report_mode_says_first_run_when_nothing_is_recorded(tmp_path: Path) -> None:
    comment, _main, _ws, _procs = _report(tmp_path, ())
    assert "Baseline: no recorded ancestor: first run" in comment


def _wrapping_kcgate(tmp: Path, base_ref: bool) -> Path:
    """The action's kcgate: the real one for `baseline`; `run` records its arguments (and `run --help`
    lists --base-ref when ``base_ref``: a kcgate with the rerun on base's code)."""
    log = tmp / "argv.json"
    path = tmp / "runner-temp" / "kcgate-venv" / "bin" / "kcgate"
    path.write_text(
        f"#!{sys.executable}\nimport json, os, sys\nargs = sys.argv[1:]\n"
        f"if args[:1] != ['run']:\n    os.execv({sys.executable!r}, [{sys.executable!r}, '-m', 'kcgate', *args])\n"
        f"if '--help' in args:\n    print({'--base-ref REF' if base_ref else '--seed'!r})\n"
        f"else:\n    open({str(log)!r}, 'w').write(json.dumps(args))\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return log


def _run_leg(
    tmp: Path, base_ref: bool, record_at: tuple[int, ...] = (1,)
) -> tuple[list[str], list[str], Path]:
    origin, main, pr = _origin(tmp, record_at)
    ws = tmp / "ws"
    _checkout(origin, ws)
    git(ws, "fetch", "-q", "origin", "refs/pull/5/head")
    git(ws, "checkout", "-q", "FETCH_HEAD")  # the PR's code, as the run leg checks it out
    event = {"pull_request": {"base": {"sha": main[-1]}, "head": {"sha": pr[-1]}}}
    env = _env(ws, origin, event, "pull_request")
    log = _wrapping_kcgate(ws, base_ref)
    _out, procs = run_action({"mode": "run", "runner": "cpu-x86", "cache": "false"}, env, ws)
    assert [code for _name, code in ran(procs)] == [0] * len(procs), procs[-1].stdout + procs[-1].stderr
    return json.loads(log.read_text()), main, ws


def _option(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == flag]


@pytest.mark.slow
def test_the_run_leg_reads_the_data_branch_and_passes_the_baseline_and_the_merge_base(tmp_path: Path) -> None:
    argv, main, ws = _run_leg(tmp_path, base_ref=True)
    [baseline] = _option(argv, "--baseline")
    assert _option(argv, "--base-ref") == [main[2]]
    assert load_run(Path(baseline)).cases == run_at(1, "cpu-x86").cases
    assert not (ws / "baselines").exists()  # written under RUNNER_TEMP, not into the PR's tree


@pytest.mark.slow
def test_a_kcgate_without_the_rerun_gets_neither_flag(tmp_path: Path) -> None:
    argv, _main, _ws = _run_leg(tmp_path, base_ref=False)
    assert argv[0] == "run" and "--baseline" not in argv and "--base-ref" not in argv


@pytest.mark.slow
def test_a_first_run_leg_passes_the_merge_base_but_no_baseline(tmp_path: Path) -> None:
    argv, main, _ws = _run_leg(tmp_path, base_ref=True, record_at=())
    assert _option(argv, "--base-ref") == [main[2]] and "--baseline" not in argv
