"""C-CMP-03 check: fresh inputs on every trial at the declared shapes (a stale buffer shows as an output
equal to an earlier one), plus ``held_out`` shapes drawn around them from the same shape class.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from kcgate.checks import Finding, trials, verdict
from kcgate.harness import CaseContext, run_trial
from kcgate.signatures import sig


def check(ctx: CaseContext) -> Finding:
    declared = trials(ctx)
    first = verdict(ctx, declared)
    if first.status != "pass":
        return first
    shapes = held_out_shapes(ctx)
    held = [run_trial(ctx, shape=s, salt=("held-out", i)) for i, s in enumerate(shapes)]
    finding = verdict(ctx, declared + held)
    if finding.status != "fail" or (
        finding.signature and finding.signature.cause in ("stale-output", "excess-error")
    ):
        return finding
    bad = [t.shape for t in held if not t.ok]
    return replace(
        finding,
        signature=sig(
            "shape-overfitting",
            f"passes at {tuple(ctx.case.shape)}, fails at held-out shape(s) "
            f"{', '.join('x'.join(map(str, s)) for s in bad[:3])}",
            held_out_failed=float(len(bad)),
            declared="x".join(map(str, ctx.case.shape)),
        ),
    )


def held_out_shapes(ctx: CaseContext) -> list[tuple[int, ...]]:
    """Shapes near the declared one (odd sizes, ±1, halves, doubles): same class, not the benchmark."""
    gen = ctx.generator("held-out")
    out = []
    for _ in range(int(ctx.contract.param("held_out"))):
        shape = []
        for d in ctx.case.shape:
            choices = [max(1, d - 1), d + 1, max(1, d // 2 + 1), 2 * d - 1]
            shape.append(choices[int(torch.randint(0, len(choices), (1,), generator=gen))])
        out.append(tuple(shape))
    return out
