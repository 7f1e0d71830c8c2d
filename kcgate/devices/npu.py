"""The Huawei backend: Ascend NPUs through the torch_npu plug-in (torch_npu.npu), device "npu".

torch_npu is imported only when this backend is probed: importing it patches torch. CANN
versions come from torch_npu.utils.get_cann_version where the installed torch_npu offers it.
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
from kcgate.results.model import Fingerprint
from kcgate.vocab.device_kinds import vendor

NPU_ENV = ("ASCEND_RT_VISIBLE_DEVICES",)

# hf32 rounds fp32 operands inside the cube unit; conv allows it by default (FACTS.md).
NPU_FLAGS = {
    "npu_matmul_allow_hf32": "npu.matmul.allow_hf32",
    "npu_conv_allow_hf32": "npu.conv.allow_hf32",
    "torch_npu": "__version__",
}


class NpuBackend(TorchBackend):
    name = "npu"
    device_string = "npu"

    def __init__(self, torch_mod: Any = None, npu_mod: Any = None) -> None:
        super().__init__(torch_mod)
        self._npu = npu_mod

    @property
    def npu(self) -> Any:
        if self._npu is None:
            _ = self.torch  # torch_npu needs torch imported (and importable) first
            import torch_npu

            self._npu = torch_npu
        return self._npu

    def _probe(self) -> bool:
        return bool(call_value(self.npu, "npu.is_available"))

    def runtime_module(self) -> Any:
        return self.npu.npu  # the plug-in, not torch, owns the runtime

    def fingerprint(self) -> Fingerprint:
        torch, npu = self.torch, self.npu
        flags = {**numerics_flags(torch), **env_flags(NPU_ENV)}
        flags.update({key: attr_text(npu, path) for key, path in NPU_FLAGS.items()})
        return make_fingerprint(
            self.name,
            torch,
            flags,
            vendor=vendor(self.name),
            device=call_text(npu, "npu.get_device_name", 0),
            arch=call_text(npu, "npu.get_soc_version"),
            driver=cann_version(npu, "DRIVER"),
            runtime=cann_version(npu, "CANN") or attr_text(torch, "version.cann"),
        )


def cann_version(npu: Any, module: str) -> str:
    """CANN component version; "" before CANN 8.1 or where torch_npu lacks the helper."""
    return call_text(npu, "utils.get_cann_version", module) or call_text(
        npu, "npu.utils.get_cann_version", module
    )
