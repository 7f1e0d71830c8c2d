"""The Apple backend: Metal Performance Shaders (torch.backends.mps / torch.mps), device "mps".

Metal ships with macOS, so the OS version stands in for the runtime. torch exposes no GPU
family, so the architecture stays "" and the device name (e.g. "Apple M4 Pro") identifies it.
"""

from __future__ import annotations

import platform

from kcgate.devices.base import (
    TorchBackend,
    call_text,
    call_value,
    env_flags,
    make_fingerprint,
    numerics_flags,
)
from kcgate.results.model import Fingerprint
from kcgate.vocab.device_kinds import vendor

MPS_ENV = (
    # 1 silently runs unsupported ops on the CPU: the result would be the CPU's, labelled MPS.
    "PYTORCH_ENABLE_MPS_FALLBACK",
)


class MpsBackend(TorchBackend):
    name = "mps"
    device_string = "mps"

    def _probe(self) -> bool:
        return bool(call_value(self.torch, "backends.mps.is_available"))

    def fingerprint(self) -> Fingerprint:
        torch = self.torch
        flags = {**numerics_flags(torch), **env_flags(MPS_ENV)}
        flags["mps_core_count"] = call_text(torch, "backends.mps.get_core_count")
        return make_fingerprint(
            self.name,
            torch,
            flags,
            vendor=vendor(self.name),
            device=call_text(torch, "backends.mps.get_name"),
            arch="",
            driver="",
            runtime=macos_version(),
        )


def macos_version() -> str:
    return platform.mac_ver()[0]
