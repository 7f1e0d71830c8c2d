"""Process-wide state a kernel can change and every later computation would inherit: torch's
settings (default dtype and device, matmul precision, threads, deterministic and grad modes, mode
stacks) and the functions of torch's namespaces, ``torch.Tensor`` and kcgate's own modules.

The worker captures it once at start (``capture``); after every kernel call the harness calls
``restore``, which puts back anything changed and names it, so the fp64 oracle and the checks always
run on the operators captured at start, and the case is recorded as ``global-state``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional

_ABSENT = object()


@dataclass(frozen=True)
class Setting:
    """One global torch setting: how to read it and how to put a value back."""

    name: str
    get: Callable[[], Any]
    put: Callable[[Any], None]


def _attribute(owner: Any, attr: str, name: str) -> Setting:
    return Setting(name, lambda: getattr(owner, attr), lambda v: setattr(owner, attr, v))


def _default_device() -> str:
    """``torch.get_default_device()`` as text, without its cost (16 µs, three times a case) in the usual
    state: no torch-function mode (a ``DeviceContext`` is one) and no global device context is cpu."""
    local = getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None)  # set_default_device's (absent: never called)
    if local is not None and getattr(local, "device_context", None) is None and not _function_modes():
        return "cpu"
    return str(torch.get_default_device())


def _function_modes() -> int:
    return int(torch._C._len_torch_function_stack())


def _settings() -> list[Setting]:
    b = torch.backends
    found = [
        Setting("default dtype", torch.get_default_dtype, torch.set_default_dtype),
        Setting("default device", _default_device, torch.set_default_device),
        Setting(
            "float32 matmul precision", torch.get_float32_matmul_precision, torch.set_float32_matmul_precision
        ),
        Setting("thread count", torch.get_num_threads, torch.set_num_threads),
        Setting(
            "deterministic algorithms",
            lambda: (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
            lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1]),
        ),
        Setting("grad mode", torch.is_grad_enabled, torch._C._set_grad_enabled),
        Setting("anomaly mode", torch.is_anomaly_enabled, torch.set_anomaly_enabled),
        _attribute(b.cuda.matmul, "allow_tf32", "torch.backends.cuda.matmul.allow_tf32"),
        _attribute(
            b.cuda.matmul,
            "allow_fp16_reduced_precision_reduction",
            "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        ),
        _attribute(
            b.cuda.matmul,
            "allow_bf16_reduced_precision_reduction",
            "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
        ),
        _attribute(b.cudnn, "allow_tf32", "torch.backends.cudnn.allow_tf32"),
        _attribute(b.cudnn, "deterministic", "torch.backends.cudnn.deterministic"),
        _attribute(b.cudnn, "benchmark", "torch.backends.cudnn.benchmark"),
        _attribute(b.mkldnn, "enabled", "torch.backends.mkldnn.enabled"),
    ]
    usable = []
    for s in found:  # a build without a backend may lack a flag: keep what this build can read
        try:
            s.get()
        except Exception:  # noqa: BLE001
            continue
        usable.append(s)
    return usable


def _torch_namespaces() -> list[tuple[str, Any]]:
    """Where torch operators are looked up: the function namespaces and Tensor's methods."""
    return [
        ("torch", torch),
        ("torch.nn.functional", torch.nn.functional),
        ("torch.linalg", torch.linalg),
        ("torch.special", torch.special),
        ("torch.fft", torch.fft),
        ("torch.Tensor", torch.Tensor),
    ]


def _kcgate_namespaces() -> list[tuple[str, Any]]:
    """kcgate's own modules (oracles, checks, metrics), checked once per case rather than per call."""
    return sorted(
        (name, module)
        for name, module in list(sys.modules.items())
        if (name == "kcgate" or name.startswith("kcgate.")) and isinstance(module, ModuleType)
    )


def _mode_stacks() -> list[tuple[str, Callable[[], int], Callable[[], Any]]]:
    c = torch._C
    stacks = [
        ("torch function mode stack", "_len_torch_function_stack", "_pop_torch_function_stack"),
        ("torch dispatch mode stack", "_len_torch_dispatch_stack", "_pop_torch_dispatch_stack"),
    ]
    return [(name, getattr(c, size), getattr(c, pop)) for name, size, pop in stacks if hasattr(c, size)]


