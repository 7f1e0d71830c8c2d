"""AMD out-of-bounds silent acceptance: index_select along dim 0 with a declared policy of ``raise``.

``checked`` raises on an out-of-range index (what NVIDIA/PyTorch does). ``wrapped`` reduces indices
modulo the row count, so a bad index reads a real but wrong row. ``zero_filled`` behaves like an AMD
buffer load, which returns 0 out of range: the bad index reads a row of zeros. Neither complains.
"""

from __future__ import annotations

import torch


def checked(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.index_select(x, 0, index)  # raises IndexError/RuntimeError out of range


def wrapped(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.index_select(x, 0, index % x.shape[0])


def zero_filled(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    inside = (index >= 0) & (index < x.shape[0])
    rows = torch.index_select(x, 0, torch.where(inside, index, torch.zeros_like(index)))
    return torch.where(inside[:, None], rows, torch.zeros_like(rows))
