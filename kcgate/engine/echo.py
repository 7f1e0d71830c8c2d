"""An output that is one of the kernel's own inputs, returned instead of computed: a fused add + norm's new
residual left as the old one. Claimed only where the output equals that input within the output's bound.
"""

from __future__ import annotations

from typing import Any

import torch

from kcgate.engine.diagnosis import sig
from kcgate.engine.mistakes import budget_against
from kcgate.results.model import Signature


def input_echo_signature(ctx: Any, trial: Any) -> Signature | None:
    """A custom op's failing forward output within its own bound of an input of its shape (the reference's
    value is not: the trial failed): "output 'residual' equals input 'residual'"."""
    if ctx.op.name != "custom" or trial.grad or trial.out is None or trial.cmp is None:
        return None
    if ctx.contract.tolerance.method not in ("error-bound", "abs-rel"):
        return None  # the allowance must be an absolute error to hold the input to it
    out = trial.out.detach().to(torch.float64)
    allowed = trial.cmp.allowed.to(device=out.device, dtype=torch.float64).expand(out.shape)
    for i, x in enumerate(trial.inputs):
        if tuple(x.shape) != tuple(out.shape) or not x.is_floating_point():
            continue
        there = budget_against(out, x.detach().to(device=out.device, dtype=torch.float64), allowed, False)
        if there <= 1:
            what = f"output {trial.output!r}" if getattr(trial, "output", "") else "the output"
            name = ctx.op.input_name(i)
            return sig(
                "wrong-semantics",
                f"{what} equals input {name!r} (budget {there:.2g} against it): the kernel returned its "
                "input unchanged instead of the updated value",
                mistake=f"{what.removeprefix('the ')} returned as input {name!r}",
                budget_there=round(there, 4),
                **({"output": trial.output} if getattr(trial, "output", "") else {}),
            )
    return None
