"""I/O faults (ENOSPC, EACCES, EISDIR, ENOTDIR, EROFS): exit 3 naming the path and the OS error, found
before any case runs; a finished run's or report's verdict is never replaced by a reporting failure."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DATA, kcgate
from tests.testing.report_samples import write_results_pair

RUN = ("run", "--contracts", "small.toml", "--seed", "1", "--timeout", "60")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (as root); skipped where no filesystem can be mounted."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode()[:200]}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt: Path) -> None:
    with open(mnt / "ballast", "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass


def _assert_exit_3_before_any_case(
    proc: subprocess.CompletedProcess[str], path: Path, errno_name: str
) -> None:
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert str(path) in proc.stderr and errno_name in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert "[1/" not in proc.stderr  # no case ran


@pytest.mark.slow
def test_out_under_a_file_is_enotdir(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "r.json"
    _assert_exit_3_before_any_case(kcgate(*RUN, "--results", str(out), cwd=DATA), out, "ENOTDIR")


@pytest.mark.slow
def test_out_naming_a_directory_is_eisdir(tmp_path: Path) -> None:
    _assert_exit_3_before_any_case(kcgate(*RUN, "--results", str(tmp_path), cwd=DATA), tmp_path, "EISDIR")


@pytest.mark.slow
def test_junit_naming_a_directory_is_found_before_any_case(tmp_path: Path) -> None:
    proc = kcgate(*RUN, "--results", str(tmp_path / "r.json"), "--junit", str(tmp_path), cwd=DATA)
    _assert_exit_3_before_any_case(proc, tmp_path, "EISDIR")


@pytest.mark.slow
def test_unwritable_results_directory_is_eacces_or_erofs(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if os.geteuid() == 0:  # root ignores permission bits: make the filesystem read-only instead
        mnt = request.getfixturevalue("small_fs")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        out, name = mnt / "results" / "r.json", "EROFS"
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        out, name = locked / "r.json", "EACCES"
    _assert_exit_3_before_any_case(kcgate(*RUN, "--results", str(out), cwd=DATA), out, name)


@pytest.mark.slow
def test_a_full_disk_is_enospc_before_any_case(small_fs: Path) -> None:
    _fill(small_fs)
    out = small_fs / "r.json"
    _assert_exit_3_before_any_case(kcgate(*RUN, "--results", str(out), cwd=DATA), out, "ENOSPC")
    proc = kcgate(
        *RUN, "--results", str(small_fs.parent / "r.json"), "--junit", str(small_fs / "j.xml"), cwd=DATA
    )
    _assert_exit_3_before_any_case(proc, small_fs / "j.xml", "ENOSPC")


@pytest.mark.slow
def test_a_disk_filling_mid_run_leaves_the_runs_verdict(small_fs: Path, tmp_path: Path) -> None:
    junit = small_fs / "junit.xml"
    args = (
        "run",
        "--contracts",
        "fill.toml",
        "--seed",
        "1",
        "--results",
        str(tmp_path / "r.json"),
        "--junit",
        str(junit),
    )
    proc = kcgate(*args, cwd=DATA, env={"KCGATE_TEST_FILL": str(small_fs)})
    assert proc.returncode == 0, (
        proc.stdout + proc.stderr
    )  # the case passed: a JUnit failure does not change that
    assert "warning: JUnit not written" in proc.stderr and "ENOSPC" in proc.stderr
    assert "Traceback" not in proc.stderr and not junit.exists()


def test_report_outputs_on_a_full_disk_leave_the_verdict(small_fs: Path, tmp_path: Path) -> None:
    base, current = write_results_pair(tmp_path, regress=False)
    _fill(small_fs)
    outputs = ["--junit", str(small_fs / "j.xml"), "--comment-out", str(small_fs / "c.md")]
    proc = kcgate(
        "report", str(current), "--baseline", str(base), "--no-publish", "--no-annotations", *outputs
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.count("ENOSPC") == 2 and "the verdict stands" in proc.stderr
