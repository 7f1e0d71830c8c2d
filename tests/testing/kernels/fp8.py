"""fp8-output kernels for the C-PRC-04 overflow probe: gelu and matmul computed in fp32 and stored as fp8
with a chosen overflow behaviour (the conversions are the calibration module's, explicit about overflow)."""

from __future__ import annotations

import math

import torch

from kcgate.kernels.calibration.c_prc_04_fp8 import non_saturating, saturate

E5M2 = torch.float8_e5m2


def _gelu32(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x.to(torch.float32))


def gelu_e5m2_saturate(x: torch.Tensor) -> torch.Tensor:
    return saturate(_gelu32(x), E5M2)


def gelu_e5m2_inf(x: torch.Tensor) -> torch.Tensor:
    return non_saturating(_gelu32(x), E5M2, math.inf)


def matmul_e4m3_saturate(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return saturate(a.to(torch.float32) @ b.to(torch.float32))


def matmul_e4m3_nan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return non_saturating(a.to(torch.float32) @ b.to(torch.float32))
