"""C-EXC-01 check: NaN and ±Inf planted in fresh inputs must propagate as IEEE arithmetic (the fp64
oracle) says; a subnormal-scaled trial checks that subnormals are kept when ``subnormals = keep``.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from kcgate.checks import Finding, trials, verdict
from kcgate.harness import CaseContext, Trial, allowance, run_trial
from kcgate.metrics import compare, to_metrics
from kcgate.signatures import sig


def check(ctx: CaseContext) -> Finding:
    clean = trials(ctx, 1)
    ts = list(clean)
    if str(ctx.contract.param("nan")) == "propagate":
        ts.append(_finite_bound(ctx, run_trial(ctx, inputs=poisoned(ctx, ctx.inputs(ctx.case.shape, "nan")))))
    sub = None
    if str(ctx.contract.param("subnormals")) == "keep" and ctx.dtype in (torch.float32, torch.float64):
        sub = run_trial(ctx, inputs=subnormal(ctx, ctx.inputs(ctx.case.shape, "sub")), salt="sub")
        ts.append(sub)
    finding = verdict(ctx, ts)
    if finding.status == "fail" and sub is not None and not sub.ok and all(t.ok for t in ts if t is not sub):
        return replace(
            finding,
            signature=sig(
                "subnormal-flush",
                "subnormal inputs flushed to zero (declared: keep)",
                budget_used=sub.metrics.budget_used or "inf",
            ),
        )
    return finding


def _finite_bound(ctx: CaseContext, t: Trial) -> Trial:
    """Re-measure with the bound of the finite inputs: an Inf input would make the bound Inf (or NaN),
    and a category change (NaN swallowed) must count as an infinite error, not as inf/inf."""
    if t.cmp is None or t.out is None:
        return t
    finite = tuple(
        torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0) if x.is_floating_point() else x for x in t.inputs
    )
    t.cmp = compare(
        t.out,
        t.cmp.ref,
        allowance(ctx, finite, t.cmp.ref.nan_to_num(0.0, 0.0, 0.0)),
        ctx.contract.tolerance.method,
    )
    t.metrics = to_metrics(t.cmp, dict(t.metrics.extra))
    return t


def poisoned(ctx: CaseContext, xs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Plant one NaN, one +Inf, and a +Inf/−Inf pair in separate rows of the first float input."""
    x = xs[0].clone()
    if not x.is_floating_point() or x.dim() < 2 or x.shape[0] < 4:
        return xs
    gen = ctx.generator("nan-rows")
    rows = torch.randperm(x.shape[0], generator=gen)[:3].tolist()
    col = lambda: int(torch.randint(0, x.shape[-1], (1,), generator=gen))  # noqa: E731
    x[rows[0], ..., col()] = float("nan")
    x[rows[1], ..., col()] = float("inf")
    x[rows[2], ..., 0] = float("inf")
    x[rows[2], ..., -1] = float("-inf")
    return (x, *xs[1:])


def subnormal(ctx: CaseContext, xs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The first input scaled into the subnormal range (its values stay distinct and non-zero)."""
    x = xs[0]
    scale = torch.finfo(x.dtype).tiny * 2.0**-8
    return ((x.to(torch.float64) * scale).to(x.dtype), *xs[1:])
