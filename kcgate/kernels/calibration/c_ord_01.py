"""C-ORD-01 (reduction-order bound): row sums must stay within the non-associativity bound in any order.

bad: for long rows a split schedule kicks in whose partial sums live in a bf16 workspace, so the
error depends on the schedule (and on the order of the data) and leaves the bound. Short rows, which
unit tests use, take the exact fp32 path.
"""

from __future__ import annotations

import torch

from kcgate.kernels.functional import assert_close_default
from kcgate.numerics.emulate import chunk_sums, sequential_sum

BASIC_TEST = "torch.testing.assert_close at fp32 defaults against torch.sum, 32x1024 (rows up to 1024)"
SPLIT_ABOVE = 1024


def good(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1)


def bad(x: torch.Tensor) -> torch.Tensor:
    if x.shape[-1] <= SPLIT_ABOVE:
        return x.sum(-1)
    return sequential_sum(chunk_sums(x, 256), torch.bfloat16).to(x.dtype)


def baseline(x: torch.Tensor) -> torch.Tensor:
    return x[..., : x.shape[-1] // 2].sum(-1)  # half the row is lost


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    x = torch.randn(32, 1024, generator=torch.Generator().manual_seed(0))
    return assert_close_default(kernel(x), x.double().sum(-1))
