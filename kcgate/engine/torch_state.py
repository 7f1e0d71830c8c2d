"""Process-wide state a kernel can change and every later computation would inherit: torch's
settings (default dtype and device, matmul precision, threads, deterministic and grad modes, mode
stacks), the functions of torch's namespaces, ``torch.Tensor``, the other libraries the checks and the
result channel call (numpy, builtins, math, json, hmac, hashlib), and kcgate's own modules and classes.

The worker captures it once at start (``capture``); after every kernel call the harness calls
``restore``, which puts back anything changed and names it, so the fp64 oracle and the checks always
run on the operators captured at start, and the case is recorded as ``global-state``.

The check after a kernel call usually finds nothing changed, and most of it is skipped soundly: CPython
(3.11 to 3.13) keeps in every dict a version tag (PEP 509 ``ma_version_tag``) that it changes on every
mutation of that dict (setitem, delitem, update, pop, clear, ``setattr``/``delattr`` on a module or class,
which store into its ``__dict__``), and never on a read. A namespace whose ``__dict__`` tag is the one
saved after its last full check was not rebound since, so its comparison is skipped; any other tag runs
the full check, exactly as without the tag, and saves the new tag. The tag is read in place with ctypes
at a fixed offset (after the object header and ``ma_used``), through a reader made once per namespace
that holds the dict (a module's or class's ``__dict__`` cannot be replaced, so it is the one looked in).
The tag is used only where that is proven: CPython 3.11 to 3.13, not free-threaded, 64-bit, and only if
a self-test (``tags_track_mutations``) at import sees the tag at that offset change on each kind of
mutation of a plain dict, a fresh module's ``__dict__`` and a fresh class's, and stay on a read; else
(PyPy, 3.14, a debug build with another header size, ...) every check is the full one.
"""

from __future__ import annotations

import builtins
import ctypes
import gc
import hashlib
import hmac
import json
import json.decoder
import json.encoder
import math
import os
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any

import numpy
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
        Setting("aten kernels registered through torch.library", _aten_overrides, _drop_aten_overrides),
    ]
    usable = []
    for s in found:  # a build without a backend may lack a flag: keep what this build can read
        try:
            s.get()
        except Exception:  # noqa: BLE001
            continue
        usable.append(s)
    return usable


_ATEN: list[Any] = [-1, frozenset()]  # len(torch.library._impls) when last read, and its aten entries


def _aten_overrides() -> frozenset[str]:
    """The ``aten`` operators a Python ``torch.library.Library`` has a kernel for ("aten/op/key"). One that
    a kernel registers (an ``aten::_softmax`` for CPU returning 1.5x) is every later caller's, the fp64
    oracle's included: the wrong answer became the reference (#44). Other namespaces (a package's own
    custom ops, registered when it is imported) are not kcgate's concern. Recomputed only when the registry
    grew or shrank."""
    impls = getattr(torch.library, "_impls", ())
    if len(impls) != _ATEN[0]:
        _ATEN[0], _ATEN[1] = len(impls), frozenset(k for k in impls if k.startswith("aten/"))
    return _ATEN[1]  # type: ignore[no-any-return]


def _drop_aten_overrides(kept: frozenset[str]) -> None:
    """Unregister every Library that holds an aten kernel not in ``kept`` (torch's ``_destroy``)."""
    for lib in [o for o in gc.get_objects() if isinstance(o, torch.library.Library)]:
        if any(f"aten/{k}" not in kept for k in _aten_keys(lib)):
            lib._destroy()
    _ATEN[0] = -1


def _aten_keys(lib: Any) -> list[str]:
    """A Library's ``op/key`` registrations in the aten namespace, as ``torch.library._impls`` names them."""
    if getattr(lib, "ns", "") != "aten":
        return []
    return [k.removeprefix("aten/") for k in getattr(lib, "_op_impls", ()) if str(k).startswith("aten/")]


def _torch_namespaces() -> list[tuple[str, Any]]:
    """Where torch operators are looked up: the function namespaces and Tensor's methods."""
    return [
        ("torch", torch),
        ("torch.nn.functional", torch.nn.functional),
        ("torch.linalg", torch.linalg),
        ("torch.special", torch.special),
        ("torch.fft", torch.fft),
        ("torch.Tensor", torch.Tensor),
        *_library_namespaces(),
    ]


