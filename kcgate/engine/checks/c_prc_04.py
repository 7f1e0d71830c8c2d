"""C-PRC-04 check: low-precision outputs are correctly rounded (RNE), not biased, and overflow as declared.

Only an output rounded from a wider computation (``rounded_from_wider``: the output dtype coarser than the
accumulator) is judged on its rounding; an fp32 output of an fp32 computation gets the family's bound alone
(``rounding_judged = 0`` in its metrics).

Two measurements against the fp64 oracle, in units of the output dtype's ulp at each element:
|out − ref| ≤ max(½ ulp + the compute precision's slack, the family's bound) (RNE of the exact value
achieves the first; a correct kernel that rounds an intermediate to the output dtype, as eager 16-bit code
does, the second), and the mean signed distance toward zero from the correctly rounded value RNE(ref),
which is ~0 for RNE and −½ ulp for truncation: that bias, not a per-element ulp count, is what tells a
truncating downcast from a correct one. fp8 outputs add the overflow probe (``c_prc_04_overflow``): outputs whose exact
value lies beyond the format's range must give the declared ``overflow`` result.
"""

from __future__ import annotations

import math

import torch

from kcgate.engine.checks import Finding, trials, verdict
from kcgate.engine.checks import c_prc_04_overflow as overflow
from kcgate.engine.checks.c_support import fold, out_ulp, rne, rounding_slack
from kcgate.engine.diagnosis import sig
from kcgate.engine.trial import CaseContext, Trial
from kcgate.numerics.metrics import compare, to_metrics


def check(ctx: CaseContext) -> Finding:
    ts = trials(ctx)
    if not rounded_from_wider(ctx):
        # an fp32 result of an fp32 computation is not a rounding of a wider value: no ½ ulp to hold it to,
        # and a correct formula's few-ulp error is not biased rounding; the family's bound (the class's
        # default tolerance) judges it
        finding = verdict(ctx, ts)
        return fold(finding, 0.0, None, "", {"rounding_judged": 0.0})
    for t in ts:
        _rounding_metrics(ctx, t)
    probe = overflow.probe(ctx)
    finding = verdict(ctx, ts + ([probe.trial] if probe else []))
    bias = _bias_budget(ctx, ts)
    message = (
        f"outputs are biased toward zero: mean error {bias[1]:+.3f} ulp (round-to-nearest-even keeps it ~0)"
    )
    signature = sig(
        "biased-rounding",
        f"rounds toward zero, not to nearest even (mean error {bias[1]:+.3f} ulp)",
        mean_error_ulp=round(bias[1], 4),
    )
    finding = fold(finding, bias[0], signature, message, {"bias_budget": bias[0]})
    if probe is None:
        return finding
    return fold(finding, probe.budget, probe.signature, probe.message, probe.extra)


def rounded_from_wider(ctx: CaseContext) -> bool:
    """Whether the output is a low-precision rounding of a wider computation (bf16, fp16 or fp8 out of an
    fp32 accumulator): only then is "rounded to nearest even, unbiased" a property of the kernel."""
    ba = ctx.bound_args()
    return ba.u_out > ba.u_acc


def _rounding_metrics(ctx: CaseContext, t: Trial) -> None:
    """Each element within ½ ulp + slack of the exact value, or within the contract's own allowance (the
    family's bound by default) where that is larger: a kernel that rounds an intermediate to the output
    dtype (eager bf16 ``x * sigmoid(x)``, a tiled fp16 GEMM storing partial sums) is correct at 1-3 ulps."""
    if t.cmp is None or t.out is None:
        return
    ref = t.cmp.ref
    ulp = out_ulp(ref, t.out.dtype)
    allowed = torch.maximum(0.5 * ulp + rounding_slack(ctx, t.inputs, ref), _contract_allowance(ctx, t, ulp))
    t.cmp = compare(t.out, ref, allowed, "error-bound")


def _contract_allowance(ctx: CaseContext, t: Trial, ulp: torch.Tensor) -> torch.Tensor:
    """The contract's per-element allowance as an absolute error: the trial's own for the absolute methods
    (error-bound, abs-rel, relative), ``ulp`` ulps of the output for the ulp method, nothing for exact."""
    assert t.cmp is not None
    method = ctx.contract.tolerance.method
    if method == "ulp":
        return ctx.contract.tolerance.ulp * ulp
    if method == "exact":
        return torch.zeros_like(ulp)
    return t.cmp.allowed.to(torch.float64)
    t.metrics = to_metrics(t.cmp, dict(t.metrics.extra))


# The mean error a correct kernel may carry, in ulps: one that rounds an intermediate to the output dtype
# and then the result (eager bf16 ``x * sigmoid(x)``: −0.0057 ulp bf16, +0.0045 fp16 over 4M inputs) is
# off RNE(ref) by an ulp on a quarter of its elements, not symmetrically. A wrong rounding direction is
# 0.5 ulp (truncation), 16× this.
BIAS_FLOOR = 1 / 32


def _bias_budget(ctx: CaseContext, ts: list[Trial]) -> tuple[float, float]:
    """(budget, mean error in ulps): the mean of (out − RNE(ref))·sign(ref)/ulp, in-range elements only;
    the allowed |mean| is λ·σ/√n + BIAS_FLOOR with σ the larger of the errors' own spread and 1/√12 ulp
    (uniform rounding): a kernel off RNE(ref) by ±1 ulp on a quarter of its elements spreads 0.5 ulp.

    Measured from RNE(ref) rather than from ref: on a coarse grid (fp8) the values are not uniform
    within an ulp, so even correct rounding has a mean error; its excess over RNE does not."""
    errs = []
    for t in ts:
        if t.cmp is None or t.out is None:
            continue
        ref = t.cmp.ref
        d = (
            (t.out.to(torch.float64) - rne(ref, t.out.dtype)) * ref.sign() / out_ulp(ref, t.out.dtype)
        ).flatten()
        in_range = ref.abs().flatten() <= torch.finfo(t.out.dtype).max
        errs.append(d[d.isfinite() & (ref.flatten() != 0) & in_range])
    if not errs:
        return 0.0, 0.0
    d = torch.cat(errs)
    if d.numel() == 0:
        return 0.0, 0.0
    mean = float(d.mean())
    sigma = max(float(d.std()) if d.numel() > 1 else 0.0, 1 / math.sqrt(12))
    allowed = ctx.contract.tolerance.lam * sigma / math.sqrt(d.numel()) + BIAS_FLOOR
    return abs(mean) / allowed, mean
