"""Which inputs a custom op's fp64 reference is invariant in, tested numerically: a shift (a softmax's logits,
a batch-norm's x) or a scale (a normaliser's x). Where it is, kcgate probes that input by default."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from kcgate.numerics.ops.base import Tensors, upcast

SHIFT = 7.0  # a constant added to the whole input (every element alike: a per-row or per-column statistic)
SCALE = 8.0
# Invariant within this share of the output's magnitude: an epsilon under a square root (1e-5, 1e-6) moves a
# normaliser by less than this at unit variance, a non-invariant op moves by O(1).
RTOL = 1e-4
KINDS = ("offset", "scale")


def _flat(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        x = list(x.values())
    return [t for item in x for t in _flat(item)] if isinstance(x, (tuple, list)) else []


def _moved(up: Tensors, index: int, kind: str) -> Tensors:
    t = up[index] + SHIFT if kind == "offset" else up[index] * SCALE
    return (*up[:index], t, *up[index + 1 :])


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Every output unchanged within RTOL of its magnitude (integer outputs equal, non-finite ones alike)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return False
        if not x.is_floating_point():
            if not torch.equal(x, y):
                return False
            continue
        if not torch.equal(x.isfinite(), y.isfinite()):
            return False
        fin = x.isfinite()
        top = float(x[fin].abs().max()) if bool(fin.any()) else 0.0
        if bool(fin.any()) and float((x[fin] - y[fin]).abs().max()) > RTOL * top:
            return False
    return True


def invariant(oracle: Callable[..., Any], samples: Sequence[Tensors], index: int, kind: str) -> bool:
    """Whether ``oracle`` (fp64) gives the same outputs on every sample with input ``index`` shifted by SHIFT
    (``kind`` "offset") or multiplied by SCALE ("scale")."""
    for xs in samples:
        up = upcast(xs)
        with torch.no_grad():
            try:
                if not _same(_flat(oracle(*up)), _flat(oracle(*_moved(up, index, kind)))):
                    return False
            except Exception:  # the reference rejects the moved input: no invariance to claim
                return False
    return True


def invariances(oracle: Callable[..., Any], samples: Sequence[Tensors]) -> tuple[tuple[int, str], ...]:
    """(input index, kind) for every float input (of more than one element) and kind the reference is
    invariant in, on every sample."""
    if not samples:
        return ()
    first = samples[0]
    floats = [i for i, t in enumerate(first) if t.is_floating_point() and t.numel() > 1]
    return tuple((i, k) for i in floats for k in KINDS if invariant(oracle, samples, i, k))
