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
