"""C-EXC-02 (out-of-bounds policy): index_select(x, index) along dim 0, declared policy ``raise``.

bad: indices are wrapped modulo the row count (AMD's silent acceptance); ``zero_bad`` fills
out-of-range rows with zeros (a buffer load that returns 0 out of range).
"""

from __future__ import annotations

import torch

from kcgate.kernels.functional import equal

BASIC_TEST = "exact equality with torch.index_select on in-range indices, 64x256 by 32 indices"


def good(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.index_select(x, 0, index)  # raises on an out-of-range index


def bad(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.index_select(x, 0, index % x.shape[0])


def zero_bad(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    inside = (index >= 0) & (index < x.shape[0])
    rows = torch.index_select(x, 0, torch.where(inside, index, torch.zeros_like(index)))
    return torch.where(inside[:, None], rows, torch.zeros_like(rows))


def baseline(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return x[: index.shape[0]].clone()  # ignores the indices


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(0)
    x, index = torch.randn(64, 256, generator=g), torch.randint(0, 64, (32,), generator=g)
    return equal(kernel(x, index), torch.index_select(x, 0, index))
