"""C-PRC-03 check: within the bound for exact operands (or for declared ``operand_bits``); a failure is
diagnosed by re-running the oracle on operands rounded to 11 and 8 bits.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from kcgate.engine.accumulator import operand_signature
from kcgate.engine.checks import Finding, named, trials, verdict
from kcgate.engine.trial import CaseContext, Trial, allowance, severity
from kcgate.numerics.metrics import compare, to_metrics
from kcgate.results.model import Status
from kcgate.vocab.catalogue import has


def check(ctx: CaseContext) -> Finding:
    ts = trials(ctx)
    bits = int(ctx.contract.param("operand_bits"))
    if bits:
        ts = [_widen(ctx, t, 2.0**-bits) for t in ts]
    # the sensitivity gate models the accumulator, not declared operand rounding: off when it is declared
    finding = verdict(ctx, ts, excess=not bits)
    if finding.status != Status.FAIL or named(finding):
        return finding
    worst = max((t for t in ts if t.cmp is not None), key=severity)
    assert worst.out is not None and worst.cmp is not None
    found = operand_signature(worst.out, worst.cmp.ref, worst.inputs, ctx.op.oracle, ctx.op.float_inputs)
    return replace(finding, signature=found) if found else finding


def _widen(ctx: CaseContext, t: Trial, u_op: float) -> Trial:
    """Declared operand rounding adds 2·u_op·(|A||B|) (both operands rounded once) to the allowance."""
    if t.cmp is None or t.out is None or not has(ctx.op.name, "plain_product"):
        return t
    a, b = (x.to(torch.float64) for x in t.inputs[:2])
    allowed = allowance(ctx, t.inputs, t.cmp.ref) + 2 * u_op * (a.abs() @ b.abs())
    t.cmp = compare(t.out, t.cmp.ref, allowed, ctx.contract.tolerance.method)
    t.metrics = to_metrics(t.cmp, dict(t.metrics.extra))
    return t
