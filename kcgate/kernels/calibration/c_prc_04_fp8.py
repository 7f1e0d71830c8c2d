"""C-PRC-04, fp8 overflow (contract ``cal-prc-04-fp8``): gelu computed in fp32, stored as float8_e4m3fn
with round-to-nearest-even; the contract declares ``overflow = "saturate"``.

good: clamps to ±448 before the RNE cast (the saturating conversion, like PTX ``cvt.rn.satfinite``).
bad: the non-saturating conversion of the OCP FP8 spec — overflow becomes NaN (what this torch's own
float8_e4m3fnuz cast does; its float8_e4m3fn cast saturates, so the behaviour is emulated explicitly).
In range it is bit-identical to good, so tests on ordinary inputs cannot tell them apart.
"""

from __future__ import annotations

import math

import torch

BASIC_TEST = "torch.testing.assert_close at fp8 e4m3 tolerances (rtol 0.125 = 1 ulp, atol 2^-9), 64x256"
FP8 = torch.float8_e4m3fn


def _gelu32(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x.to(torch.float32))


def saturate(y: torch.Tensor, dtype: torch.dtype = FP8) -> torch.Tensor:
    """fp32 → fp8 with overflow clamped to ±max, then round to nearest even."""
    m = torch.finfo(dtype).max
    return y.clamp(-m, m).to(dtype)


def non_saturating(y: torch.Tensor, dtype: torch.dtype = FP8, overflow: float = math.nan) -> torch.Tensor:
    """fp32 → fp8 where a value that rounds past max becomes ``overflow`` (NaN, or ±inf for e5m2).

    Past max means beyond max + ½ ulp(max), the RNE rounding boundary (exact ties are not special-cased)."""
    m = torch.finfo(dtype).max
    edge = m + 2.0 ** math.floor(math.log2(m)) * torch.finfo(dtype).eps / 2
    hit = torch.full_like(y, overflow) * (y.sign() if math.isinf(overflow) else 1)
    return torch.where(y.abs() > edge, hit, y.clamp(-m, m)).to(dtype)


def good(x: torch.Tensor) -> torch.Tensor:
    return saturate(_gelu32(x))


def bad(x: torch.Tensor) -> torch.Tensor:
    return non_saturating(_gelu32(x))


def baseline(x: torch.Tensor) -> torch.Tensor:
    return saturate(torch.relu(x.to(torch.float32)))  # relu shipped as gelu


def basic_test(kernel) -> bool:  # type: ignore[no-untyped-def]
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    ref = torch.nn.functional.gelu(x.double())
    try:
        torch.testing.assert_close(kernel(x).to(torch.float64), ref, rtol=0.125, atol=2.0**-9)
    except AssertionError:
        return False
    return True
