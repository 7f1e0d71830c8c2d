"""C-CMP-01's range probe for activations (pointwise, gelu, silu): a correct kernel gives a finite result
wherever the function has one, not only on the N(0, 1) inputs the trials draw.

Exp-based textbook forms overflow past |x| ≈ 5 there: (e^2x − 1)/(e^2x + 1) is NaN for x > 44 in fp32 (x > 5.5
computed in fp16), log(1 + e^x) is inf for x > 88.7 (x > 11 in fp16), where tanh is 1 and softplus is x. On
N(0, 1) they are correct and within the derived bound (a cancellation near 0 makes them ~2x torch's
error); only inputs in that range show the overflow. The probe is one more call on fresh inputs with one
element in ``SHARE`` set to ±2^e, e uniform in ``EXPONENTS``, and judges only finiteness: an element the
kernel makes NaN or ±Inf where the fp64 oracle is finite (and within the output format's range) fails as
``overflow-nan``. Accuracy there is not judged: the family bounds are derived for the trials' inputs, and
a function's far tails (subnormal sigmoids, torch's flush of them) are C-EXC-01's subnormal policy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from kcgate.engine.diagnosis import OVERFLOW_ADVICE, sig
from kcgate.engine.harness import run_trial
from kcgate.engine.trial import CaseContext, oracle
from kcgate.numerics.ops.base import Tensors
from kcgate.results.model import Signature

FAMILIES = ("pointwise", "gelu", "silu")  # one float input, elementwise: every real x is in the domain
SHARE = 64  # one element in SHARE is moved out to the wide range
EXPONENTS = (2.0, 10.0)  # |x| from 4 to 1024: past exp's fp32 range (88.7) and fp16's (11.1)


@dataclass(frozen=True)
class RangeProbe:
    """How many elements the probe moved out, how many of those became NaN/Inf, and the finding if any."""

    elements: int
    introduced: int
    signature: Signature | None
    message: str

    def extra(self) -> dict[str, float]:
        return {"range_probe_elements": float(self.elements), "range_probe_nonfinite": float(self.introduced)}


def applies(ctx: CaseContext) -> bool:
    return ctx.op.name in FAMILIES and ctx.contract.forward and ctx.case.shape is not None


def wide(ctx: CaseContext) -> tuple[Tensors, torch.Tensor] | None:
    """Fresh inputs with the wide-range elements (exact in the input dtype), and which elements they are."""
    xs = ctx.inputs(ctx.case.shape, "range")
    x = xs[0]
    if not x.is_floating_point() or x.numel() < SHARE:
        return None
    gen = ctx.generator("range-probe")
    flat = x.flatten().clone()
    k = flat.numel() // SHARE
    where = torch.randperm(flat.numel(), generator=gen)[:k]
    lo, hi = EXPONENTS
    mag = 2.0 ** (lo + (hi - lo) * torch.rand(k, generator=gen, dtype=torch.float64))
    sign = torch.where(torch.rand(k, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    limit = float(torch.finfo(x.dtype).max)
    flat[where] = (sign * mag).clamp(-limit, limit).to(x.dtype)
    moved = torch.zeros(flat.numel(), dtype=torch.bool)
    moved[where] = True
    return (flat.reshape(x.shape), *xs[1:]), moved.reshape(x.shape)


def probe(ctx: CaseContext) -> RangeProbe | None:
    """Run the kernel on the wide inputs; None where the probe does not apply or the call itself failed (the
    trials report a kernel that raises)."""
    if not applies(ctx) or (drawn := wide(ctx)) is None:
        return None
    xs, moved = drawn
    forward = (
        ctx
        if not ctx.contract.backward
        else replace(ctx, contract=replace(ctx.contract, direction="forward"))
    )
    t = run_trial(forward, inputs=xs, salt="range")
    if t.out is None or t.error or t.out.shape != moved.shape:
        return None
    ref = t.ref if t.ref is not None else oracle(ctx, xs)
    out = t.out.detach().to("cpu")
    top = float(torch.finfo(out.dtype).max) if out.is_floating_point() else float("inf")
    representable = ref.isfinite() & (ref.abs() <= top)
    bad = ~out.to(torch.float64).isfinite() & representable
    n = int(bad.sum())
    if not n:
        return RangeProbe(int(moved.sum()), 0, None, "")
    i = int(bad.flatten().nonzero()[0])
    x = float(xs[0].flatten()[i].to(torch.float64))
    example = f"x = {x:.4g} gives {float(out.flatten()[i].to(torch.float64))} where the function is {float(ref.flatten()[i]):.4g}"
    summary = (
        f"{n} NaN/Inf result(s) where the oracle is finite, on inputs up to |x| = 2^{EXPONENTS[1]:g} "
        f"({example}): {OVERFLOW_ADVICE['large-inputs']}"
    )
    signature = sig("overflow-nan", summary, introduced=float(n), example=example)
    message = (
        f"the range probe ({int(moved.sum())} inputs at |x| from 2^{EXPONENTS[0]:g} to 2^{EXPONENTS[1]:g}): "
        f"{summary}"
    )
    return RangeProbe(int(moved.sum()), n, signature, message)
