"""C-ORD-03 check: each sampled row computed alone, at a reversed position and with other batch-mates
must match the same row of the full batch (bitwise, or within twice the bound when ``level = bounded``).
"""

from __future__ import annotations

import torch

from kcgate.engine.checks import Finding, verdict
from kcgate.engine.checks.c_support import bitwise_budget, fold
from kcgate.engine.diagnosis import sig
from kcgate.engine.harness import run_trial
from kcgate.engine.trial import CaseContext, Trial
from kcgate.results.model import Status


def check(ctx: CaseContext) -> Finding:
    xs = ctx.inputs(ctx.case.shape, "batch")
    full = run_trial(ctx, inputs=xs)
    finding = verdict(ctx, [full])
    if full.out is None or finding.status == Status.ERROR:
        return finding
    out = full.tensors.get("out", full.out)
    n = out.shape[0]
    budget, where = 0.0, ""
    for name, rows in variants(ctx, n):
        dy = full.dy[rows] if full.dy is not None else None  # backward: the same rows of dY
        sub = run_trial(ctx, inputs=ctx.op.slice_rows(xs, rows), dy=dy)
        for tensor, mine, theirs in _row_pairs(ctx, sub, full):
            b = _budget(ctx, mine, theirs[rows], full, tensor)
            if b > budget:
                budget, where = b, name if tensor == "out" else f"{name}, gradient of {tensor!r}"
    signature = sig(
        "batch-dependence",
        f"a row's result changes with the batch ({where})",
        batch_budget=budget,
        variant=where,
    )
    return fold(
        finding, budget, signature, f"rows differ from the full batch ({where})", {"batch_budget": budget}
    )


def variants(ctx: CaseContext, n: int) -> list[tuple[str, torch.Tensor]]:
    """(name, row indices): alone, reversed order (positions), and two halves (other batch-mates)."""
    gen = ctx.generator("batch-rows")
    pick = int(torch.randint(0, n, (1,), generator=gen))
    out = [("batch size 1", torch.tensor([pick])), ("reversed positions", torch.arange(n).flip(0))]
    if n >= 4:
        perm = torch.randperm(n, generator=gen)
        out.append(("other batch-mates", perm[: n // 2]))
    return out


def _row_pairs(ctx: CaseContext, sub: Trial, full: Trial) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, sub-batch tensor, full-batch tensor) for the output and, for a backward contract, the
    gradient of every batch input (its rows belong to the rows; a weight's gradient sums over them)."""
    if sub.out is None or full.out is None:
        return []
    pairs = [("out", sub.tensors.get("out", sub.out), full.tensors.get("out", full.out))]
    for i in ctx.op.batch_inputs:
        name = ctx.op.input_name(i)
        if name in sub.tensors and name in full.tensors:
            pairs.append((name, sub.tensors[name], full.tensors[name]))
    return pairs


def _budget(
    ctx: CaseContext, sub: torch.Tensor, ref_rows: torch.Tensor, full: Trial, name: str = "out"
) -> float:
    if str(ctx.contract.param("level")) == "bitwise":
        return bitwise_budget(sub, ref_rows)
    cmp = full.cmps.get(name, full.cmp)
    assert cmp is not None
    d = (sub.to(torch.float64) - ref_rows.to(torch.float64)).abs()
    return float((d / (2 * cmp.allowed.max().clamp_min(1e-300))).max())
