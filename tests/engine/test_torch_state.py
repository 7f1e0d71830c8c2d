"""kcgate.engine.torch_state in this process: what a kernel changes is named and put back, and nothing else is."""

from __future__ import annotations

import builtins
import functools
import json
from collections.abc import Iterator

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kcgate.engine import torch_state  # noqa: E402
from kcgate.numerics import metrics  # noqa: E402  (metrics: a kcgate module loaded before capture)
from kcgate.results.records import CaseResult  # noqa: E402


@pytest.fixture
def captured() -> Iterator[None]:
    torch_state.capture()
    yield
    torch_state.restore(own=True)
    torch_state._active = None  # as a fresh process: later in-process tests are not checked against it


@pytest.fixture
def snapshot() -> Iterator[torch_state.Snapshot]:
    yield torch_state.capture()
    torch_state.restore(own=True)
    torch_state._active = None


def _checked_in_full_next(spaces: list[torch_state.Namespace]) -> list[str]:
    """The namespaces whose next check would not be skipped (their dict changed since the last one)."""
    return [s.label for s in spaces if s.tag is None or s.tag.value != s.seen]


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
    assert torch_state.case_changes() == ["kcgate.numerics.metrics.to_metrics"] and metrics.to_metrics is real


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


def test_the_version_tag_fast_path_is_on_for_every_namespace_here(snapshot: torch_state.Snapshot) -> None:
    """CPython 3.11 to 3.13 on 64 bits: the self-test passes, so the tests above ran with the fast path on."""
    assert torch_state.tags_track_mutations()
    assert all(s.tag is not None for s in snapshot.spaces + snapshot.own)
    assert _checked_in_full_next(snapshot.spaces + snapshot.own) == [
        "kcgate.engine.torch_state"
    ]  # capture() set its _active after
    assert torch_state.restore(own=True) == [] and _checked_in_full_next(snapshot.spaces + snapshot.own) == []
    modules = [s for s in snapshot.own if not isinstance(s.space, type)]
    classes = [s for s in snapshot.own if isinstance(s.space, type)]
    assert modules and all(s.dict is vars(s.space) for s in modules)  # a module's own dict
    assert classes and all(s.dict is not None and s.dict.keys() == vars(s.space).keys() for s in classes)
    tensor = next(s for s in snapshot.spaces if s.label == "torch.Tensor")  # a class's is behind a proxy
    assert tensor.dict is not None and tensor.dict.keys() == vars(torch.Tensor).keys()


def _kernel_that_rebinds() -> None:
    torch.matmul = lambda a, b: a
    torch.Tensor.__add__ = lambda a, b: a  # set on the class: shadows TensorBase's (and its nb_add slot)
    torch.Tensor.__rsub__ = lambda a, b: a  # replaces Tensor's own
    torch.Tensor.kcgate_extra = 1  # a new attribute, not callable
    torch.nn.functional.gelu = lambda *a, **k: None
    del torch.special.expit


def test_rebound_deleted_and_added_bindings_are_restored_then_skipped(snapshot: torch_state.Snapshot) -> None:
    real = torch.matmul, vars(torch.Tensor)["__rsub__"], torch.nn.functional.gelu, torch.special.expit
    _kernel_that_rebinds()
    assert set(torch_state.restore()) == {
        "torch.matmul",
        "torch.Tensor.__add__",
        "torch.Tensor.__rsub__",
        "torch.Tensor.kcgate_extra",
        "torch.nn.functional.gelu",
        "torch.special.expit",
    }
    now = torch.matmul, vars(torch.Tensor)["__rsub__"], torch.nn.functional.gelu, torch.special.expit
    assert all(a is b for a, b in zip(now, real))
    assert "__add__" not in vars(torch.Tensor) and not hasattr(torch.Tensor, "kcgate_extra")
    x = torch.ones(2)
    assert torch.equal(x + x, 2 * x) and torch.equal(3 - x, 2 * x)
    assert _checked_in_full_next(snapshot.spaces) == []  # the tags were saved after putting back
    for space in snapshot.spaces:  # a saved list no binding matches: a full check would replace it
        space.values = []
    assert torch_state.restore() == [] and all(s.values == [] for s in snapshot.spaces)


