"""C-CMP-01 (fusion equivalence): a fused gelu must match the unfused erf composition.

bad: the fusion swaps in the tanh approximation (fast-math), off by up to 5e-4 — invisible to a
1e-3 allclose, thousands of fp32 ulps to a contract.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import torch

from kcgate.kernels.functional import allclose_loose

BASIC_TEST = "torch.allclose(atol=1e-3, rtol=1e-3) against F.gelu, 64x256"
_SQRT1_2 = 1 / math.sqrt(2)


def _fused(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.erf(x * _SQRT1_2))


def good(x: torch.Tensor) -> torch.Tensor:
    """The fused composition written as one expression (what inductor emits as one loop)."""
    return _fused(x)


@cache
def _compiled() -> Any:
    return torch.compile(_fused, dynamic=False)


def compiled_good(x: torch.Tensor) -> torch.Tensor:
    """The same fusion through torch.compile (inductor's C++ on CPU); slow to build, so not the default."""
    return _compiled()(x)  # type: ignore[no-any-return]


def bad(x: torch.Tensor) -> torch.Tensor:
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1 + torch.tanh(inner))  # fast-math tanh approximation inside the fusion


def baseline(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(0)) * 2
    return allclose_loose(kernel(x), torch.nn.functional.gelu(x.double()), tol=1e-3)
