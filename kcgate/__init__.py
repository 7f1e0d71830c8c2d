"""kcgate: kernel contracts for ML kernels, run on every vendor's hardware and gated in CI.

The Python API (``check``, ``assert_contract``, ``contract``, ``CheckResult``, ``ContractError``) is
loaded on first use, so ``import kcgate`` stays light and never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["CheckResult", "ContractError", "assert_contract", "check", "contract", "registered"]

if TYPE_CHECKING:
    from kcgate.adopt.api import CheckResult, ContractError, assert_contract, check, contract, registered


def __getattr__(name: str) -> Any:
    if name == "__version__":  # one source, kcgate.vocab.version, read on use: `import kcgate` loads nothing
        from kcgate.vocab.version import __version__

        return __version__
    if name in __all__:
        from kcgate.adopt import api

        return getattr(api, name)
    raise AttributeError(f"module 'kcgate' has no attribute {name!r}")
