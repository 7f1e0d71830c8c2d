"""C-EXC-01 (NaN/Inf policy): row sums must propagate NaN and Inf as IEEE arithmetic does.

bad: inputs are "cleaned" with ``nan_to_num`` before the reduction, so a NaN row comes back finite.
"""

from __future__ import annotations

import torch

from kcgate.kernels.functional import assert_close_default

BASIC_TEST = "torch.testing.assert_close at fp32 defaults on finite randn inputs, 32x1024"


def good(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1)


def bad(x: torch.Tensor) -> torch.Tensor:
    return torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0).sum(-1)


def baseline(x: torch.Tensor) -> torch.Tensor:
    return torch.full(x.shape[:-1], float("nan"), dtype=x.dtype)


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    x = torch.randn(32, 1024, generator=torch.Generator().manual_seed(0))
    return assert_close_default(kernel(x), x.double().sum(-1))
