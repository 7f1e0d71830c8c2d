"""The AMD backend: torch.cuda on a ROCm build (torch.version.hip set), device string "cuda".

The architecture comes from gcnArchName ("gfx942:sramecc+:xnack-"); the base name is the arch,
the full string is kept as a flag because feature suffixes separate otherwise equal GPUs.
"""

from __future__ import annotations

from typing import Any

from kcgate.devices.base import (
    EventStopwatch,
    Stopwatch,
    TorchBackend,
    attr_text,
    call_text,
    call_value,
    env_flags,
    make_fingerprint,
    numerics_flags,
)
from kcgate.devices.cuda import blas_flags, configure_blas, cuda_api_available, is_rocm_build, read_version
from kcgate.devices.driver import amd_driver
from kcgate.results.model import Fingerprint
from kcgate.vocab.device_kinds import vendor

ROCM_ENV = (
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",  # honoured by HIP too
    "HSA_OVERRIDE_GFX_VERSION",  # runs kernels built for another gfx target
    "CUBLAS_WORKSPACE_CONFIG",
    "HIPBLASLT_ALLOW_TF32",  # MI300 xf32 in hipBLASLt
    "TORCH_BLAS_PREFER_HIPBLASLT",
    "ROCBLAS_INTERNAL_FP16_ALT_IMPL",  # MI200: fp16 GEMM via bf16 to avoid subnormal flush
    "MIOPEN_DEBUG_CONVOLUTION_ATTRIB_FP16_ALT_IMPL",  # the same switch for MIOpen convolutions
    "MIOPEN_FIND_MODE",  # which convolution solver is picked
)


# Instinct parts with full-rate fp64 (MI100, MI200, MI300, MI350); Radeon parts run it at 1/16 to 1/32.
FAST_FP64_GFX = frozenset({"gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"})


class RocmBackend(TorchBackend):
    name = "rocm"
    device_string = "cuda"  # ROCm torch reuses the CUDA device type
    caps_address_space = False  # HIP reserves virtual address space as CUDA does

    def _probe(self) -> bool:
        return is_rocm_build(self.torch) and cuda_api_available(self.torch)

    def configure(self) -> None:
        configure_blas(self.torch)  # hipBLAS(Lt) reads the same torch flags; the env is CUDA's name

    def stopwatch(self) -> Stopwatch:
        return EventStopwatch(self.torch.cuda)  # HIP events behind torch.cuda.Event

    def fast_fp64(self) -> bool:
        return gcn_arch_name(self.torch).split(":", 1)[0] in FAST_FP64_GFX

    def fingerprint(self) -> Fingerprint:
        torch = self.torch
        gcn = gcn_arch_name(torch)
        flags = {**numerics_flags(torch), **blas_flags(torch), **env_flags(ROCM_ENV)}
        flags["gcn_arch_name"] = gcn
        flags["miopen_version"] = call_text(torch, "backends.cudnn.version")  # MIOpen on ROCm builds
        return make_fingerprint(
            self.name,
            torch,
            flags,
            vendor=vendor(self.name),
            device=call_text(torch, "cuda.get_device_name", 0),
            arch=gcn.split(":", 1)[0],
            driver=amd_driver(),  # rocm-smi: torch documents no API for the amdgpu driver version
            runtime=read_version(torch, "hip"),
        )


def gcn_arch_name(torch: Any) -> str:
    props = call_value(torch, "cuda.get_device_properties", 0)
    return attr_text(props, "gcnArchName") if props is not None else ""
