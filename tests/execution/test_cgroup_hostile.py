"""``--workers auto`` reads cgroup files bounded and non-blocking, with a strict ASCII-digit parse (#44)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kcgate.errors import UsageError
from kcgate.execution import pool as pooling
from kcgate.execution.pool import worker_count


def _root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memory_max: str, cpu_max: str = "max 100000"
) -> Path:
    root = tmp_path / "cg"
    root.mkdir()
    (root / "memory.max").write_text(memory_max)
    (root / "cpu.max").write_text(cpu_max)
    monkeypatch.setenv("KCGATE_CGROUP_ROOT", str(root))
    return root


@pytest.mark.parametrize("value", ["²", "١٢٣", "1e9", "-5", " 12 34", "9" * 5000, "0x10", ""])
def test_a_memory_max_that_is_not_plain_digits_is_no_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    _root(tmp_path, monkeypatch, value)
    assert pooling.cgroup_memory() == 0
    assert worker_count("auto", "process", "cpu") >= 1


@pytest.mark.parametrize("value", ["² 100000", "100000 ²", "100000 0", "9" * 5000 + " 100000", "1 2 3"])
def test_a_cpu_max_that_is_not_plain_digits_is_no_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    _root(tmp_path, monkeypatch, "max", value)
    assert pooling.cgroup_cpus() == 0


def _in_time(fn, seconds: float = 10.0):  # type: ignore[no-untyped-def]
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"{fn} blocked for {seconds} s"
    return out[0]


def test_a_fifo_at_memory_max_is_not_waited_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _root(tmp_path, monkeypatch, "max")
    (root / "memory.max").unlink()
    os.mkfifo(root / "memory.max")
    assert _in_time(pooling.cgroup_memory) == 0


def test_a_huge_or_directory_cgroup_file_is_no_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _root(tmp_path, monkeypatch, "1" * (1 << 20))
    assert pooling.cgroup_memory() == 0
    (root / "cpu.max").unlink()
    (root / "cpu.max").mkdir()
    assert pooling.cgroup_cpus() == 0


@pytest.mark.parametrize("text", ["²", "٣", "9" * 5000, "+3", " 3"])
def test_workers_must_be_plain_ascii_digits(text: str) -> None:
    with pytest.raises(UsageError, match="--workers"):
        worker_count(text, "process", "cpu")
