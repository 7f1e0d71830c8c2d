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
    reps = _repeats(ts)
    sweep = [
        run_trial(ctx, _with_len(ctx.case.shape, dim, k), salt=("k", k) if r == 0 else ("k", k, r))
        for k in ctx.contract.protocol.k_sweep or DEFAULT_SWEEP
        for r in range(reps)
    ]

    sig = _accumulator(ctx, [t for t in ts + sweep if t.cmp is not None])
    return replace(finding, signature=sig) if sig else finding


SWEEP_ELEMENTS = (
    32  # output elements each sweep length is measured on at least (a boundary shape's 3 rows: 11 trials)
)
SWEEP_REPEATS = 16  # trials per length at most


def _repeats(ts: list[Trial]) -> int:
    """Trials per sweep length: one, or as many as give SWEEP_ELEMENTS output elements where the case's output
    is smaller (a row sum over 3 rows measures its error on 3 elements: too few for the fit's curve)."""
    n = min((t.cmp.err.numel() for t in ts if t.cmp is not None), default=SWEEP_ELEMENTS)
    return min(SWEEP_REPEATS, -(-SWEEP_ELEMENTS // max(n, 1)))


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
