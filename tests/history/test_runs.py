"""Main's runs kept whole on the data branch: recorded append-only, found at the merge base or its nearest
recorded ancestor by the checked-out repository's own history, and every hostile file refused by name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kcgate.errors import ExitCode, ResultsError, UsageError
from kcgate.history.runs import find_baselines, merge_base, read_recorded, record_runs, run_path
from kcgate.results.model import MAX_RESULTS_BYTES, dumps_run, load_run
from tests.testing.git_history import make_repo, record
from tests.testing.history_samples import run_at


def test_a_run_is_recorded_whole_and_never_rewritten(tmp_path: Path) -> None:
    sha = "a" * 40
    done = record_runs(tmp_path / "h", sha, {"cpu-x86": run_at(1, "cpu-x86")})
    path = run_path(tmp_path / "h", sha, "cpu-x86")
    assert [(d.runner, d.outcome) for d in done] == [("cpu-x86", "written")]
    assert load_run(path).cases == run_at(1, "cpu-x86").cases and "seed" in path.read_text()
    again = record_runs(tmp_path / "h", sha, {"cpu-x86": run_at(5, "cpu-x86")})
    assert [d.outcome for d in again] == ["exists"]
    assert load_run(path).cases == run_at(1, "cpu-x86").cases  # append-only: the first record stays


def test_an_incomplete_run_is_not_recorded(tmp_path: Path) -> None:
    run = run_at(1, "cpu-x86")
    run = type(run)(run.runner, run.fingerprint, run.cases, complete=False)
    [done] = record_runs(tmp_path, "b" * 40, {"cpu-x86": run})
    assert done.outcome == "incomplete" and not done.path.exists()


def test_recording_refuses_a_link_planted_where_the_run_goes(tmp_path: Path) -> None:
    sha = "c" * 40
    target = tmp_path / "elsewhere.json"
    run_path(tmp_path, sha, "cpu-x86").parent.mkdir(parents=True)
    run_path(tmp_path, sha, "cpu-x86").symlink_to(target)
    with pytest.raises(ResultsError, match="is a symbolic link"):
        record_runs(tmp_path, sha, {"cpu-x86": run_at(1, "cpu-x86")})
    assert not target.exists()


def test_recording_refuses_a_short_or_odd_commit(tmp_path: Path) -> None:
    for bad in ("abc1234", "../" + "a" * 40, "A" * 40):
        with pytest.raises(UsageError, match="full lowercase commit SHA"):
            record_runs(tmp_path, bad, {"cpu-x86": run_at(1, "cpu-x86")})


def test_the_merge_base_s_own_run_is_the_baseline(tmp_path: Path) -> None:
    main, pr = make_repo(tmp_path / "repo", 5, 2, fork_at=3)
    history = tmp_path / "h"
    for i, sha in enumerate(main):
        record(history, sha, i)
    base = merge_base(tmp_path / "repo", "main", pr[-1])
    assert base == main[3]
    found = find_baselines(history, tmp_path / "repo", base, [])
    assert {(r, f.commit, f.back) for r, f in found.items()} == {
        ("cpu-x86", main[3], 0),
        ("amd-mi300x", main[3], 0),
    }
    assert found["amd-mi300x"].run.cases == run_at(3, "amd-mi300x").cases


def test_the_nearest_recorded_ancestor_per_runner(tmp_path: Path) -> None:
    main, _ = make_repo(tmp_path / "repo", 6)
    history = tmp_path / "h"
    record(history, main[1], 1, ("cpu-x86",))
    record(history, main[3], 3, ("amd-mi300x",))
    record(history, main[5], 5, ("amd-mi300x",))  # a descendant of the merge base: never its baseline
    found = find_baselines(history, tmp_path / "repo", main[4], [])
    assert (found["amd-mi300x"].commit, found["amd-mi300x"].back) == (main[3], 1)
    assert (found["cpu-x86"].commit, found["cpu-x86"].back) == (main[1], 3)
    only = find_baselines(history, tmp_path / "repo", main[4], ["cpu-x86"], max_back=2)
    assert only == {}  # outside the window: no recorded ancestor


def test_ancestry_comes_from_the_repository_not_the_branch(tmp_path: Path) -> None:
    """A run recorded under a commit that is not an ancestor (a PR's own commit) is never picked."""
    main, pr = make_repo(tmp_path / "repo", 3, 2)
    history = tmp_path / "h"
    record(history, main[0], 0)
    record(history, pr[0], 4)  # someone recorded a PR commit on the branch
    found = find_baselines(history, tmp_path / "repo", main[-1], ["cpu-x86"])
    assert found["cpu-x86"].commit == main[0]


def test_nothing_recorded_is_a_first_run_not_an_error(tmp_path: Path) -> None:
    main, _ = make_repo(tmp_path / "repo", 2)
    assert find_baselines(tmp_path / "no-branch-yet", tmp_path / "repo", main[-1], []) == {}


def test_a_commit_missing_from_the_checkout_says_how_to_fetch_it(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo", 2)
    with pytest.raises(UsageError, match="fetch-depth: 0"):
        find_baselines(tmp_path / "h", tmp_path / "repo", "d" * 40, [])


# ---- hostile files on the data branch ------------------------------------------------------------------


def _recorded(tmp_path: Path) -> tuple[Path, str]:
    sha = "e" * 40
    record_runs(tmp_path / "h", sha, {"cpu-x86": run_at(1, "cpu-x86")})
    return tmp_path / "h", sha


def test_a_symbolic_link_file_is_refused(tmp_path: Path) -> None:
    history, sha = _recorded(tmp_path)
    path = run_path(history, sha, "cpu-x86")
    path.unlink()
    path.symlink_to("/etc/passwd")
    with pytest.raises(ResultsError, match=r"cpu-x86\.json: is a symbolic link, not a regular results file"):
        read_recorded(history, sha, "cpu-x86")


def test_a_linked_commit_directory_is_refused(tmp_path: Path) -> None:
    history, sha = _recorded(tmp_path)
    other = "f" * 40
    os.symlink(history / "runs" / sha, history / "runs" / other)
    with pytest.raises(ResultsError, match=f"runs/{other}: is a symbolic link, not a directory"):
        read_recorded(history, other, "cpu-x86")


def test_a_huge_file_is_refused_without_reading_past_the_cap(tmp_path: Path) -> None:
    history, sha = _recorded(tmp_path)
    with open(run_path(history, sha, "cpu-x86"), "r+b") as f:
        f.truncate(MAX_RESULTS_BYTES + 1)  # sparse: nothing is written
    with pytest.raises(ResultsError, match="over the .*-byte cap") as info:
        read_recorded(history, sha, "cpu-x86")
    assert "restore it from the data branch's history" in info.value.message
    assert info.value.exit_code == ExitCode.BAD_USAGE


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ('{"kind": "kcgate-results"', "not valid JSON"),
        ("[1, 2]", "results"),
        (None, "holds runner 'amd-mi300x', not 'cpu-x86'"),
    ],
)
def test_a_malformed_or_misplaced_file_is_refused(tmp_path: Path, content: str | None, words: str) -> None:
    history, sha = _recorded(tmp_path)
    text = dumps_run(run_at(1, "amd-mi300x")) if content is None else content
    run_path(history, sha, "cpu-x86").write_text(text)
    with pytest.raises(ResultsError, match=words) as info:
        read_recorded(history, sha, "cpu-x86")
    assert str(run_path(history, sha, "cpu-x86")) in info.value.message


def test_a_file_whose_name_is_no_runner_is_refused(tmp_path: Path) -> None:
    main, _ = make_repo(tmp_path / "repo", 1)
    where = tmp_path / "h" / "runs" / main[0]
    where.mkdir(parents=True)
    (where / "-rf.json").write_text("{}")
    with pytest.raises(ResultsError, match="'-rf' is not a runner name"):
        find_baselines(tmp_path / "h", tmp_path / "repo", main[0], [])


def test_a_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    history, sha = _recorded(tmp_path)
    path = run_path(history, sha, "cpu-x86")
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(ResultsError, match="special file"):
        read_recorded(history, sha, "cpu-x86")
