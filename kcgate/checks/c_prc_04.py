"""C-PRC-04 check: low-precision outputs are correctly rounded (RNE) and not biased.

Two measurements against the fp64 oracle, in units of the output dtype's ulp at each element:
|out − ref| ≤ ½ ulp + the compute precision's slack (exactly what RNE of the exact value achieves), and
the mean signed error toward zero, which RNE keeps near 0 and truncation pushes to −½ ulp.
"""

from __future__ import annotations

import math

import torch

from kcgate import dtypes
from kcgate.checks import Finding, trials, verdict
from kcgate.checks.c_support import fold
from kcgate.harness import CaseContext, Trial
from kcgate.metrics import compare, to_metrics
from kcgate.signatures import sig


def check(ctx: CaseContext) -> Finding:
    ts = trials(ctx)
    for t in ts:
        _rounding_metrics(ctx, t)
    finding = verdict(ctx, ts)
    bias = _bias_budget(ctx, ts)
    message = (
        f"outputs are biased toward zero: mean error {bias[1]:+.3f} ulp (round-to-nearest-even keeps it ~0)"
    )
    signature = sig(
        "biased-rounding",
        f"rounds toward zero, not to nearest even (mean error {bias[1]:+.3f} ulp)",
        mean_error_ulp=round(bias[1], 4),
    )
    return fold(finding, bias[0], signature, message, {"bias_budget": bias[0]})


def out_ulp(ref: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """The output format's ulp at |ref| (normal range; subnormals use the smallest normal's ulp)."""
    fmt = dtypes.FORMATS[str(out_dtype).removeprefix("torch.")]
    tiny = torch.finfo(out_dtype).tiny
    e = torch.floor(torch.log2(ref.abs().clamp_min(tiny)))
    return torch.pow(2.0, e - (fmt.p - 1))


def _rounding_metrics(ctx: CaseContext, t: Trial) -> None:
    if t.cmp is None or t.out is None:
        return
    ref = t.cmp.ref
    ulp = out_ulp(ref, t.out.dtype)
    # the compute precision's own error (a few roundings of |y|, or of |x| where 1 + erf(x) style
    # terms cancel), converted to output ulps: RNE can only be pinned down to that
    scale = ref.abs()
    x = t.inputs[0]
    if x.is_floating_point() and x.shape == ref.shape:
        scale = torch.maximum(scale, x.to(torch.float64).abs())
    slack = 8 * dtypes.unit_roundoff(ctx.contract.accumulate) * scale / ulp
    allowed = (0.5 + slack) * ulp
    t.cmp = compare(t.out, ref, allowed, "error-bound")
    t.metrics = to_metrics(t.cmp, dict(t.metrics.extra))


def _bias_budget(ctx: CaseContext, ts: list[Trial]) -> tuple[float, float]:
    """(budget, mean error in ulps): the allowed |mean| is λ·σ/√n with σ = 1/√12 ulp for uniform rounding."""
    errs = []
    for t in ts:
        if t.cmp is None or t.out is None:
            continue
        d = (t.cmp.signed * t.cmp.ref.sign() / out_ulp(t.cmp.ref, t.out.dtype)).flatten()
        errs.append(d[d.isfinite() & (t.cmp.ref.flatten() != 0)])
    if not errs:
        return 0.0, 0.0
    d = torch.cat(errs)
    if d.numel() == 0:
        return 0.0, 0.0
    mean = float(d.mean())
    allowed = ctx.contract.tolerance.lam / math.sqrt(12 * d.numel()) + 1e-3
    return abs(mean) / allowed, mean
