"""C-EXC-02 check: in-range indices must give exact results; planted out-of-range indices must be
handled per the declared policy — raise, clamp, zero, or undefined (anything but a crash or a stray write).
"""

from __future__ import annotations

import torch

from kcgate.engine.checks import Finding, trials, verdict
from kcgate.engine.checks.c_support import count_budget, fold
from kcgate.engine.diagnosis import sig
from kcgate.engine.harness import call_guarded
from kcgate.engine.trial import CaseContext, Trial, oracle
from kcgate.results.model import Status

# op → (position of the index tensor, input position and dim whose size bounds it)
INDEXING: dict[str, tuple[int, int, int]] = {
    "index_select": (1, 0, 0),
    "gather": (1, 0, 1),
    "embedding": (0, 1, 0),
}
PLANTED = 8  # out-of-range indices per trial: one violation is budget 2, so a wrong policy scores 16


def check(ctx: CaseContext) -> Finding:
    finding = verdict(ctx, trials(ctx))
    if ctx.op.name not in INDEXING or finding.status == Status.ERROR:
        return finding
    xs, oob = planted(ctx, ctx.inputs(ctx.case.shape, "oob"))
    t = call_guarded(ctx, xs)
    policy = str(ctx.contract.param("oob"))
    violations, behaviour = judge(ctx, t, xs, oob, policy)
    signature = sig(
        "out-of-bounds",
        f"{violations} out-of-range index(es) {behaviour} (declared: {policy})",
        violations=float(violations),
        behaviour=behaviour,
        policy=policy,
    )
    if "out-of-bounds" in t.issues:
        return Finding(
            Status.FAIL,
            finding.metrics,
            signature,
            "the kernel wrote outside its buffers on out-of-range indices",
        )
    return fold(
        finding,
        count_budget(violations),
        signature,
        f"out-of-range indices {behaviour}; the contract declares {policy!r}",
        {"oob_violations": violations},
    )


def planted(ctx: CaseContext, xs: tuple[torch.Tensor, ...]) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """Replace PLANTED indices with out-of-range ones (n, n + 7, 2n + 1, −1, ...); returns the mask too."""
    pos, src, dim = INDEXING[ctx.op.name]
    n = xs[src].shape[dim]
    idx = xs[pos].clone()
    flat = idx.view(-1)
    gen = ctx.generator("oob")
    where = torch.randperm(flat.numel(), generator=gen)[:PLANTED]
    bad_values = torch.tensor([n, n + 7, 2 * n + 1, -1, n + 1, 3 * n, -2, n + 2])[: where.numel()]
    flat[where] = bad_values
    oob = (idx < 0) | (idx >= n)
    return tuple(idx if i == pos else x for i, x in enumerate(xs)), oob


def judge(
    ctx: CaseContext, t: Trial, xs: tuple[torch.Tensor, ...], oob: torch.Tensor, policy: str
) -> tuple[int, str]:
    """(violations, what the kernel did with the out-of-range indices)."""
    planted_n = int(oob.sum())
    if "raised" in t.issues:
        return (0, "raised") if policy in ("raise", "undefined") else (planted_n, "raised")
    if t.out is None:
        return planted_n, "returned no usable output"
    behaviour = interpret(ctx, t.out, xs, oob)
    if policy == "undefined":
        return 0, behaviour
    if policy == "raise":
        return planted_n, behaviour + " silently"
    expected = _interpretation(ctx, xs, oob, policy)
    wrong = _rows_differ(ctx, t.out, expected, oob)
    return wrong, behaviour


def interpret(ctx: CaseContext, out: torch.Tensor, xs: tuple[torch.Tensor, ...], oob: torch.Tensor) -> str:
    for name, label in (
        ("wrap", "were wrapped modulo the size (the AMD silent-acceptance pattern)"),
        ("zero", "read as zeros"),
        ("clamp", "were clamped to the valid range"),
    ):
        if _rows_differ(ctx, out, _interpretation(ctx, xs, oob, name), oob) == 0:
            return label
    return "gave unexplained values"


def _interpretation(
    ctx: CaseContext, xs: tuple[torch.Tensor, ...], oob: torch.Tensor, how: str
) -> torch.Tensor:
    pos, src, dim = INDEXING[ctx.op.name]
    n = xs[src].shape[dim]
    idx = xs[pos]
    fixed = {"wrap": idx % n, "clamp": idx.clamp(0, n - 1), "zero": torch.where(oob, 0, idx)}[how]
    ref = oracle(ctx, tuple(fixed if i == pos else x for i, x in enumerate(xs)))
    if how == "zero":
        ref = torch.where(_out_mask(ctx, oob, ref), torch.zeros((), dtype=ref.dtype), ref)
    return ref


def _out_mask(ctx: CaseContext, oob: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    return (
        oob
        if oob.shape == ref.shape
        else oob.reshape(*oob.shape, *([1] * (ref.dim() - oob.dim()))).expand_as(ref)
    )


def _rows_differ(ctx: CaseContext, out: torch.Tensor, expected: torch.Tensor, oob: torch.Tensor) -> int:
    if out.shape != expected.shape:
        return int(oob.sum())
    mask = _out_mask(ctx, oob, expected)
    same = (out.to(torch.float64) == expected) | (out.isnan() & expected.isnan())
    return int((~same & mask).reshape(oob.numel(), -1).any(-1).sum()) if mask.any() else 0
