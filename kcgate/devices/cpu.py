"""The CPU backend: always available; the fingerprint records ISA level and threads."""

from __future__ import annotations

import os
import platform
from typing import Any

from kcgate.devices.base import numerics_flags
from kcgate.results import Fingerprint


class CpuBackend:
    name = "cpu"

    def __init__(self, torch_mod: Any = None) -> None:
        self._torch = torch_mod

    @property
    def torch(self) -> Any:
        if self._torch is None:
            import torch

            self._torch = torch
        return self._torch

    def available(self) -> bool:
        return True

    def device(self) -> str:
        return "cpu"

    def synchronize(self) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def fingerprint(self) -> Fingerprint:
        torch = self.torch
        flags = numerics_flags(torch)
        flags["cpu_capability"] = str(torch.backends.cpu.get_cpu_capability())
        flags["ATEN_CPU_CAPABILITY"] = os.environ.get("ATEN_CPU_CAPABILITY", "")
        return Fingerprint(
            backend="cpu",
            vendor=platform.machine(),
            device=_cpu_name(),
            arch=str(torch.backends.cpu.get_cpu_capability()),
            torch=str(torch.__version__),
            flags=tuple(sorted(flags.items())),
        )


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
