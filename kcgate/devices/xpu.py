"""The Intel backend: native torch.xpu (torch >= 2.5), device string "xpu".

Driver, runtime and architecture come from torch.xpu.get_device_properties; has_fp64 matters
because Arc GPUs emulate fp64 (or lack it), which changes where an fp64 oracle may run.
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
)
from kcgate.devices.cuda import read_version
from kcgate.results.model import Fingerprint
from kcgate.vocab.device_kinds import vendor

XPU_ENV = (
    "ZE_AFFINITY_MASK",
    "ONEAPI_DEVICE_SELECTOR",
    "IGC_EnableDPEmulation",  # software fp64 on GPUs without it
    "OverrideDefaultFP64Settings",
)

# Properties documented for torch.xpu.get_device_properties that change numerics or identify the part.
PROP_FLAGS = {
    "xpu_has_fp64": "has_fp64",
    "xpu_has_fp16": "has_fp16",
    "xpu_has_dpas": "has_subgroup_matrix_multiply_accumulate",
    "xpu_has_dpas_tf32": "has_subgroup_matrix_multiply_accumulate_tensor_float32",
    "xpu_device_version": "version",
    "xpu_platform": "platform_name",
}


class XpuBackend(TorchBackend):
    name = "xpu"
    device_string = "xpu"

    def _probe(self) -> bool:
        return bool(call_value(self.torch, "xpu.is_available"))

    def fingerprint(self) -> Fingerprint:
        torch = self.torch
        props = call_value(torch, "xpu.get_device_properties", 0)
        flags = {**numerics_flags(torch), **xpu_flags(torch, props), **env_flags(XPU_ENV)}
        return make_fingerprint(
            self.name,
            torch,
            flags,
            vendor=vendor(self.name),
            device=attr_text(props, "name"),
            arch=attr_text(props, "architecture"),  # an opaque id (experimental in torch)
            driver=attr_text(props, "driver_version"),
            runtime=read_version(torch, "xpu"),
        )


def xpu_flags(torch: Any, props: Any) -> dict[str, str]:
    flags = {key: attr_text(props, attr) for key, attr in PROP_FLAGS.items()}
    # oneDNN runs XPU matmul/conv; a non-"ieee" precision lets fp32 run as tf32 or bf16.
    flags["mkldnn_fp32_precision"] = attr_text(torch, "backends.mkldnn.fp32_precision")
    flags["device_count"] = call_text(torch, "xpu.device_count")
    return flags
