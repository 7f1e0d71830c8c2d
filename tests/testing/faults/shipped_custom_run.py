"""Runs tests/testing/faults/shipped_custom.py: per bug, dtype (fp32, bf16), shape (the declared one and the
boundary shape kcgate adds), seed and direction, the fixed kernel and the buggy one under kcgate's C-PRC-01
check (in process, as kcgate run's worker runs it) and under torch.testing.assert_close against the library's
reference (benchmarks/custom_ops.py's comparison: the reference on fp32-upcast inputs, cast to each output's
dtype, assert_close's default tolerances), side by side.

    python -m tests.testing.faults.shipped_custom_run [seeds] [bug ids] [--first-run]

(default: seeds 0 1, every bug, with the contract keys added after the first run; ``--first-run``: without)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import torch

from benchmarks.custom_ops import _close, _grads, upcast32
from kcgate.contracts.records import Contract, Protocol
from kcgate.engine.case import _with_grad
from kcgate.engine.checks import CHECKS
from kcgate.engine.trial import CaseContext, reference_rejects
from kcgate.numerics.ops.custom import custom_op
from kcgate.numerics.outputs import flat, multiple, raw
from kcgate.plan import Case, boundary_shapes
from tests.testing.faults.naming_sets import SAYS_LESS, SEEDS
from tests.testing.faults.shipped_custom import AFTER_FIRST_RUN, AMENDED, SHIPPED, Shipped

DTYPES = ("float32", "bfloat16")
KLASS = "C-PRC-01"


@dataclass(frozen=True)
class Cell:
    """One cell: the fixed and the buggy kernel's kcgate status, the buggy one's verdict and assert_close's."""

    bug: str
    dtype: str
    shape: tuple[int, ...]
    seed: int
    direction: str
    fixed: str  # pass | fail | refused
    fixed_note: str
    verdict: str  # right | less | misleading | missed | "" (no bug in this direction, or the cell refused)
    cause: str
    summary: str
    ac_fixed: bool  # assert_close passes the fixed kernel
    ac_caught: bool  # assert_close fails the buggy kernel
    present: (
        bool  # the buggy kernel's outputs (and gradients) differ from the fixed one's on the cell's inputs
    )


def contract(s: Shipped, dtype: str, direction: str) -> Contract:
    """The contract a new user writes from docs/custom-op.md: no tolerance, the library's reference."""
    return Contract(
        id=s.id,
        klass=KLASS,
        kernel="kernels:fn",
        op="custom",
        dtypes=(dtype,),
        shapes=(s.shape,),
        protocol=Protocol(seeds=1, trials=2),
        direction=direction,
        outputs=s.outputs,
        shape_constraints=s.shape_constraints,
        out_dtype=s.out_dtype,
    )


def kcgate_finding(s: Shipped, c: Contract, kernel, shape, seed: int):  # type: ignore[no-untyped-def]
    """(status, cause, summary or message) of one case, run as kcgate run's worker runs it."""
    case = Case(s.id, s.id, KLASS, "custom", c.dtypes[0], tuple(shape), 0, 1 + 7919 * seed)
    ctx = CaseContext(contract=c, case=case, kernel=kernel, op=custom_op(s.inputs, s.reference, s.shape))
    if tuple(shape) != s.shape and (why := reference_rejects(ctx, shape)):
        return "refused", "", why
    f = CHECKS[KLASS](ctx)
    sig = _with_grad(f.signature, f.metrics)
    return (
        str(getattr(f.status, "value", f.status)),
        sig.cause if sig else "",
        sig.summary if sig else (f.message or ""),
    )


def verdict(s: Shipped, status: str, cause: str, summary: str) -> str:
    if status != "fail":
        return "missed"
    if cause in s.right | AMENDED.get(s.id, frozenset()) and s.says.lower() in summary.lower():
        return "right"
    return "less" if cause in SAYS_LESS else "misleading"


def tensors(s: Shipped, kernel, dtype: str, shape, seed: int, backward: bool):  # type: ignore[no-untyped-def]
    """The kernel's outputs, and with ``backward`` its input gradients for one drawn dY, beside the library
    reference's on fp32-upcast inputs (each cast to the kernel's dtype): [(got, want), ...]."""
    x = s.inputs(tuple(shape), getattr(torch, dtype), torch.Generator().manual_seed(1 + 7919 * seed))
    got = kernel(*[t.clone() for t in x])
    outs = list(got) if isinstance(got, (tuple, list)) else [got]
    refs = s.reference(*upcast32(x))
    refs = list(refs) if isinstance(refs, (tuple, list)) else [refs]
    pairs = [(o, r.to(o.dtype)) for o, r in zip(outs, refs)]
    if not backward:
        return pairs
    target = flat(tuple(("", t) for _, t in raw(got))) if multiple(got) else outs[0]
    dy = torch.randn(target.shape, generator=torch.Generator().manual_seed(seed + 99), dtype=torch.float64)
    dy = dy.to(target.dtype)
    grads = zip(_grads(kernel, x, dy), _grads(s.reference, upcast32(x), dy.float()))
    return pairs + [(g, r.to(g.dtype)) for g, r in grads if g is not None and r is not None]


def ac_passes(pairs) -> bool:  # type: ignore[no-untyped-def]
    """assert_close (its default tolerances) on every output and gradient."""
    return all(_close(g, w) for g, w in pairs)