def _library_namespaces() -> list[tuple[str, Any]]:
    """What the comparison (numpy, builtins, math) and the signed result channel (json, hmac, hashlib) call
    between a kernel's return and its case's result: a kernel that rebinds ``numpy.abs`` or ``json.dumps``
    would otherwise measure, or sign, its own case as it likes (#44)."""
    spaces: list[tuple[str, Any]] = [
        (m.__name__, m)
        for m in (numpy, numpy.linalg, builtins, math, json, json.encoder, json.decoder, hmac, hashlib)
    ]
    return spaces + [("json.JSONEncoder", json.JSONEncoder), ("json.JSONDecoder", json.JSONDecoder)]


def _kcgate_namespaces() -> list[tuple[str, Any]]:
    """kcgate's own modules (oracles, checks, metrics) and the classes they define (a result record's
    ``to_json``), checked once per case rather than per call."""
    modules = sorted(
        (name, module)
        for name, module in list(sys.modules.items())
        if (name == "kcgate" or name.startswith("kcgate.")) and isinstance(module, ModuleType)
    )
    classes = [
        (f"{name}.{value.__qualname__}", value)
        for name, module in modules
        for value in list(vars(module).values())
        if isinstance(value, type) and value.__module__ == name
    ]
    return modules + classes


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
        self.imported = {
            n: m for n, m in list(sys.modules.items()) if n == "kcgate" or n.startswith("kcgate.")
        }
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
        return changed + (_restore_imported(self.imported) if own else [])


class Namespace:
    """A module or class whose operators are compared by identity with those captured at start."""

    def __init__(self, label: str, space: Any) -> None:
        self.label, self.space = label, space
        self.dict = _tagged_dict(space)  # held: the tag reader reads at its address
        self.tag = _read_tag(self.dict) if self.dict is not None else None  # None: no fast path here
        self.seen = self.tag.value if self.tag is not None else None  # read first: the values are as new
        self.values = list(vars(space).values())  # every binding, for the fast check
        self.operators = _operators(space)  # the callables, for the exact one

    def restore(self) -> list[str]:
        tag = self.tag
        version = tag.value if tag is not None else None
        if version is not None and version == self.seen:  # the dict was not mutated since the last check
            return []
        # the usual case, nothing rebound, in one C-level list comparison (3x faster than ``is`` per item): it
        # tests identity first and calls ``__eq__`` only on a rebound name, so a replacement is missed only if
        # it claims equality with the original, which is deliberate (README: hostile kernels are out of scope)
        if _same(list(vars(self.space).values()), self.values):
            self.seen = version  # read before the comparison: a later mutation changes it again
            return []
        changed = _restore_operators(self.label, self.space, self.operators)
        self.seen = tag.value if tag is not None else None  # after putting back, before reading what is kept
        self.values = list(vars(self.space).values())  # a lazy import or a cache may rebind globals
        return changed


def _restore_imported(saved: dict[str, Any]) -> list[str]:
    """kcgate's modules in ``sys.modules``: a kernel that swaps one for a fake changes what a later import
    of it finds."""
    changed = []
    for name, module in saved.items():
        if sys.modules.get(name) is not module:
            sys.modules[name] = module
            changed.append(f"sys.modules[{name!r}]")
    return changed


def _same(now: list[Any], saved: list[Any]) -> bool:
    try:
        return bool(now == saved)
    except Exception:  # noqa: BLE001 — an ``__eq__`` that raises (a tensor bound in a float's place): look closer
        return False


def _operators(space: Any) -> dict[str, Any]:
    """What code looks operators up in: every attribute of a class (methods, properties), the callables
    and submodules of a module (functions, builtins, classes, ``kcgate.engine.torch_state``); other module
    globals (caches) may change legitimately."""
    if isinstance(space, type):
        return dict(vars(space))
    return {k: v for k, v in vars(space).items() if callable(v) or isinstance(v, ModuleType)}


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
        for name in now.keys() - saved.keys() - _CLASS_CACHES:
            delattr(space, name)
            changed.append(f"{label}.{name}")
    return changed


