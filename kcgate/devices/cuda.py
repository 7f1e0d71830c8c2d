"""The NVIDIA backend (torch.cuda on a CUDA build) and the cuBLAS/cuDNN flags it shares with ROCm.

A ROCm build of torch also answers torch.cuda.is_available() and uses the "cuda" device string;
torch.version.hip tells the two apart, so this backend reports unavailable on a ROCm build.
"""

from __future__ import annotations

import os
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
    read_attr,
)
from kcgate.devices.driver import nvidia_driver
from kcgate.results.model import Fingerprint
from kcgate.vocab.device_kinds import vendor

CUDA_ENV = (
    "CUBLAS_WORKSPACE_CONFIG",  # required for deterministic cuBLAS; also changes split-K choices
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_TF32_OVERRIDE",  # 0 forces TF32 off inside cuBLAS/cuDNN, below torch's own flags
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",  # 1 forces torch's matmul TF32 flag on
)

# torch.backends attributes that change matmul and convolution numerics on CUDA and ROCm.
# Newer names (fp32_precision, allow_fp16_accumulation) are absent on older torch and read as "".
BLAS_FLAGS = {
    "cuda_matmul_allow_tf32": "backends.cuda.matmul.allow_tf32",
    "cuda_matmul_fp32_precision": "backends.cuda.matmul.fp32_precision",
    "cuda_matmul_allow_fp16_reduced_precision_reduction": (
        "backends.cuda.matmul.allow_fp16_reduced_precision_reduction"
    ),
    "cuda_matmul_allow_bf16_reduced_precision_reduction": (
        "backends.cuda.matmul.allow_bf16_reduced_precision_reduction"
    ),
    "cuda_matmul_allow_fp16_accumulation": "backends.cuda.matmul.allow_fp16_accumulation",
    "cudnn_allow_tf32": "backends.cudnn.allow_tf32",
    "cudnn_fp32_precision": "backends.cudnn.fp32_precision",
    "cudnn_deterministic": "backends.cudnn.deterministic",
    "cudnn_benchmark": "backends.cudnn.benchmark",  # autotuned algorithm choice varies run to run
}


# The numerics kcgate runs kernels under on CUDA and ROCm, set by the worker before any case (and recorded in
# the fingerprint by BLAS_FLAGS): fp32 GEMMs and convolutions in IEEE fp32, not TF32 (torch's default since
# 1.12 for matmul, but cuDNN's allow_tf32 defaults to True), and fp16/bf16 GEMMs reduced in fp32, not in
# reduced precision (torch's default allows split-K reductions in fp16/bf16): a contract's ``accumulate``
# is then what torch's own GEMMs do, so a failure is the kernel's. torch's "Numerical accuracy" and "CUDA
# semantics" notes document these flags; a kernel that changes them is a global-state finding.
PRECISION = {
    "backends.cuda.matmul.allow_tf32": False,
    "backends.cudnn.allow_tf32": False,
    "backends.cuda.matmul.allow_fp16_reduced_precision_reduction": False,
    "backends.cuda.matmul.allow_bf16_reduced_precision_reduction": False,
}
# cuBLAS is bitwise reproducible run to run only with a fixed workspace per stream (cuBLAS "Results
# reproducibility"; torch's reproducibility notes ask for :4096:8 or :16:8, and raise under
# torch.use_deterministic_algorithms(True) without it). It must be set before the first cuBLAS handle:
# the worker sets it before its first case. kcgate never turns deterministic algorithms on itself: C-ORD-02
# measures the kernel as it ships (the fingerprint's ``deterministic`` flag records the mode).
CUBLAS_WORKSPACE = ":4096:8"


def configure_blas(torch: Any, env: Any = os.environ) -> None:
    """Set PRECISION and the cuBLAS workspace (a value the runner's environment gives is kept)."""
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    for path, value in PRECISION.items():
        owner, _, name = path.rpartition(".")
        target = read_attr(torch, owner)
        if target is not None and hasattr(target, name):  # a flag this torch lacks stays unset (and reads "")
            setattr(target, name, value)


def is_rocm_build(torch: Any) -> bool:
    return bool(read_version(torch, "hip"))


def read_version(torch: Any, field: str) -> str:
    """torch.version.cuda / .hip / .xpu: the toolkit torch was built against; None on other builds."""
    value = read_attr(torch, f"version.{field}")
    return str(value) if value else ""


def cuda_api_available(torch: Any) -> bool:
    return bool(call_value(torch, "cuda.is_available"))


def blas_flags(torch: Any) -> dict[str, str]:
    """cuBLAS/hipBLAS and cuDNN/MIOpen flags, plus the library torch prefers for GEMMs."""
    flags = {key: attr_text(torch, path) for key, path in BLAS_FLAGS.items()}
    flags["preferred_blas_library"] = call_text(torch, "backends.cuda.preferred_blas_library")
    flags["device_count"] = call_text(torch, "cuda.device_count")
    return flags


# Compute capabilities whose fp64 runs at half the fp32 rate or better (P100, V100, A100, H100/H200,
# B100/B200); every other part (GeForce, RTX, A10, L4, L40S: sm_86/sm_89) runs fp64 at 1/32 to 1/64.
FAST_FP64_SM = frozenset({"sm_60", "sm_70", "sm_80", "sm_90", "sm_100"})


class CudaBackend(TorchBackend):
    name = "cuda"
    device_string = "cuda"
    caps_address_space = False  # see TorchBackend.caps_address_space

    def _probe(self) -> bool:
        return not is_rocm_build(self.torch) and cuda_api_available(self.torch)

    def configure(self) -> None:
        configure_blas(self.torch)

    def stopwatch(self) -> Stopwatch:
        return EventStopwatch(self.torch.cuda)

    def fast_fp64(self) -> bool:
        return sm_arch(self.torch) in FAST_FP64_SM

    def fingerprint(self) -> Fingerprint:
        torch = self.torch
        flags = {**numerics_flags(torch), **blas_flags(torch), **env_flags(CUDA_ENV)}
        flags["cudnn_version"] = call_text(torch, "backends.cudnn.version")
        return make_fingerprint(
            self.name,
            torch,
            flags,
            vendor=vendor(self.name),
            device=call_text(torch, "cuda.get_device_name", 0),
            arch=sm_arch(torch),
            driver=nvidia_driver(),  # nvidia-smi: torch documents no API for the driver version
            runtime=read_version(torch, "cuda"),
        )


def sm_arch(torch: Any) -> str:
    """ "sm_90" from the compute capability (9, 0); "" when the query fails."""
    cap = call_value(torch, "cuda.get_device_capability", 0)
    try:
        major, minor = cap
    except (TypeError, ValueError):
        return ""
    return f"sm_{major}{minor}"
