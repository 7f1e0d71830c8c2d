"""C-ORD-01 check: the kernel on several valid reduction orders (the reduction axis permuted: identity,
reversed, random, sorted by magnitude), each within the bound, and their spread within twice the bound.
"""

from __future__ import annotations

import torch

from kcgate.engine.checks import Finding, verdict
from kcgate.engine.checks.c_support import REDUCTION_AXES, fold, permute_reduction
from kcgate.engine.diagnosis import sig
from kcgate.engine.harness import run_trial
from kcgate.engine.trial import CaseContext, Trial
from kcgate.results.model import Status


def check(ctx: CaseContext) -> Finding:
    base = ctx.inputs(ctx.case.shape, "orders")
    if ctx.op.name not in REDUCTION_AXES:
        return verdict(ctx, [run_trial(ctx, inputs=base)])
    ts = [run_trial(ctx, inputs=permute_reduction(ctx.op.name, base, p)) for p in orders(ctx, base)]
    finding = verdict(ctx, ts)
    spread = _spread_budget(ts)
    signature = sig(
        "order-dependence",
        f"results across {len(ts)} reduction orders differ by {spread:.3g}× "
        "twice the non-associativity bound",
        spread_budget=spread,
        orders=float(len(ts)),
    )
    if finding.status == Status.FAIL and finding.signature and finding.signature.cause == "exceeds-bound":
        finding = Finding(finding.status, finding.metrics, signature, finding.message)
    return fold(
        finding,
        spread,
        signature,
        "result depends on the reduction order beyond the bound",
        {"order_spread_budget": spread},
    )


def orders(ctx: CaseContext, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """identity, reversed, magnitude-sorted (descending, the stagnation-prone order), then random ones."""
    axis = REDUCTION_AXES[ctx.op.name][0]
    x = inputs[0]
    k = x.shape[axis]
    mags = x.to(torch.float64).abs().movedim(axis, -1).reshape(-1, k).sum(0)
    out = [torch.arange(k), torch.arange(k).flip(0), mags.argsort(descending=True)]
    gen = ctx.generator("orders")
    while len(out) < max(int(ctx.contract.param("orders")), 3):
        out.append(torch.randperm(k, generator=gen))
    return out


def _spread_budget(ts: list[Trial]) -> float:
    """max |r_i − r_0| / (2 · allowed): two results each within the bound differ by at most twice it."""
    # the forward output: a backward's gradients are permuted with their inputs, each checked in its trial
    done = [
        (t.tensors.get("out", t.out), t.cmps.get("out", t.cmp)) for t in ts if t.out is not None and t.cmp
    ]
    if len(done) < 2:
        return 0.0
    r0 = done[0][0].to(torch.float64)
    allowed = 2 * done[0][1].allowed.to(torch.float64).expand_as(r0)
    worst = 0.0
    for out, _ in done[1:]:
        d = (out.to(torch.float64) - r0).abs()
        ratio = torch.where(allowed > 0, d / allowed.clamp_min(1e-300), torch.where(d > 0, torch.inf, 0.0))
        worst = max(worst, float(torch.nan_to_num(ratio, nan=0.0).max()))
    return worst
