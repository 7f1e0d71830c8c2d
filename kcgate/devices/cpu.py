"""The CPU backend: always available; the fingerprint records ISA level, threads and oneDNN mode (its ISA
cap and fp32 math mode variables too).

ATEN_CPU_CAPABILITY genuinely changes which vectorized kernels run (exp, tanh, erf, cumsum and
float sums differ bitwise between "default" and "avx2"), so it is part of the fingerprint.
"""

from __future__ import annotations

import platform
from typing import Any

from kcgate.devices.base import (
    TorchBackend,
    attr_text,
    call_text,
    env_flags,
    make_fingerprint,
    numerics_flags,
)
from kcgate.results.model import Fingerprint

CPU_ENV = (
    "ATEN_CPU_CAPABILITY",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "KCGATE_THREADS",  # the worker's thread count (worker.thread_count), before OMP_NUM_THREADS
    "ONEDNN_MAX_CPU_ISA",  # oneDNN's own ISA cap: AVX2 changes fp32 gelu's bits on an AVX-512 host
    "DNNL_MAX_CPU_ISA",  # its older name, still read
    "ONEDNN_DEFAULT_FPMATH_MODE",  # BF16/TF32 lets oneDNN round fp32 operands down
    "DNNL_DEFAULT_FPMATH_MODE",
)


class CpuBackend(TorchBackend):
    name = "cpu"
    device_string = "cpu"

    def available(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass  # CPU ops are synchronous

    def empty_cache(self) -> None:
        pass  # the CPU allocator returns memory to the OS itself

    def fast_fp64(self) -> bool:
        return True  # half the fp32 rate, as on data-centre GPUs: the oracle runs where the kernel ran

    def fingerprint(self) -> Fingerprint:
        torch = self.torch
        return make_fingerprint(
            self.name,
            torch,
            cpu_flags(torch),
            vendor=_cpuinfo("vendor_id") or platform.machine(),
            device=_cpuinfo("model name") or platform.processor() or platform.machine(),
            arch=platform.machine(),
        )


def cpu_flags(torch: Any) -> dict[str, str]:
    flags = numerics_flags(torch)
    flags["cpu_capability"] = call_text(torch, "backends.cpu.get_cpu_capability")
    # Thread count changes how reductions are split, hence their rounding.
    flags["threads"] = call_text(torch, "get_num_threads")
    flags["mkldnn_enabled"] = attr_text(torch, "backends.mkldnn.enabled")
    # oneDNN may run fp32 matmul/conv in bf16 or tf32 when this is not "ieee"/"none" (torch >= 2.9).
    flags["mkldnn_fp32_precision"] = attr_text(torch, "backends.mkldnn.fp32_precision")
    flags["mkldnn_matmul_fp32_precision"] = attr_text(torch, "backends.mkldnn.matmul.fp32_precision")
    flags["mkl"] = call_text(torch, "backends.mkl.is_available")
    flags.update(env_flags(CPU_ENV))
    return flags


def _cpuinfo(field: str) -> str:
    """A field of /proc/cpuinfo (Linux only); "" elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""
