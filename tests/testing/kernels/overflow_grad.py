"""A softmax whose forward is stable (torch.softmax) and whose backward recomputes exp(x) without the row max:
on logits near 1e4 the gradient is NaN while the output is right (tests/engine/checks/test_overflow_advice.py)."""

from __future__ import annotations

from typing import Any

import torch


class _NaiveBackwardSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.softmax(x, -1)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        e = torch.exp(x)  # the bug: no max subtracted, inf for logits past 88
        p = e / e.sum(-1, keepdim=True)
        return p * (dy - (dy * p).sum(-1, keepdim=True))


def softmax(x: torch.Tensor) -> torch.Tensor:
    return _NaiveBackwardSoftmax.apply(x)
