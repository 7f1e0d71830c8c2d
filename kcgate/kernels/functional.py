"""The basic functional tests a bad kernel passes: the checks kernel repositories actually write.

Each returns True when the kernel "looks right". They are deliberately the conventional ones
(allclose at dtype defaults, KernelBench's 1e-2, a normwise check), so calibration can show the
gap between passing a unit test and honouring a contract.
"""

from __future__ import annotations

import torch


def assert_close_default(out: torch.Tensor, ref: torch.Tensor) -> bool:
    """``torch.testing.assert_close`` at the dtype's default rtol/atol (fp32: 1.3e-6, 1e-5)."""
    try:
        torch.testing.assert_close(out, ref.to(out.dtype), equal_nan=True)
    except AssertionError:
        return False
    return True


def allclose_loose(out: torch.Tensor, ref: torch.Tensor, tol: float = 1e-2) -> bool:
    """KernelBench-style ``torch.allclose(out, ref, atol=tol, rtol=tol)`` (its half-precision setting)."""
    return bool(torch.allclose(out.to(torch.float64), ref.to(torch.float64), atol=tol, rtol=tol))


def equal(out: torch.Tensor, ref: torch.Tensor) -> bool:
    """Exact equality, for index ops where any numeric slack would be meaningless."""
    return bool(torch.equal(out, ref.to(out.dtype)))
