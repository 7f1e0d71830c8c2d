"""A planted drift and its correct twin (issue 53): an rms_norm whose output is scaled by 1 + 4e-7, its error
6-9x a correct implementation's, within the bound; the twin is the same arithmetic without the scale. The
verdict-flip measurement (benchmarks/verdict_flips.py) and tests/engine/test_sequential_verdict.py run them
at many seeds: the drift must never flip between pass and fail."""

from __future__ import annotations

import torch

EPS = 1e-5  # the rmsnorm family's default eps
DRIFT = 1 + 4e-7


def _rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)


def rmsnorm_drift(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """torch's rms_norm, scaled by 1 + 4e-7 (a planted drift of ~3.4 fp32 unit roundoffs)."""
    return (_rms_norm(x.double(), w.double()) * DRIFT).to(x.dtype)


def rmsnorm_twin(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The drift's correct twin: the same arithmetic in fp64, rounded once to the input dtype."""
    return _rms_norm(x.double(), w.double()).to(x.dtype)


NEAR = 1 + 1e-7  # a drift near the gate's line: its error 1.7-2x a correct implementation's


def rmsnorm_near(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """torch's rms_norm scaled by NEAR: its error near 1.5x a correct implementation's, the line."""
    return (_rms_norm(x.double(), w.double()) * NEAR).to(x.dtype)


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """torch's row sum over the last dimension (the refusal's near-the-line case: a short fp16 accumulator
    over one long row, whose allowed error is about the size of the sum on some draws and not on others)."""
    return x.sum(-1)
