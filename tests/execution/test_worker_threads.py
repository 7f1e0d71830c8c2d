"""The worker's intra-op thread count is chosen, not inherited: one unless KCGATE_THREADS says otherwise."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kcgate.execution.worker import _set_threads  # noqa: E402


@pytest.mark.parametrize(
    ("env", "expected"),
    [({}, 1), ({"KCGATE_THREADS": "2"}, 2), ({"OMP_NUM_THREADS": "2"}, 2), ({"KCGATE_THREADS": "x"}, 1)],
)
def test_thread_count(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: int) -> None:
    before = torch.get_num_threads()
    monkeypatch.delenv("KCGATE_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        assert _set_threads() == expected == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_numpys_blas_gets_the_workers_thread_count_unless_set() -> None:
    from kcgate.execution.executors import worker_env

    assert worker_env({})["OPENBLAS_NUM_THREADS"] == "1"
    assert worker_env({"KCGATE_THREADS": "3"})["OPENBLAS_NUM_THREADS"] == "3"
    assert worker_env({"OPENBLAS_NUM_THREADS": "8", "KCGATE_THREADS": "3"})["OPENBLAS_NUM_THREADS"] == "8"


def test_a_real_worker_runs_with_that_blas_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the worker process was started with (/proc/PID/environ): numpy's OpenBLAS reads it at load."""
    from pathlib import Path

    from kcgate.contracts.load import load_project
    from kcgate.execution.executors import IsolatedExecutor

    if not Path("/proc/self/environ").exists():
        pytest.skip("reads the worker's environment from /proc (Linux)")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("KCGATE_THREADS", "2")
    root = Path(__file__).resolve().parents[2]
    executor = IsolatedExecutor(load_project(root / "contracts.toml"), "cpu")
    try:
        executor.handshake()
        assert executor.worker is not None
        environ = Path(f"/proc/{executor.worker.proc.pid}/environ").read_bytes().split(b"\0")
    finally:
        executor.close()
    assert b"OPENBLAS_NUM_THREADS=2" in environ
