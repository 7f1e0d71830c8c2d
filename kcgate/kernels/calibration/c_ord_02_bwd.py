"""C-ORD-02 on the backward (``cal-ord-02-bwd``): a linear layer's d(bias), declared bitwise deterministic.

bad: d(bias) by atomic adds landing in a new order on every call; baseline: noise added to d(bias).
"""

from __future__ import annotations

import torch

from kcgate.kernels.calibration.backward import AtomicDbLinear, GoodLinear, NoisyDbLinear

BASIC_TEST = "torch.allclose(d(bias), Σ dY, rtol=1e-4, atol=1e-4), 512x32x24 fp32, one backward"
good, bad, baseline = GoodLinear, AtomicDbLinear, NoisyDbLinear


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(s, generator=g) for s in ((512, 32), (24, 32), (24,)))
    dy = torch.randn(512, 24, generator=g)
    b = b.requires_grad_()
    (db,) = torch.autograd.grad(kernel.apply(x, w, b), [b], dy)
    return bool(torch.allclose(db, dy.sum(0), rtol=1e-4, atol=1e-4))
