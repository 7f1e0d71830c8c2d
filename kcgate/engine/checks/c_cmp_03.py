"""C-CMP-03 check: fresh inputs on every trial at the declared shapes (a stale buffer shows as an output
equal to an earlier one), plus held-out shapes drawn across the shape class (kcgate.contracts.shape_class): its
extremes on every seed, then ``held_out`` shapes (small, large, powers of two ± 1, tile boundaries).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from kcgate.contracts import shape_class
from kcgate.contracts.records import Contract
from kcgate.engine.checks import Finding, trials, verdict
from kcgate.engine.diagnosis import sig
from kcgate.engine.harness import run_trial
from kcgate.engine.trial import CaseContext, Trial, reference_rejects
from kcgate.numerics.metrics import merge_metrics
from kcgate.results.model import Status
from kcgate.vocab.catalogue import CATALOGUE, dims_of
from kcgate.vocab.causes import ISSUE_MESSAGES


def check(ctx: CaseContext) -> Finding:
    declared = trials(ctx)
    first = verdict(ctx, declared)
    if first.status != Status.PASS:
        return first
    shapes = held_out_shapes(ctx)
    # a held-out shape the user's own generator or reference rejects is skipped, never the kernel's failure
    probed = [(s, reference_rejects(ctx, s)) for s in shapes]
    notes = [why for _, why in probed if why]
    shapes = [s for s, why in probed if not why]
    held = [run_trial(ctx, shape=s, salt=("held-out", i)) for i, s in enumerate(shapes)]
    bad = [t for t in held if not t.ok]
    if (
        not bad
    ):  # the verdict is the declared shapes' (a held-out shape may be one with no signal, e.g. vocab 1)
        metrics = merge_metrics([t.metrics for t in declared + held])
        extra = (
            *first.metrics.extra,
            ("held_out_shapes", float(len(held))),
            *((("held_out_skipped", float(len(notes))),) if notes else ()),
        )  # the shapes the verdict covered
        message = "; ".join(filter(None, (first.message, *notes[:2])))
        return replace(first, metrics=replace(metrics, extra=extra), message=message)
    finding = verdict(ctx, declared + bad)
    if finding.signature and finding.signature.cause in (*ISSUE_MESSAGES, "excess-error"):
        return finding  # an integrity issue is named before the shape
    return _overfitting(ctx, finding, bad)


def _overfitting(ctx: CaseContext, finding: Finding, bad: list[Trial]) -> Finding:
    """The declared shapes pass, held-out shapes do not: name them, with what went wrong at the first."""
    names = ", ".join(shape_class.describe(t.shape) for t in bad[:3])
    more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
    first = bad[0]
    why = _why(first)
    return replace(
        finding,
        status=Status.FAIL,
        signature=sig(
            "shape-overfitting",
            f"passes at {shape_class.describe(ctx.case.shape)}, fails at held-out shape(s) {names}{more}: {why}",
            held_out_failed=float(len(bad)),
            declared=shape_class.describe(ctx.case.shape),
            failing_shape=shape_class.describe(first.shape),
        ),
        message=f"fails at held-out shape {shape_class.describe(first.shape)}: {why}",
    )


def _why(t: Trial) -> str:
    if t.error:
        return f"the kernel raised {t.error}"
    if t.issues:
        return "; ".join(ISSUE_MESSAGES.get(i, i) for i in t.issues)
    b = t.metrics.budget_used
    return f"budget used {'inf' if b is None else f'{b:.3g}'}"


def constraints(ctx: CaseContext) -> shape_class.Constraints:
    """The family's shape constraints, the contract's, its shape class's dimensions, and the relations every
    declared shape keeps between the catalogue's related dimensions (``implied``), merged."""
    c = ctx.contract
    names = dims_of(c.op)  # family constraints name dimensions by letter (multiple_of(kv_heads))
    parts = [
        {str(i): text for i, text in ctx.op.shape_constraints.items()},
        {str(i): text for i, text in c.shape_constraints},
        {str(i): text for i, text in c.shape_class},
    ]
    return shape_class.merge(*(shape_class.parse(p, names, None) for p in parts), implied(ctx))


def implied(ctx: CaseContext) -> shape_class.Constraints:
    """Relations the declared shapes all show (H = H_kv: multi-head, never grouped-query) that the contract's
    own shape_class and shape_constraints leave unsaid: held-out shapes keep them (docs/classes/C-CMP-03.md)."""
    c = ctx.contract
    names = list(dims_of(c.op) or ())
    entry = CATALOGUE.get(c.op)
    if entry is None or not names:
        return {}
    pairs = [(names.index(a), names.index(b)) for a, b in entry.related if a in names and b in names]
    named = {i for i, _ in c.shape_class} | {i for i, _ in c.shape_constraints}
    named |= {t.ref for terms in _user_terms(c, names).values() for t in terms if t.ref >= 0}
    declared = list(c.shapes) or list(entry.default_shapes) or [ctx.case.shape]
    return shape_class.implied(declared, pairs, named)


def _user_terms(c: Contract, names: list[str]) -> shape_class.Constraints:
    parts = [{str(i): text for i, text in c.shape_constraints}, {str(i): text for i, text in c.shape_class}]
    return shape_class.merge(*(shape_class.parse(p, names, None) for p in parts))


def held_out_shapes(ctx: CaseContext) -> list[tuple[int, ...]]:
    """The class's extremes, then ``held_out`` shapes drawn across it; reproducible from the case seed."""
    n = held_out_count(ctx)
    seed = int(torch.randint(0, 2**62, (1,), generator=ctx.generator("held-out")))
    cap = ctx.contract.max_elements or shape_class.MAX_ELEMENTS
    q_len = int(dict(ctx.contract.params).get("q_len", 0) or 0)
    return shape_class.held_out(ctx.case.shape, constraints(ctx), n, seed, cap, cost(ctx.contract.op, q_len))


def held_out_count(ctx: CaseContext) -> int:
    """``kcgate run --held-out`` if given, else the contract's ``protocol.held_out``, else its
    ``params.held_out`` (the class's default)."""
    for n in (ctx.case.held_out, ctx.contract.protocol.held_out):
        if n is not None:
            return int(n)
    return int(ctx.contract.param("held_out"))


# Families whose work grows with a dimension squared (attention's L x L scores): that dimension counts again,
# over 16, in the affordability cap, so an extreme length stays affordable on a 2-core CPU.
QUADRATIC = {"sdpa": "length", "attention": "length"}


def cost(op: str, q_len: int = 0) -> Callable[[Sequence[int]], float]:
    """The cost a held-out shape is capped by: the product of its dims (x length / 16 for attention). An
    attention with its own query length (``params.q_len``, fixed whatever the shape) counts it where it
    exceeds the keys' length: q and the scores grow with it (256 x 64 heads of 131 queries over one key, at
    head_dim 106, were 1.8 GB a tensor in fp64 under a cap the keys' length of 1 let through)."""
    names = dims_of(op) or ()
    if op not in QUADRATIC or QUADRATIC[op] not in names:
        return math.prod
    i = list(names).index(QUADRATIC[op])
    return lambda s: math.prod(s) * max(s[i], 16) / 16 * max(1.0, q_len / max(s[i], 1))
