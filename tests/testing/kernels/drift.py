"""Planted drifts and their correct twins. An rms_norm whose output is scaled by 1 + 4e-7 (issue 53), its error
6-9x a correct implementation's, within the bound; the twin is the same arithmetic without the scale. The
verdict-flip measurement (benchmarks/verdict_flips.py) and tests/engine/test_sequential_verdict.py run them
at many seeds: the drift must never flip between pass and fail. And Liger-Kernel 0.6.0's swiglu change (issue
57), a swiglu that rounds once in fp16 and its successor that rounds twice: a drift on the same inputs, never
a failure (tests/gate/test_drift_same_inputs.py, tests/data/drift)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

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


# ---- Liger-Kernel 0.6.0's swiglu change (issue 57): one rounding in fp16 became two ----------------------------


def swiglu_once(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a)·b computed in fp32 and cast once to the inputs' dtype: the correctly rounded result almost
    everywhere (0% of fp16 elements missed)."""
    return (F.silu(a.float()) * b.float()).to(a.dtype)


def swiglu_twice(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """As 0.6.0 ships it: silu(a) cast to the inputs' dtype, then multiplied there, so a 16-bit output is
    rounded twice (about 26% of fp16 elements not correctly rounded, still far inside the bound). In fp32 the
    same arithmetic as ``swiglu_once``."""
    return F.silu(a.float()).to(a.dtype) * b
