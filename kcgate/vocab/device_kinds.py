"""Device kinds: the one table of device names, read by the contract loader (``devices``), the JSON
Schema, ``--device`` and the backend registry (``kcgate.devices``).

Torch-free and import-light on purpose: ``validate`` and ``schema`` read it without loading the
backends, which ``kcgate.devices`` imports (about 43 ms).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceKind:
    name: str  # a contract's ``devices`` entry, ``--device``, a fingerprint's ``backend``
    vendor: str  # ``kcgate runners``' vendor column and the fingerprint's vendor (the cpu reads its own)
    preference: int  # the default device is the available kind with the lowest preference


# Contract order (cpu first): a contract's default ``devices`` and the schema's enum list them so.
DEVICE_KINDS: dict[str, DeviceKind] = {
    k.name: k
    for k in (
        DeviceKind("cpu", "CPU", preference=5),  # last: any accelerator is preferred
        DeviceKind("cuda", "NVIDIA", preference=0),
        DeviceKind("rocm", "AMD", preference=1),
        DeviceKind("xpu", "Intel", preference=2),
        DeviceKind("mps", "Apple", preference=3),
        DeviceKind("npu", "Huawei", preference=4),
    )
}
DEVICES: tuple[str, ...] = tuple(DEVICE_KINDS)
BY_PREFERENCE: tuple[str, ...] = tuple(sorted(DEVICES, key=lambda n: DEVICE_KINDS[n].preference))


def vendor(name: str) -> str:
    """The vendor of device kind ``name``."""
    return DEVICE_KINDS[name].vendor
