"""C-ORD-02 check: ``repeats`` identical calls on the same inputs, compared at the declared level:
bitwise (any differing bit fails), bounded (within twice the error bound), or none (accuracy only).
"""

from __future__ import annotations

import torch

from kcgate.engine.checks import Finding, verdict
from kcgate.engine.checks.c_support import bitwise_budget, fold
from kcgate.engine.diagnosis import sig
from kcgate.engine.harness import bit_pattern, run_trial
from kcgate.engine.trial import CaseContext, Trial
from kcgate.results.model import Status


def check(ctx: CaseContext) -> Finding:
    xs = ctx.inputs(ctx.case.shape, "repeat")
    repeats = max(int(ctx.contract.param("repeats")), 2)
    ts = [run_trial(ctx, inputs=xs) for _ in range(repeats)]  # same inputs on purpose: no stale check
    finding = verdict(ctx, ts)
    level = str(ctx.contract.param("level"))
    if level == "none" or finding.status == Status.ERROR:
        return finding
    budget, differing, where = _spread(ts, level)
    of = f" in the gradient of {where!r}" if where != "out" else ""
    signature = sig(
        "nondeterminism",
        f"{differing} element(s){of} differ across {repeats} identical calls "
        f"({'bitwise' if level == 'bitwise' else 'beyond the bound'})",
        differing=float(differing),
        repeats=float(repeats),
        level=level,
        **({"grad": where} if where != "out" else {}),
    )
    return fold(
        finding,
        budget,
        signature,
        f"identical calls disagree ({level} determinism declared)",
        {"determinism_budget": budget},
    )


def _spread(ts: list[Trial], level: str) -> tuple[float, int, str]:
    """The worst disagreement over every compared tensor: the output and, for a backward contract,
    each input gradient (an atomic-add dW or dbias differs from call to call); and that tensor's name."""
    done = [t for t in ts if t.out is not None]
    if len(done) < 2:
        return 0.0, 0, "out"
    worst = (0.0, 0, "out")
    for name in done[0].tensors or ["out"]:
        b, d = _spread_of(done, name, level)
        if (b, d) > worst[:2]:
            worst = (b, d, name)
    return worst


def _spread_of(ts: list[Trial], name: str, level: str) -> tuple[float, int]:
    outs = [t.tensors.get(name, t.out) if t.tensors else t.out for t in ts]
    first, cmp0 = outs[0], ts[0].cmps.get(name, ts[0].cmp)
    budget, differing = 0.0, 0
    for out in outs[1:]:
        assert out is not None and first is not None
        same = (out == first) | (out.isnan() & first.isnan())
        if level == "bitwise":  # any differing bit: -0.0 against 0.0 too (the budget already says so)
            same = (bit_pattern(out) == bit_pattern(first)) | (out.isnan() & first.isnan())
        differing = max(differing, int((~same).sum()))
        if level == "bitwise":
            budget = max(budget, bitwise_budget(out, first))
        elif cmp0 is not None:
            allowed = 2 * cmp0.allowed.to(torch.float64).expand(first.shape)
            d = (out.to(torch.float64) - first.to(torch.float64)).abs()
            budget = max(budget, float((d / allowed.clamp_min(1e-300)).nan_to_num(0.0).max()))
    return budget, differing
