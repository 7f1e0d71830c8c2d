"""The interface every device backend implements."""

from __future__ import annotations

from typing import Any, Protocol

from kcgate.results import Fingerprint


class Backend(Protocol):
    """A vendor stack: detection, the torch device string, sync, cleanup and a fingerprint."""

    name: str

    def available(self) -> bool: ...

    def device(self) -> str: ...

    def synchronize(self) -> None: ...

    def empty_cache(self) -> None: ...

    def fingerprint(self) -> Fingerprint: ...


def numerics_flags(torch: Any) -> dict[str, str]:
    """Global torch flags that change numerics, shared by all backends."""
    flags = {
        "matmul_precision": str(torch.get_float32_matmul_precision()),
        "deterministic": str(torch.are_deterministic_algorithms_enabled()),
        "threads": str(torch.get_num_threads()),
    }
    return flags