class Snapshot:
    """The state at capture time, and what restoring it found changed."""

    def __init__(self) -> None:
        self.settings = [(s, s.get()) for s in _settings()]
        self.spaces = [Namespace(label, space) for label, space in _torch_namespaces()]
        self.own = [Namespace(label, space) for label, space in _kcgate_namespaces()]
        self.stacks = [(name, size, pop, size()) for name, size, pop in _mode_stacks()]

    def restore(self, own: bool = False) -> list[str]:
        """Put everything back (with ``own``, kcgate's modules too); the names of what had changed."""
        changed = []
        for name, size, pop, depth in self.stacks:  # first: a mode left on the stack sees every torch call
            if size() > depth:
                changed.append(name)
                while size() > depth:
                    pop()
        for setting, value in self.settings:
            if setting.get() != value:
                setting.put(value)
                changed.append(setting.name)
        for space in self.spaces + (self.own if own else []):
            changed += space.restore()
        return changed


class Namespace:
    """A module or class whose operators are compared by identity with those captured at start."""

    def __init__(self, label: str, space: Any) -> None:
        self.label, self.space = label, space
        self.values = list(vars(space).values())  # every binding, for the fast check
        self.operators = _operators(space)  # the callables, for the exact one

    def restore(self) -> list[str]:
        # the usual case, nothing rebound, in one C-level list comparison (3x faster than ``is`` per item): it
        # tests identity first and calls ``__eq__`` only on a rebound name, so a replacement is missed only if
        # it claims equality with the original, which is deliberate (README: hostile kernels are out of scope)
        if _same(list(vars(self.space).values()), self.values):
            return []
        changed = _restore_operators(self.label, self.space, self.operators)
        self.values = list(vars(self.space).values())  # a lazy import or a cache may rebind globals
        return changed


def _same(now: list[Any], saved: list[Any]) -> bool:
    try:
        return bool(now == saved)
    except Exception:  # noqa: BLE001 — an ``__eq__`` that raises (a tensor bound in a float's place): look closer
        return False


def _operators(space: Any) -> dict[str, Any]:
    """What code looks operators up in: every attribute of a class (methods, properties), the callables
    of a module (functions, builtins, classes); other module globals (caches) may change legitimately."""
    if isinstance(space, type):
        return dict(vars(space))
    return {k: v for k, v in vars(space).items() if callable(v)}


def _restore_operators(label: str, space: Any, saved: dict[str, Any]) -> list[str]:
    changed = []
    now = _operators(space)
    for name, value in saved.items():
        current = now.get(name, _ABSENT)
        if current is value:
            continue
        if _torch_rewrap(current, value):
            saved[name] = current  # torch's own lazy wrapping: the new binding is the one to keep
            continue
        _put(space, name, value)
        changed.append(f"{label}.{name}")
    if isinstance(space, type):  # a new attribute on a class shadows its bases' (Tensor.__matmul__)
        for name in now.keys() - saved.keys():
            delattr(space, name)
            changed.append(f"{label}.{name}")
    return changed


def _torch_rewrap(new: Any, old: Any) -> bool:
    """torch re-wraps some functions when a module of its own loads lazily (importing torch._dynamo,
    e.g. for torch.compile, wraps torch.manual_seed): a wrapper whose code is torch's and which wraps
    the captured function is not a kernel's patch."""
    inner = new
    for _ in range(4):
        inner = getattr(inner, "__wrapped__", None)
        if inner is old:
            code = getattr(new, "__code__", None)
            return code is not None and code.co_filename.startswith(_TORCH_DIR)
    return False


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _put(space: Any, name: str, value: Any) -> None:
    try:
        setattr(space, name, value)
    except (AttributeError, TypeError):  # an immutable type: nothing could have changed it either
        pass


_active: Snapshot | None = None


def capture() -> Snapshot:
    """Capture the state every case must start from (the worker calls this once, before any case)."""
    global _active
    _active = Snapshot()
    return _active


def restore(own: bool = False) -> list[str]:
    """Restore the captured state; what had changed (nothing is captured: nothing is checked)."""
    return _active.restore(own) if _active is not None else []


_changed_in_case: list[str] = []


def after_kernel() -> list[str]:
    """Called after every kernel call, before the oracle runs: restore, and remember what had changed."""
    changed = restore()
    _changed_in_case.extend(changed)
    return changed


def case_changes() -> list[str]:
    """Everything a case changed (its kernel calls, then kcgate's own modules at its end), once each;
    the record starts afresh for the next case."""
    changed = list(dict.fromkeys(_changed_in_case + restore(own=True)))
    _changed_in_case.clear()
    return changed
