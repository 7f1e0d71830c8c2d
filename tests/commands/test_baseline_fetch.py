"""``kcgate baseline record`` and ``fetch`` end to end on a real git repository: the merge base's run (or
its nearest recorded ancestor) lands where ``kcgate report`` reads baselines, a committed file wins, a
first run says so, and the report's comment names the commit its baseline is the run of."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kcgate.cli import app
from kcgate.history.source import SOURCE_FILE, read_source
from kcgate.results.model import load_run, write_run
from tests.testing.git_history import make_repo, record
from tests.testing.history_samples import run_at


def kcgate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str], list[str]]:
    """main: 5 commits, runs recorded at 0, 1 and 3 (cpu-x86 and amd-mi300x); pr forked from main[4]."""
    main, pr = make_repo(tmp_path / "repo", 5, 2)
    for i in (0, 1, 3):
        record(tmp_path / "history", main[i], i)
    monkeypatch.chdir(tmp_path / "repo")
    return tmp_path, main, pr


def test_fetch_finds_the_nearest_recorded_ancestor_of_the_merge_base(repo) -> None:  # type: ignore[no-untyped-def]
    tmp, main, pr = repo
    code, out = kcgate("baseline", "fetch", "--history", str(tmp / "history"), "--commit", "main",
                       "--head", pr[-1], "--dir", str(tmp / "out"))  # fmt: skip
    assert code == 0, out
    assert (
        f"Baseline for cpu-x86: the default branch's run of {main[3][:12]}, 1 commit before the merge base {main[4][:12]}"
        in out
    )
    assert load_run(tmp / "out" / "cpu-x86.json").cases == run_at(3, "cpu-x86").cases
    source = read_source(tmp / "out")
    assert source is not None and source.merge_base == main[4]
    assert {(o.runner, o.how, o.commit, o.back) for o in source.origins} == {
        ("cpu-x86", "recorded", main[3], 1),
        ("amd-mi300x", "recorded", main[3], 1),
    }


def test_a_first_run_says_so_and_writes_no_baseline(repo) -> None:  # type: ignore[no-untyped-def]
    tmp, _main, _pr = repo
    code, out = kcgate("baseline", "fetch", "--history", str(tmp / "nothing-yet"), "--dir", str(tmp / "out"),
                       "--format", "json")  # fmt: skip
    assert code == 0, out
    doc = json.loads(out)
    assert doc["runners"] == [] and "no recorded ancestor: first run" in doc["lines"][0]
    assert sorted(p.name for p in (tmp / "out").iterdir()) == [SOURCE_FILE]


def test_a_committed_baseline_wins_and_a_refetch_replaces_only_its_own_files(repo) -> None:  # type: ignore[no-untyped-def]
    tmp, main, _pr = repo
    committed = tmp / "repo" / "baselines" / "cpu-x86.json"
    write_run(committed, run_at(0, "cpu-x86"), stable=True)
    before = committed.read_text()
    for _ in range(2):  # the second fetch finds its own amd file there: replaced, not taken as committed
        code, out = kcgate("baseline", "fetch", "--history", str(tmp / "history"))
        assert code == 0, out
    assert committed.read_text() == before
    assert (
        "Baseline for cpu-x86: the repository's committed baselines file (it overrides the recorded runs)"
        in out
    )
    assert f"Baseline for amd-mi300x: the default branch's run of {main[3][:12]}" in out
    elsewhere = tmp / "elsewhere"
    code, out = kcgate("baseline", "fetch", "--history", str(tmp / "history"), "--dir", str(elsewhere))
    assert code == 0 and load_run(elsewhere / "cpu-x86.json").cases == run_at(0, "cpu-x86").cases


def test_a_hostile_file_on_the_branch_exits_3_naming_it(repo) -> None:  # type: ignore[no-untyped-def]
    tmp, main, _pr = repo
    (tmp / "history" / "runs" / main[3] / "cpu-x86.json").write_text("not json")
    code, out = kcgate("baseline", "fetch", "--history", str(tmp / "history"), "--dir", str(tmp / "out"))
    assert code == 3 and f"runs/{main[3]}/cpu-x86.json: not valid JSON" in out


def test_record_merges_shards_and_keeps_what_is_there(repo) -> None:  # type: ignore[no-untyped-def]
    tmp, main, _pr = repo
    results = tmp / "results"
    write_run(results / "cpu-x86.json", run_at(4, "cpu-x86"))
    code, out = kcgate(
        "baseline", "record", str(results), "--commit", main[4], "--history", str(tmp / "history")
    )
    assert code == 0 and f"cpu-x86: recorded {tmp / 'history' / 'runs' / main[4] / 'cpu-x86.json'}" in out
    code, out = kcgate(
        "baseline", "record", str(results), "--commit", main[4], "--history", str(tmp / "history")
    )
    assert code == 0 and "already recorded, kept as it is" in out


def _report(tmp: Path, baseline: Path) -> str:
    results = tmp / "artifacts"
    write_run(results / "cpu-x86.json", run_at(4, "cpu-x86"))
    comment = tmp / "comment.md"
    code, out = kcgate("report", str(results), "--baseline", str(baseline), "--comment-out", str(comment),
                       "--format", "console")  # fmt: skip
    assert code == 0, out
    return comment.read_text()


def test_the_comment_names_the_commit_the_baseline_is_the_run_of(repo) -> None:  # type: ignore[no-untyped-def]
    tmp, main, _pr = repo
    kcgate("baseline", "fetch", "--history", str(tmp / "history"), "--commit", main[4], "--runner", "cpu-x86",
           "--dir", str(tmp / "out"))  # fmt: skip
    body = _report(tmp, tmp / "out")
    assert f"Baselines from `{main[3][:12]}`" in body
    assert (
        f"Baseline for cpu-x86: the default branch's run of {main[3][:12]}, 1 commit before the merge base"
        in body
    )


def test_the_comment_says_first_run_when_nothing_is_recorded(repo) -> None:  # type: ignore[no-untyped-def]
    tmp, _main, _pr = repo
    kcgate("baseline", "fetch", "--history", str(tmp / "nothing-yet"), "--dir", str(tmp / "out"))
    body = _report(tmp, tmp / "out")
    assert "Baseline: no recorded ancestor: first run" in body


@pytest.mark.slow
def test_record_and_fetch_never_import_torch(repo, no_torch_env: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import kcgate as kcgate_process

    tmp, main, _pr = repo
    write_run(tmp / "results" / "cpu-x86.json", run_at(4, "cpu-x86"))
    hist = str(tmp / "history")
    proc = kcgate_process("baseline", "record", str(tmp / "results"), "--commit", main[4], "--history", hist,
                          env=no_torch_env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    proc = kcgate_process("baseline", "fetch", "--history", hist, "--dir", str(tmp / "out"), cwd=tmp / "repo",
                          env=no_torch_env)  # fmt: skip
    assert proc.returncode == 0 and f"the default branch's run of {main[4][:12]}" in proc.stdout, proc.stderr
