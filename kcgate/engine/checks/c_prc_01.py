"""C-PRC-01 check: within the declared accumulator's bound, plus a K sweep that fits the effective
accumulator width for the signature ("behaves like an fp16 accumulator").
"""

from __future__ import annotations

from dataclasses import replace

from kcgate.engine.accumulator import _accumulator
from kcgate.engine.backward import GRAD_REDUCTION
from kcgate.engine.checks import Finding, named, trials, verdict
from kcgate.engine.checks.c_support import SHAPE_K
from kcgate.engine.harness import run_trial
from kcgate.engine.trial import CaseContext, Trial, severity
from kcgate.results.model import Status

DEFAULT_SWEEP = (64, 256, 1024)


def check(ctx: CaseContext) -> Finding:
    ts = trials(ctx)
    finding = verdict(ctx, ts)
    if finding.status != Status.FAIL or ctx.op.name not in SHAPE_K or named(finding):
        return finding  # an integrity finding or a structural pattern is named before any accumulator fit
    dim = _sweep_dim(ctx, ts)
    sweep = [
        run_trial(ctx, _with_len(ctx.case.shape, dim, k), salt=("k", k))
        for k in ctx.contract.protocol.k_sweep or DEFAULT_SWEEP
    ]

    sig = _accumulator(ctx, [t for t in ts + sweep if t.cmp is not None])
    return replace(finding, signature=sig) if sig else finding


def _sweep_dim(ctx: CaseContext, ts: list[Trial]) -> int:
    """The shape dimension to sweep: the forward reduction (K), or the reduction of the gradient that decides
    the worst trial (dA = dY·Bᵀ sums over N), so the fit sees that reduction's length change."""
    worst = max(ts, key=severity)
    dims = GRAD_REDUCTION.get(ctx.op.name, {})
    return dims[worst.grad] if worst.grad in dims else SHAPE_K[ctx.op.name]


def _with_len(shape: tuple[int, ...], dim: int, k: int) -> tuple[int, ...]:
    s = list(shape)
    s[dim] = k
    return tuple(s)
