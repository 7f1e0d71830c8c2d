"""The interface every device backend implements, plus the defensive readers backends share.

Fingerprint fields come from APIs that differ across torch versions and vendor builds, so every
read degrades to "" instead of raising: a missing field is recorded, never a crash.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from kcgate.errors import UsageError
from kcgate.results.model import Fingerprint

# A plain `pip install torch` on Linux fetches the CUDA build (torch plus a dozen nvidia-* packages, several
# GB): a machine without a GPU names the CPU index, as the README's set-up and ci.yml do.
TORCH_FIX = (
    "install torch into this environment: with no GPU, the CPU build: "
    "`pip install torch --index-url https://download.pytorch.org/whl/cpu`; with a GPU, your vendor's build "
    "(the CUDA, ROCm or XPU index at https://pytorch.org/get-started/locally/, or torch_npu); "
    "see runners/README.md"
)


class Backend(Protocol):
    """A vendor stack: detection, the torch device string, sync, cleanup and a fingerprint."""

    name: str

    def available(self) -> bool: ...

    def device(self) -> str: ...

    def synchronize(self) -> None: ...

    def empty_cache(self) -> None: ...

    def fingerprint(self) -> Fingerprint: ...

    def configure(self) -> None: ...

    def stopwatch(self) -> Stopwatch: ...

    def fast_fp64(self) -> bool: ...


class Stopwatch(Protocol):
    """Times one stretch of device work: ``start()``, the work, then ``stop()`` gives its seconds."""

    def start(self) -> None: ...

    def stop(self) -> float: ...


class HostStopwatch:
    """Wall time around a stretch of work, after the device has finished it (``synchronize``): the timer of a
    device without events, and of the CPU, where every op is synchronous."""

    def __init__(self, synchronize: Any = None) -> None:
        self._sync = synchronize
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        if self._sync is not None:
            self._sync()
        return time.perf_counter() - self._t0


class EventStopwatch:
    """Device time between two events recorded on the current stream (``torch.cuda.Event`` on CUDA and on
    ROCm, where it is a HIP event): what the device spent, without the host's launch and Python costs.
    ``stop`` waits for the end event, so it also synchronizes."""

    def __init__(self, runtime: Any) -> None:
        self._start = runtime.Event(enable_timing=True)
        self._end = runtime.Event(enable_timing=True)

    def start(self) -> None:
        self._start.record()

    def stop(self) -> float:
        self._end.record()
        self._end.synchronize()
        return float(self._start.elapsed_time(self._end)) / 1e3  # elapsed_time is in milliseconds


# What the out-of-memory errors of torch's allocators say: torch.OutOfMemoryError (CUDA, ROCm, XPU, MPS)
# subclasses RuntimeError; older builds and other backends raise a plain RuntimeError with this text.
_OOM_TEXT = (
    "out of memory",
    "not enough memory",
    "failed to allocate",
    "cannot allocate memory",
    "can't allocate memory",
)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says an allocation failed: a MemoryError (the host allocator, or RLIMIT_AS),
    torch.OutOfMemoryError, or a RuntimeError whose message says so."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(t in text for t in _OOM_TEXT)


def import_torch() -> Any:
    """Import torch, or fail with exit code 3 and the fix (torch is an optional extra)."""
    try:
        import torch
    except ImportError as exc:
        raise UsageError(
            f"torch is needed to run kernels and detect devices, but {sys.executable} cannot import it "
            f"({exc}); fix: {TORCH_FIX}"
        ) from None
    return torch


class TorchBackend:
    """Shared plumbing: an injectable torch module, imported on first use so the registry is free."""

    name = ""

    def __init__(self, torch_mod: Any = None) -> None:
        self._torch = torch_mod

    @property
    def torch(self) -> Any:
        if self._torch is None:
            self._torch = import_torch()
        return self._torch

    def available(self) -> bool:
        try:
            return bool(self._probe())
        except Exception:  # a broken driver or a missing torch means "not here", never a crash
            return False

    def _probe(self) -> bool:
        raise NotImplementedError

    device_string = ""  # the torch device type kernels run on (ROCm torch reuses "cuda")

    def device(self) -> str:
        return self.device_string

    def runtime_module(self) -> Any:
        """The torch submodule with synchronize() and empty_cache(): torch.cuda, torch.xpu, torch.mps."""
        return getattr(self.torch, self.device_string)

    def synchronize(self) -> None:
        self.runtime_module().synchronize()

    def empty_cache(self) -> None:
        self.runtime_module().empty_cache()

    def fingerprint(self) -> Fingerprint:
        raise NotImplementedError

    # An RLIMIT_AS cap on the worker (``--memory-limit``) is safe: allocations beyond it fail as a
    # MemoryError in one case. Not on CUDA and ROCm, whose runtimes reserve virtual address space far beyond
    # the memory they use (unified addressing maps the device's memory and more): under a cap of half the
    # RAM, CUDA's first kernel launch or cuBLAS handle fails with "out of memory" (docs/runners.md).
    caps_address_space = True

    def configure(self) -> None:
        """Set the process-wide numerics settings kcgate runs kernels under, before the fingerprint is read
        and torch's state captured (the worker calls it once): none on most backends."""

    def stopwatch(self) -> Stopwatch:
        """A timer of device work: events where the runtime has them, else wall time after a synchronize."""
        return HostStopwatch(self.synchronize)

    def fast_fp64(self) -> bool:
        """Whether this device runs fp64 at a useful rate (the oracle could run there): data-centre parts
        only. False by default: the oracle runs on the host."""
        return False


def read_attr(root: Any, path: str) -> Any:
    """Follow a dotted attribute path; None where any step is missing or its getter raises."""
    obj = root
    try:
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                return None
    except Exception:  # torch flag properties call into C++ and may raise on a build without the library
        return None
    return obj


def attr_text(root: Any, path: str) -> str:
    value = read_attr(root, path)
    return "" if value is None else str(value)


def call_text(root: Any, path: str, *args: Any) -> str:
    """Call a documented API and return its answer as text; "" where it is missing or raises."""
    value = call_value(root, path, *args)
    return "" if value is None else str(value)


def call_value(root: Any, path: str, *args: Any) -> Any:
    fn = read_attr(root, path)
    if not callable(fn):
        return None
    try:
        return fn(*args)
    except Exception:  # e.g. a device that enumerates but fails to answer property queries
        return None


def env_flags(names: Iterable[str]) -> dict[str, str]:
    """Environment variables that change which kernels run; "" when unset, so the shape is stable."""
    return {name: os.environ.get(name, "") for name in names}


def numerics_flags(torch: Any) -> dict[str, str]:
    """Global torch flags that change numerics on every backend."""
    return {
        "matmul_precision": call_text(torch, "get_float32_matmul_precision"),
        "deterministic": call_text(torch, "are_deterministic_algorithms_enabled"),
    }


def make_fingerprint(backend: str, torch: Any, flags: Mapping[str, str], **fields: str) -> Fingerprint:
    """Build a Fingerprint with sorted flags, so equal stacks give equal keys."""
    return Fingerprint(
        backend=backend,
        torch=attr_text(torch, "__version__"),
        flags=tuple(sorted((k, str(v)) for k, v in flags.items())),
        **fields,
    )
