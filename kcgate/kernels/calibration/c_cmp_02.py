"""C-CMP-02 (every autotuning configuration): a tiled matmul must be right under every tile config.

bad: the ``block_n = 64`` configuration assumes N is a multiple of 64 and never writes the tail tile
(those columns stay zero). The autotune winner (``block_n = 32``) handles tails, so a test of the
default path passes.
"""

from __future__ import annotations

from typing import Any

import torch

from kcgate.kernels.functional import allclose_loose

BASIC_TEST = "KernelBench-style allclose(1e-2) of the default config at 64x256x72"
DEFAULT = {"block_n": 32}


def _tiled(a: torch.Tensor, b: torch.Tensor, block_n: int, drop_tail: bool) -> torch.Tensor:
    n = b.shape[1]
    out = torch.zeros(a.shape[0], n, dtype=a.dtype)
    stop = n - n % block_n if drop_tail else n
    for j in range(0, stop, block_n):
        out[:, j : j + block_n] = a @ b[:, j : j + block_n]
    return out


def good(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    return _tiled(a, b, int((config or DEFAULT)["block_n"]), drop_tail=False)


def bad(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    block_n = int((config or DEFAULT)["block_n"])
    return _tiled(a, b, block_n, drop_tail=block_n == 64)


def baseline(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    return _tiled(a, b.flip(1), int((config or DEFAULT)["block_n"]), drop_tail=False)  # columns reversed


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 256, generator=g), torch.randn(256, 72, generator=g)
    return allclose_loose(kernel(a, b), a.double() @ b.double())
