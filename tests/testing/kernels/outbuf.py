"""Kernels that write into a provided ``out=`` buffer: correctly, partly, or past its end."""

from __future__ import annotations

import torch


def good(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    torch.matmul(a, b, out=out)


def lazy(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    out[:-1] = a[:-1] @ b  # forgets the last row: it stays NaN


def overrun(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    torch.matmul(a, b, out=out)
    torch.as_strided(out, (out.numel() + 1,), (1,))[-1] = 0.0  # one element past the end


def overread(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    wide = torch.as_strided(a, (a.shape[0], a.shape[1] + 1), (a.shape[1], 1))  # reads one past the end
    torch.matmul(wide[:, 1:], b, out=out)