def test_the_same_object_put_back_is_nothing(captured: None) -> None:
    torch.matmul = torch.matmul
    torch.Tensor.__rsub__ = vars(torch.Tensor)["__rsub__"]
    torch.nn.functional.gelu = torch.nn.functional.gelu
    assert torch_state.restore(own=True) == []


def test_a_changing_module_global_is_not_named_and_is_saved_again(snapshot: torch_state.Snapshot) -> None:
    """A module's cache global changes legitimately: the full check runs, names nothing, and keeps it."""
    space = next(s for s in snapshot.own if s.label == "kcgate.numerics.metrics")
    metrics.kcgate_cache = {"filled": 1}  # type: ignore[attr-defined]
    try:
        assert _checked_in_full_next([space]) == ["kcgate.numerics.metrics"]
        assert torch_state.restore(own=True) == [] and metrics.kcgate_cache == {"filled": 1}  # type: ignore[attr-defined]
        assert _checked_in_full_next([space]) == [] and space.values == list(vars(metrics).values())
    finally:
        del metrics.kcgate_cache  # type: ignore[attr-defined]
    assert torch_state.restore(own=True) == []


def test_the_self_test_refuses_an_offset_that_misses_a_mutation() -> None:
    """At 8 bytes a dict holds its type, which never changes; at 16 its item count, which a value replaced
    under the same key leaves as it is: either would skip checks after a rebinding."""
    assert torch_state.tags_track_mutations()
    assert not torch_state.tags_track_mutations(8)
    assert not torch_state.tags_track_mutations(16)


@pytest.mark.parametrize(
    "patch",
    [
        lambda: setattr(np, "abs", lambda a: a),
        lambda: setattr(json, "dumps", lambda *a, **k: "{}"),
        lambda: setattr(builtins, "max", lambda *a, **k: 0),
        lambda: setattr(CaseResult, "to_json", lambda self: {}),
    ],
    ids=["numpy.abs", "json.dumps", "builtins.max", "CaseResult.to_json"],
)
def test_the_libraries_the_checks_and_the_channel_call_are_restored(captured: None, patch) -> None:  # type: ignore[no-untyped-def]
    """#44: a kernel rebinding numpy.abs (the comparison), json.dumps (the signed result) or a kcgate class's
    method was recorded as a pass."""
    before = (np.abs, json.dumps, builtins.max, CaseResult.to_json)
    patch()
    assert torch_state.restore(own=True)
    assert (np.abs, json.dumps, builtins.max, CaseResult.to_json) == before


def test_a_kcgate_module_swapped_in_sys_modules_is_put_back(captured: None) -> None:
    import sys
    import types

    real = sys.modules["kcgate.engine.torch_state"]
    sys.modules["kcgate.engine.torch_state"] = types.ModuleType("fake")
    assert "sys.modules['kcgate.engine.torch_state']" in torch_state.restore(own=True)
    assert sys.modules["kcgate.engine.torch_state"] is real


def test_an_aten_kernel_registered_through_torch_library_is_dropped(captured: None) -> None:
    """#44: a kernel's own CPU aten::_softmax (1.5x) was the fp64 oracle's softmax too, and the case passed."""
    x = torch.randn(2, 3)
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_softmax", lambda t, dim, half: t * 0, "CPU")
    assert "aten kernels registered through torch.library" in torch_state.restore()
    assert torch.allclose(torch.softmax(x, -1).sum(-1), torch.ones(2))


def test_a_packages_own_custom_op_is_not_a_change(captured: None) -> None:
    lib = torch.library.Library("kcgate_test_ns", "DEF")
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda t: t, "CPU")
    assert torch_state.restore() == []
