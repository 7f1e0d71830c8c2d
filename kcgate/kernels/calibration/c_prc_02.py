"""C-PRC-02 (numerical stability): layernorm over rows whose mean is large (1e4) and std is 1.

bad: the one-pass variance E[x²] − E[x]², which cancels catastrophically when |mean| ≫ std.
``softmax_bad`` (no max-subtraction) is the same fault for softmax.
"""

from __future__ import annotations

import torch

from kcgate.kernels.functional import assert_close_default

BASIC_TEST = "torch.testing.assert_close at fp32 defaults on randn inputs (mean 0), 32x256"
EPS = 1e-5


def good(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, EPS)


def bad(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean  # one pass: cancels when |mean| >> std
    return (x - mean) * torch.rsqrt(var.clamp_min(0) + EPS) * w + b


def baseline(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return x - x.mean(-1, keepdim=True)  # forgets to divide by the standard deviation


def softmax_good(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def softmax_bad(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x)  # no max-subtraction: overflows for logits above ~88 in fp32
    return e / e.sum(-1, keepdim=True)


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(32, 256, generator=g), torch.ones(256), torch.zeros(256)
    return assert_close_default(kernel(x, w, b), good(x.double(), w.double(), b.double()))
