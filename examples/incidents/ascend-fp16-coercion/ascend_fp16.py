"""Ascend fp32→fp16 coercion: a matmul that declares an fp32 accumulator.

``coerced`` reproduces CANN ``precision_mode=allow_fp32_to_fp16`` on CPU: the partial products of each
K-block are formed in fp32, but the running sum is rounded to fp16 after every add, so the accumulator
keeps 11 significant bits instead of 24. ``faithful`` accumulates in fp32 as declared.
"""

from __future__ import annotations

import torch

from kcgate.numerics.emulate import blocked_matmul


def faithful(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)  # fp32 accumulation, as declared


def coerced(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # the graph was compiled with allow_fp32_to_fp16: the accumulator silently became fp16
    return blocked_matmul(a, b, block=32, acc=torch.float16).to(a.dtype)
