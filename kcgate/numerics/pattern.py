"""The error pattern of a kernel against a cast mutant of its reference (kcgate.engine.placement): in ulps of the
output's dtype at the fp64 value, the kernel's deviation from the reference as written, fitted to the mutant's
deviation with the reference's own error held fixed. A kernel that rounds where the mutant rounds carries the
mutant's deviation whatever order it reduces in (coefficient near 1); one that rounds elsewhere, or less, does
not (near 0). The model: docs/custom-op.md#where-a-16-bit-kernel-may-round-your-references-casts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Pattern:
    """One trial's fit of the kernel's deviation on the mutant's."""

    beta: float  # the coefficient fitted to the mutant's deviation: 1 the kernel carries all of it, 0 none
    rho: float  # the partial correlation: rho² is the share of the kernel's deviation the mutant's explains


NONE = Pattern(0.0, 0.0)


def ulps(oracle: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype`` at each fp64 value (its subnormal spacing below the normal range)."""
    fi = torch.finfo(dtype)
    _, e = torch.frexp(oracle.abs().clamp_min(fi.tiny))  # |v| = m·2^e with m in [0.5, 1)
    return torch.ldexp(torch.full_like(oracle, fi.eps), e - 1)


def _joined(parts: Sequence[torch.Tensor], like: Sequence[torch.Tensor]) -> torch.Tensor:
    """``parts`` in the dtypes of ``like`` (as the kernel returned them), flattened into one fp64 vector."""
    return torch.cat([p.detach().to(o.device, o.dtype).reshape(-1).double() for p, o in zip(parts, like)])


class Deviation:
    """The kernel's deviation from the reference as written on one trial, and the reference's own error,
    both in ulps and with the reference's error projected out, ready to be fitted to any mutant's."""

    def __init__(
        self, outs: Sequence[torch.Tensor], ref: Sequence[torch.Tensor], refs64: Sequence[torch.Tensor]
    ) -> None:
        oracle = torch.cat([r.detach().to(o.device).reshape(-1).double() for r, o in zip(refs64, outs)])
        self.unit = torch.cat(
            [ulps(r, o.dtype) for r, o in zip(oracle.split([o.numel() for o in outs]), outs)]
        )
        self.outs, self.ref = outs, _joined(ref, outs)
        kernel = _joined(outs, outs)
        e_ref = (self.ref - oracle) / self.unit
        d_kernel = (kernel - self.ref) / self.unit
        self.ok = e_ref.isfinite() & d_kernel.isfinite()
        self.e_ref = torch.where(self.ok, e_ref, 0.0)
        self.ee = float(self.e_ref @ self.e_ref)
        self.y = self._residual(torch.where(self.ok, d_kernel, 0.0))

    def _residual(self, v: torch.Tensor) -> torch.Tensor:
        """``v`` less its projection on the reference's own error."""
        return v - float(v @ self.e_ref) / self.ee * self.e_ref if self.ee > 0 else v

    def against(self, alt: Sequence[torch.Tensor]) -> Pattern:
        """The fit of the kernel's deviation on the mutant ``alt``'s (its float outputs, in the kernel's order)."""
        d_mutant = (_joined(alt, self.outs) - self.ref) / self.unit
        x = self._residual(torch.where(self.ok & d_mutant.isfinite(), d_mutant, 0.0))
        xx, xy, yy = float(x @ x), float(x @ self.y), float(self.y @ self.y)
        if xx <= 0 or yy <= 0:
            return NONE
        return Pattern(xy / xx, xy / (xx * yy) ** 0.5)