def differs(a, b) -> bool:  # type: ignore[no-untyped-def]
    """The buggy kernel's tensors differ from the fixed one's (NaN counts as a difference)."""
    return any(not torch.equal(x.nan_to_num(nan=7.0), y.nan_to_num(nan=7.0)) or bool(y.isnan().any() != x.isnan().any())
               for (x, _), (y, _) in zip(a, b))  # fmt: skip


def cells(s: Shipped, seeds: tuple[int, ...]) -> list[Cell]:
    out = []
    directions = ("forward", "backward") if s.backward else ("forward",)
    for dtype in DTYPES:
        c0 = contract(s, dtype, "forward")
        for shape in [s.shape, *boundary_shapes(c0, (s.shape,))]:
            for seed in seeds:
                for d in directions:
                    out.append(cell(s, dtype, tuple(shape), seed, d))
    return out


def cell(s: Shipped, dtype: str, shape: tuple[int, ...], seed: int, direction: str) -> Cell:
    c = contract(s, dtype, direction)
    fixed, _, note = kcgate_finding(s, c, s.fixed, shape, seed)
    if fixed == "refused":
        return Cell(s.id, dtype, shape, seed, direction, fixed, note, "", "", "", True, False, False)
    status, cause, summary = kcgate_finding(s, c, s.buggy, shape, seed)
    v = verdict(s, status, cause, summary) if direction in s.bug_in else ""
    bwd = direction == "backward"
    good, bad = (tensors(s, k, dtype, shape, seed, bwd) for k in (s.fixed, s.buggy))
    return Cell(s.id, dtype, shape, seed, direction, fixed, note if fixed != "pass" else "", v, cause, summary,
                ac_passes(good), not ac_passes(bad), differs(good, bad))  # fmt: skip


def tally(rows: list[Cell]) -> dict[str, int]:
    """Counts over cells. A buggy kernel counts where it changes the result (on assert_close's inputs) and the
    fixed one passes the same check (kcgate's columns) or assert_close passes it (assert_close's); ``absent``
    counts the cells where the bug leaves the result as it is (kcgate's verdicts there: ``absent_caught``)."""
    run = [r for r in rows if r.fixed != "refused"]
    absent = [r for r in run if r.verdict and not r.present]
    bug = [r for r in run if r.verdict and r.present]
    kc = [r for r in bug if r.fixed == "pass"]
    ac = [r for r in bug if r.ac_fixed]
    return {
        "cells": len(run),
        "refused": len(rows) - len(run),
        "fixed_fail": sum(r.fixed != "pass" for r in run),
        "ac_fixed_fail": sum(not r.ac_fixed for r in run),
        "bug_cells": len(kc),
        "caught": sum(r.verdict != "missed" for r in kc),
        "right": sum(r.verdict == "right" for r in kc),
        "less": sum(r.verdict == "less" for r in kc),
        "misleading": sum(r.verdict == "misleading" for r in kc),
        "ac_bug_cells": len(ac),
        "ac_caught": sum(r.ac_caught for r in ac),
        "absent": len(absent),
        "absent_caught": sum(r.verdict != "missed" for r in absent),
    }


def shipped(after_first_run: bool = True) -> tuple[Shipped, ...]:
    """The set, with the contract keys added after its first run (AFTER_FIRST_RUN) unless asked for as it was
    first run (``--first-run``)."""
    if not after_first_run:
        return SHIPPED
    return tuple(replace(s, **AFTER_FIRST_RUN.get(s.id, {})) for s in SHIPPED)


def main(argv: list[str]) -> int:
    seeds = tuple(int(a) for a in argv if a.isdigit()) or SEEDS
    only = {a for a in argv if not a.isdigit() and not a.startswith("--")}
    every: list[Cell] = []
    for s in [s for s in shipped("--first-run" not in argv) if not only or s.id in only]:
        rows = cells(s, seeds)
        every += rows
        for r in rows:
            print(f"{r.bug:38s} {r.dtype[:4]} {list(r.shape)!s:16s} s{r.seed} {r.direction[:3]} fixed {r.fixed:7s} "
                  f"{(r.verdict if r.present or not r.verdict else 'absent/' + r.verdict) or '-':10s} {r.cause or '-':22s} ac(fixed {'ok' if r.ac_fixed else 'FAIL'}, bug "
                  f"{'caught' if r.ac_caught else 'missed'}) {(r.summary if r.verdict else r.fixed_note)[:110]}",
                  flush=True)  # fmt: skip
        t = tally(rows)
        print(f"== {s.id}: {t}", flush=True)
    t = tally(every)
    print(
        f"\nheld-out shipped bugs outside the families: {len({r.bug for r in every})} bugs, {t['cells']} cells run "
        f"({t['refused']} boundary cells refused as kcgate run refuses them)\n"
        f"fixed kernels: kcgate {t['fixed_fail']} not passing, assert_close {t['ac_fixed_fail']} not passing\n"
        f"buggy kernels, cells where the fixed one passes: kcgate {t['caught']}/{t['bug_cells']} caught "
        f"(named right {t['right']}, says less {t['less']}, misleading {t['misleading']}); "
        f"assert_close {t['ac_caught']}/{t['ac_bug_cells']}\n"
        f"cells where the bug leaves the result unchanged on assert_close's inputs: {t['absent']} "
        f"(kcgate fails {t['absent_caught']} of them on its own trials' inputs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
