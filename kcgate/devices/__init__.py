"""Device backends: one module per vendor stack, one interface (``Backend``), a registry dict.

Importing this package does not import torch; a backend imports torch when it is used. Note that
probing CUDA/ROCm initialises the driver in this process: start workers with "spawn", not "fork".
"""

from __future__ import annotations

from collections.abc import Iterable

from kcgate.devices.base import Backend, TorchBackend
from kcgate.devices.cpu import CpuBackend
from kcgate.devices.cuda import CudaBackend
from kcgate.devices.mps import MpsBackend
from kcgate.devices.npu import NpuBackend
from kcgate.devices.rocm import RocmBackend
from kcgate.devices.xpu import XpuBackend
from kcgate.errors import UsageError
from kcgate.vocab.device_kinds import BY_PREFERENCE, DEVICE_KINDS

_BY_NAME: dict[str, type[TorchBackend]] = {
    cls.name: cls for cls in (CpuBackend, CudaBackend, MpsBackend, NpuBackend, RocmBackend, XpuBackend)
}
# One backend per kind of kcgate.vocab.device_kinds (a KeyError here names a kind without one), in
# preference order for default_backend(): accelerators first, cpu last.
BACKENDS: dict[str, type[TorchBackend]] = {name: _BY_NAME[name] for name in BY_PREFERENCE}
VENDORS: dict[str, str] = {name: DEVICE_KINDS[name].vendor for name in BACKENDS}


def check_name(name: str) -> None:
    """Refuse an unknown device name (cheap: no torch, no detection)."""
    if name not in BACKENDS:
        raise UsageError(f"unknown device {name!r}; choose one of: {', '.join(BACKENDS)}")


def get_backend(name: str) -> Backend:
    check_name(name)
    backend = BACKENDS[name]()
    if not backend.available():
        raise UsageError(
            f"device {name!r} is not available on this machine; "
            f"run `kcgate runners` to see which of {', '.join(BACKENDS)} are"
        )
    return backend


def detect(backends: Iterable[Backend] | None = None) -> list[str]:
    """Names of the backends available here, in preference order (``backends`` is for tests)."""
    candidates = backends if backends is not None else (cls() for cls in BACKENDS.values())
    return [b.name for b in candidates if b.available()]


def default_backend(detected: Iterable[str] | None = None) -> str:
    """The best available backend's name: any accelerator before cpu."""
    found = set(detect() if detected is None else detected)
    return next((name for name in BACKENDS if name in found), "cpu")