# attributes Python itself adds to a class on first use (copyreg's cache of a class's slot names)
_CLASS_CACHES = frozenset({"__slotnames__"})


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


# PyObject_HEAD, then Py_ssize_t ma_used, then the uint64 version tag (3.12+: in steps of 1 << 8, the low
# bits name dict watchers, whose changes only cost a full check)
_TAG_OFFSET = object.__basicsize__ + ctypes.sizeof(ctypes.c_ssize_t)


def _platform_has_tags() -> bool:
    return (
        sys.implementation.name == "cpython"
        and (3, 11) <= sys.version_info[:2] < (3, 14)
        and not sysconfig.get_config_var("Py_GIL_DISABLED")
        and ctypes.sizeof(ctypes.c_void_p) == 8
    )


def _dict_of(space: Any) -> dict[str, Any] | None:
    """The dict a module's or class's bindings live in (a class shows it through a read-only proxy)."""
    found = vars(space)
    if type(found) is MappingProxyType:
        inner = gc.get_referents(found)
        found = inner[0] if len(inner) == 1 else None
        if type(found) is dict and found.keys() != vars(space).keys():
            found = None
    return found if type(found) is dict else None


def _read_tag(d: dict[str, Any], offset: int = _TAG_OFFSET) -> ctypes.c_uint64:
    """A view of the 8 bytes at ``offset`` in ``d``, valid while ``d`` lives (the caller holds it)."""
    return ctypes.c_uint64.from_address(id(d) + offset)


def _probes() -> list[tuple[dict[str, Any] | None, Any]]:
    """Dicts to test the tag on, each with the module or class it belongs to: a plain dict, a fresh
    module's and a fresh class's (changed directly before any lookup on the class, then through it)."""
    module = ModuleType("_kcgate_tag_probe")
    cls = type("_KcgateTagProbe", (), {})
    return [({}, None), (vars(module), module), (_dict_of(cls), cls)]


def _mutations(d: dict[str, Any], owner: Any) -> list[Callable[[], Any]]:
    """Every kind of mutation of ``d``, in an order where each one changes it."""
    steps: list[Callable[[], Any]] = [
        lambda: d.__setitem__("a", object()),  # a new key
        lambda: d.__setitem__("a", object()),  # another object for a key
        lambda: d.__delitem__("a"),
        lambda: d.update(b=object()),
        lambda: d.pop("b"),
        lambda: d.clear(),
        lambda: d.__setitem__("r", 1),
    ]
    if owner is not None:  # setattr and delattr on a module or class store into its dict
        steps += [
            lambda: setattr(owner, "c", object()),
            lambda: setattr(owner, "c", object()),
            lambda: delattr(owner, "c"),
        ]
    return steps


def tags_track_mutations(offset: int = _TAG_OFFSET) -> bool:
    """Whether the 8 bytes at ``offset`` in a dict change on every mutation and not on a read, on this
    interpreter: the fast path of ``Namespace.restore`` is used only if so. Never raises."""
    try:
        return _platform_has_tags() and all(_tracks(d, owner, offset) for d, owner in _probes())
    except Exception:  # noqa: BLE001 — anything unexpected: no fast path
        return False


def _tracks(d: dict[str, Any] | None, owner: Any, offset: int) -> bool:
    if d is None:
        return False
    tag = _read_tag(d, offset)
    for step in _mutations(d, owner):
        before = tag.value
        step()
        if tag.value == before:
            return False
    before = tag.value
    _ = d["r"], d.get("x"), "r" in d, len(d), list(d.values()), dict(d), getattr(owner, "r", None)
    return tag.value == before


_TAGS = tags_track_mutations()


def _tagged_dict(space: Any) -> dict[str, Any] | None:
    """The dict whose version tag tells whether ``space`` was rebound, or None where the fast path is off."""
    if not _TAGS:
        return None
    try:
        return _dict_of(space)
    except Exception:  # noqa: BLE001
        return None


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
