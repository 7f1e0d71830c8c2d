"""C-PRC-01 on the backward (``cal-prc-01-bwd``): a linear layer's dW accumulator.

bad: dW's per-row products summed with a bf16 running sum; baseline: a backward returning zeros.
"""

from __future__ import annotations

import torch

from kcgate.kernels.calibration.backward import Bf16DwLinear, GoodLinear, ZeroGradLinear

BASIC_TEST = "torch.allclose(dW, dW_ref, rtol=5e-2, atol=5e-2) (a usual bf16 gradient tolerance), 16x64x16 fp32, one backward"
good, bad, baseline = GoodLinear, Bf16DwLinear, ZeroGradLinear


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(s, generator=g) for s in ((16, 64), (16, 64), (16,)))
    dy = torch.randn(16, 16, generator=g)
    w = w.requires_grad_()
    (dw,) = torch.autograd.grad(kernel.apply(x, w, b), [w], dy)
    return bool(torch.allclose(dw, dy.T @ x, rtol=5e-2, atol=5e-2))
