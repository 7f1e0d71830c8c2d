"""Shrink a failure: once a case fails, the smallest shape (fewest elements) found within a time bound that
still fails with the same cause, on the case's own seed. ``kcgate run`` records it in the results
(``shrunk_shape``), prints it and the PR comment shows it with the exact ``kcgate run`` command
(``repro_command``) that reruns the kernel at that shape.

The search is greedy and bounded (``Case.shrink_s`` seconds, MAX_TRIES class checks): each dimension in turn,
largest first, takes the smallest of a few candidate values below its size (the family's smallest sizes, a few
grid steps above them, halvings, one step down) at which the whole class check still fails with the same
cause; two passes, since a smaller dimension can let another shrink. Every candidate respects the family's
and the contract's shape constraints and the relations of the failing shape (kcgate.plan.relate_shape).
A tail bug is not monotone in n (1021 fails, 1024 passes), so candidates are tried from the smallest up.

Then, at the smallest shape (or the case's own where none is smaller), ``fewest_nonzero`` searches for the
fewest nonzero input elements that still fail with the same cause: the first trial's inputs, with their
floating-point elements set to 0 in halves, quarters, ... (delta debugging), one trial's verdict per
candidate, bounded by what the shape search left of the time (at least half of it) and MAX_TRIES. The
results record ``(nonzero, elements)`` (``shrunk_nonzero``): a softmax that reads 0 past n fails on all-zero
rows (0 nonzero), which says the bug is in the masking, not in the arithmetic. Index inputs are kept.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

from kcgate.contracts import shape_class
from kcgate.plan import relate_shape
from kcgate.results.model import Status

Shrunk = tuple[tuple[int, ...], tuple[int, ...]]  # (smallest shape, (nonzero input elements, elements))

NO_SHRINK = ("C-CMP-03",)  # its failure is already a search over shapes (the held-out shape is named)
MAX_TRIES = 64
PASSES = 2
SMALLEST = 6  # grid values tried from the smallest up before the halvings


def shrink(ctx: Any, finding: Any, check: Any) -> tuple[int, ...]:
    """The smallest shape found that fails with ``finding``'s cause (``check``: the class check), or () where
    none smaller does or the case is not shrunk (no time given, no cause, C-CMP-03)."""
    budget = getattr(ctx.case, "shrink_s", 0.0)
    sig = finding.signature
    if budget <= 0 or finding.status != Status.FAIL or sig is None or ctx.contract.klass in NO_SHRINK:
        return ()
    from kcgate.engine.checks.c_cmp_03 import constraints

    try:
        cons = constraints(ctx)
    except shape_class.ShapeSyntaxError:
        return ()
    start = tuple(ctx.case.shape)
    doms = [shape_class.domain(d, cons.get(i, ())) for i, d in enumerate(start)]
    deadline = time.perf_counter() + budget
    best, tries = start, 0
    for _ in range(PASSES):
        moved = False
        for i in sorted(range(len(best)), key=lambda j: -best[j]):
            for v in candidates(best[i], doms[i]):
                if time.perf_counter() > deadline or tries >= MAX_TRIES:
                    return best if best != start else ()
                shape = relate_shape([v if j == i else d for j, d in enumerate(best)], best, cons)
                if shape is None or math.prod(shape) >= math.prod(best):
                    continue
                tries += 1
                if _fails_alike(ctx, shape, sig.cause, check, finding.metrics.worst_output):
                    best, moved = shape, True
                    break
        if not moved:
            break
    return best if best != start else ()


def candidates(n: int, dom: shape_class.Domain) -> list[int]:
    """Values below n to try for one dimension, smallest first."""
    if dom.pow2:
        vals = [v for v in dom.values() if v < n]
    else:
        first = dom.first()
        vals = [first + k * dom.step for k in range(SMALLEST)]
        m = n
        while m > first:
            m = dom.snap(m // 2)
            vals.append(m)
            if m <= first:
                break
        vals.append(dom.snap(n - dom.step))
    return sorted({v for v in vals if dom.ok(v) and v < n})


def shrink_case(ctx: Any, finding: Any, check: Any) -> Shrunk:
    """The smallest failing shape (``shrink``), then the fewest nonzero inputs that fail alike at it."""
    budget = getattr(ctx.case, "shrink_s", 0.0)
    if budget <= 0 or finding.status != Status.FAIL or finding.signature is None:
        return (), ()
    t0 = time.perf_counter()
    shape = shrink(ctx, finding, check)
    left = max(budget - (time.perf_counter() - t0), budget / 2)
    output = finding.metrics.worst_output  # of several outputs, the same one must fail
    nonzero = fewest_nonzero(ctx, shape or tuple(ctx.case.shape), finding.signature.cause, left, output)
    return shape, nonzero


def fewest_nonzero(
    ctx: Any, shape: tuple[int, ...], cause: str, seconds: float, output: str = ""
) -> tuple[int, ...]:
    """``(nonzero, elements)``: the fewest nonzero floating-point input elements found at ``shape`` whose
    single trial still fails with ``cause`` (in ``output``, of several); () where the first trial's own inputs do not fail so (a class's
    own measurement named the cause) or no element could be zeroed."""
    import torch

    from kcgate.engine.checks import verdict
    from kcgate.engine.harness import run_trial

    small = _at(ctx, shape)
    deadline = time.perf_counter() + seconds
    xs = small.inputs(shape, 0)
    floats = [i for i, x in enumerate(xs) if x.is_floating_point()]
    sizes = [xs[i].numel() for i in floats]
    total = sum(sizes)
    tries = 0

    def fails(keep: list[int]) -> bool:
        nonlocal tries
        tries += 1
        mask = torch.zeros(total, dtype=torch.bool)
        mask[keep] = True
        parts = list(xs)
        for i, m in zip(floats, mask.split(sizes), strict=True):
            parts[i] = torch.where(m.view(xs[i].shape), xs[i], torch.zeros_like(xs[i]))
        try:
            found = verdict(
                small, [run_trial(small, inputs=tuple(parts), salt=("shrink", tries))], excess=False
            )
        except Exception:  # noqa: BLE001 — a kernel that raises on these inputs is another failure
            return False
        return _alike(found, cause, output)

    keep = [int(j) for j in torch.cat([xs[i].flatten() for i in floats]).nonzero().flatten()] if total else []
    if not keep or not fails(keep):
        return ()
    start = len(keep)
    chunk = len(keep)
    while chunk >= 1 and keep:
        removed = False
        at = 0
        while at < len(keep):
            if time.perf_counter() > deadline or tries >= MAX_TRIES:
                return (len(keep), total) if len(keep) < start else ()
            rest = keep[:at] + keep[at + chunk :]
            if fails(rest):
                keep, removed = rest, True
            else:
                at += chunk
        if not removed:
            chunk //= 2
        chunk = min(chunk, len(keep))
    return (len(keep), total) if len(keep) < start else ()


def _at(ctx: Any, shape: tuple[int, ...]) -> Any:
    """The case's context at another shape, with no shrinking of its own."""
    from kcgate.engine.trial import CaseContext

    return CaseContext(
        contract=ctx.contract,
        case=replace(ctx.case, shape=shape, shrink_s=0.0),
        kernel=ctx.kernel,
        op=ctx.op,
        device=ctx.device,
        synchronize=ctx.synchronize,
    )


def _fails_alike(ctx: Any, shape: tuple[int, ...], cause: str, check: Any, output: str = "") -> bool:
    small = _at(ctx, shape)
    try:
        found = check(small)
    except Exception:  # noqa: BLE001 — a kernel that raises at the smaller shape is another failure
        return False
    return _alike(found, cause, output)


def _alike(found: Any, cause: str, output: str) -> bool:
    """A failure with the same cause, in the same output where a case has several."""
    named = found.signature is not None and found.signature.cause == cause
    return found.status == Status.FAIL and named and found.metrics.worst_output == output
