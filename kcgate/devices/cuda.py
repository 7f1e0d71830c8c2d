"""The NVIDIA backend (torch.cuda on a CUDA build) and the cuBLAS/cuDNN flags it shares with ROCm.

A ROCm build of torch also answers torch.cuda.is_available() and uses the "cuda" device string;
torch.version.hip tells the two apart, so this backend reports unavailable on a ROCm build.
"""

from __future__ import annotations

from typing import Any

from kcgate.devices.base import (
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


class CudaBackend(TorchBackend):
    name = "cuda"
    device_string = "cuda"

    def _probe(self) -> bool:
        return not is_rocm_build(self.torch) and cuda_api_available(self.torch)

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
