"""kcgate.torch_state in this process: what a kernel changes is named and put back, and nothing else is."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")

from kcgate import metrics, torch_state  # noqa: E402  (metrics: a kcgate module loaded before capture)


@pytest.fixture
def captured() -> Iterator[None]:
    torch_state.capture()
    yield
    torch_state.restore(own=True)


def test_nothing_changed_is_nothing_reported(captured: None) -> None:
    x = torch.ones(4, 4)
    _ = x @ x, torch.matmul(x, x), torch.softmax(x, -1)
    assert torch_state.restore(own=True) == []


def test_patched_operators_are_named_and_restored(captured: None) -> None:
    real_matmul = torch.matmul
    torch.matmul = lambda a, b: a
    torch.Tensor.__matmul__ = lambda a, b: a  # shadows TensorBase's method: a new attribute of Tensor
    torch.nn.functional.softmax = lambda *a, **k: None
    changed = torch_state.restore()
    assert set(changed) == {"torch.matmul", "torch.Tensor.__matmul__", "torch.nn.functional.softmax"}
    assert torch.matmul is real_matmul and "__matmul__" not in vars(torch.Tensor)
    x = torch.eye(2)
    assert torch.equal(x @ (2 * x), 2 * x)


@pytest.mark.slow
def test_settings_are_named_and_restored(captured: None) -> None:
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(threads + 1)
    torch.use_deterministic_algorithms(True)
    changed = torch_state.restore()
    assert {"default dtype", "thread count", "deterministic algorithms"} <= set(changed)
    assert torch.get_default_dtype() == dtype and torch.get_num_threads() == threads
    assert not torch.are_deterministic_algorithms_enabled()


def test_a_torch_function_mode_left_on_the_stack_is_popped(captured: None) -> None:
    from torch.overrides import TorchFunctionMode

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    Spy().__enter__()  # never exited: every later torch call (the oracle's too) would go through it
    assert torch_state.restore() == ["torch function mode stack"]
    assert torch._C._len_torch_function_stack() == 0


def test_torchs_own_lazy_rewrap_is_kept(captured: None) -> None:
    seed = torch.manual_seed
    wrapped = torch._disable_dynamo(seed)  # what importing torch._dynamo does to torch.manual_seed
    torch.manual_seed = wrapped
    assert torch_state.restore() == [] and torch.manual_seed is wrapped
    torch.manual_seed = functools.wraps(wrapped)(lambda s: None)  # a kernel's wrapper is not torch's
    assert torch_state.restore() == ["torch.manual_seed"] and torch.manual_seed is wrapped
    torch.manual_seed = seed


def test_kcgate_modules_are_checked_once_per_case(captured: None) -> None:
    real = metrics.to_metrics
    metrics.to_metrics = lambda *a, **k: None
    assert torch_state.restore() == []  # per kernel call: torch only
    assert torch_state.case_changes() == ["kcgate.metrics.to_metrics"] and metrics.to_metrics is real


def test_a_binding_whose_eq_raises_does_not_hide_a_patch(captured: None) -> None:
    """The fast check compares bindings as a list; a tensor bound in a float's place makes that comparison
    raise, and the exact one still names a patched operator beside it."""
    e, real = torch.e, torch.matmul
    torch.e = torch.ones(3)  # tensor == float is a tensor: bool() of it raises
    torch.matmul = lambda a, b: a
    try:
        assert torch_state.restore() == ["torch.matmul"] and torch.matmul is real
    finally:
        torch.e = e


def test_a_default_device_set_and_left_is_named(captured: None) -> None:
    torch.set_default_device("meta")
    changed = torch_state.restore()
    assert "default device" in changed or "torch function mode stack" in changed
    assert str(torch.get_default_device()) == "cpu" and torch.ones(1).device.type == "cpu"
