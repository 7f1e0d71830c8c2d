"""What a custom op's inputs hold, read from its own generator's draws: rows of probabilities or of
log-probabilities (over the last dim), and inputs that share a shape and dtype (so they can be equal). The
stability probes built from them (kcgate.engine.checks.stability: peaked distributions, ties) are the inputs
real loss kernels break on: a JSD whose exp underflows, a TVD gradient wrong where p == q."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kcgate.numerics.ops.base import Tensors

# A row sums to one within this (a bf16 softmax's rows: a few units of 2^-8), its log-sum-exp likewise
ROW_TOL = 0.05
PEAK = (
    40.0  # the peaked probe's logits: normal × PEAK, so most log-probabilities lie far below exp's fp32 range
)
MAX_PAIRS = 2  # ties probes per case: the first pairs of inputs of one shape and dtype


def _rows_sum_to_one(t: torch.Tensor) -> bool:
    s = t.sum(-1)
    return bool(((s - 1).abs() <= ROW_TOL).all())


def kind(t: torch.Tensor) -> str:
    """ "prob" for rows of probabilities, "log" for rows of log-probabilities, "" otherwise (a tensor of one
    element, or of one column, holds no distribution worth peaking)."""
    if not t.is_floating_point() or t.dim() == 0 or t.shape[-1] < 2 or not bool(t.isfinite().all()):
        return ""
    x = t.detach().to(torch.float64)
    if bool((x >= 0).all()) and bool((x <= 1).all()) and _rows_sum_to_one(x):
        return "prob"
    if bool((x <= 0).all()) and _rows_sum_to_one(x.exp()):
        return "log"
    return ""


def distributions(samples: Sequence[Tensors]) -> tuple[tuple[int, str], ...]:
    """(input index, "prob" | "log") for every input that holds distributions on every sample."""
    if not samples:
        return ()
    found = []
    for i, t in enumerate(samples[0]):
        k = kind(t)
        if k and all(len(s) > i and kind(s[i]) == k for s in samples[1:]):
            found.append((i, k))
    return tuple(found)


def tie_pairs(inputs: Tensors) -> tuple[tuple[int, int], ...]:
    """(i, j), i < j, for float inputs of one shape and dtype, of more than one element: at most MAX_PAIRS."""
    out = []
    for i, a in enumerate(inputs):
        for j in range(i + 1, len(inputs)):
            b = inputs[j]
            if a.is_floating_point() and a.numel() > 1 and a.shape == b.shape and a.dtype == b.dtype:
                out.append((i, j))
    return tuple(out[:MAX_PAIRS])


def peaked(t: torch.Tensor, k: str, g: torch.Generator) -> torch.Tensor:
    """A near-one-hot draw of the same kind as ``t``: the softmax (or log_softmax) of normal logits × PEAK."""
    z = torch.randn(t.shape, generator=g, dtype=torch.float64) * PEAK
    out = torch.softmax(z, -1) if k == "prob" else torch.log_softmax(z, -1)
    return out.to(device=t.device, dtype=t.dtype)


def tied(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a`` with every other row (every other element of a vector) taken from ``b``: whole rows, so a row of
    probabilities still sums to one, and a == b exactly there."""
    out = a.clone()
    out[::2] = b[::2]
    return out
