"""Device backends: one module per vendor stack, one interface (``Backend``), a registry dict.

Importing this package does not import torch; a backend imports torch when it is used.
"""

from __future__ import annotations

from kcgate.devices.base import Backend
from kcgate.devices.cpu import CpuBackend

BACKENDS: dict[str, type[Backend]] = {"cpu": CpuBackend}


def get_backend(name: str) -> Backend:
    from kcgate.errors import UsageError

    if name not in BACKENDS:
        raise UsageError(f"unknown device {name!r}; choose one of: {', '.join(BACKENDS)}")
    backend = BACKENDS[name]()
    if not backend.available():
        raise UsageError(f"device {name!r} is not available on this machine; run `kcgate runners` to see what is")
    return backend
