"""C-PRC-04 (output rounding): gelu computed in fp32, stored as bf16 with round-to-nearest-even.

bad: the downcast truncates (round toward zero) — at most one bf16 ulp off, but biased.
"""

from __future__ import annotations

import torch

from kcgate.kernels.functional import assert_close_default
from kcgate.numerics.emulate import truncate_to_bf16

BASIC_TEST = "torch.testing.assert_close at bf16 defaults (rtol 1.6e-2, atol 1e-5), 64x256"


def _gelu32(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x.to(torch.float32))


def good(x: torch.Tensor) -> torch.Tensor:
    return _gelu32(x).to(torch.bfloat16)


def bad(x: torch.Tensor) -> torch.Tensor:
    return truncate_to_bf16(_gelu32(x))


def baseline(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x).to(torch.bfloat16)  # relu shipped as gelu


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    return assert_close_default(kernel(x), torch.nn.functional.gelu(x.double()).to(torch.bfloat16))
