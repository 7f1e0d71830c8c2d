"""Semantic signatures: a failed output fitted by a simple transformation of the correct output or of a correct
intermediate, named with the fitted value ("output scaled by 2.00", "only the last K-block of 32 counted",
"lanes past n read 0", "the row sum is a bf16 value", "dx lacks −y·Σ(y·dy)").

Each fit is one row of the diagnosis table (``kcgate.engine.naming.FIT_ROWS``, run by ``run_fit``) after the family's known
mistakes and before the structural patterns. Every fit claims its cause only where it is clean (the rule in
docs/signatures.md#semantic-fits): the output is within ``CLEAN_BUDGET`` times the bound of the transformed
result and the transformation explains at least ``CLEAN_EXPLAINED`` of the error energy. The low-precision
reduction is the one fit that is not a prediction: each row's statistic, read back from the output, lies on a
narrow format's grid in nearly every row (an fp32 statistic would on about 40% of them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kcgate.engine.multi import failed_tensor
from kcgate.numerics.ops.base import upcast
from kcgate.results.model import Signature

CLEAN_BUDGET = 2.0  # the output within this many times the bound of the fitted transformation
CLEAN_EXPLAINED = 0.9  # share of the error energy the transformation must explain
CLEAN_OUTLIERS = 0.01  # share of elements allowed past CLEAN_BUDGET (a second, smaller flaw on a few)
UNCHANGED = 0.01  # a fitted factor this close to 1 leaves its side unchanged
GRID_TOL = 0.2  # a statistic within this share of the format's spacing of a value of the format is on it
GRID_ROWS = 0.8  # share of rows whose statistic must lie on the grid (chance: 2·GRID_TOL)
GRID_MIN_ROWS = 8
BLOCKS = (8, 16, 32, 64, 128, 256, 512)  # K-tile sizes tried for a dropped or overwritten block
FIT_MIN_ELEMENTS = 4  # fewer outputs than this: no fit is evidence
GRID_FORMATS = (("bf16", torch.bfloat16, 8), ("fp16", torch.float16, 11))

Fit = Callable[[Any, Any, torch.Tensor, torch.Tensor, torch.Tensor], "Signature | None"]


def sig(cause: str, summary: str, **evidence: float | str) -> Signature:
    return Signature(cause, summary, tuple(sorted(evidence.items())))


def clean(out: torch.Tensor, ref: torch.Tensor, pred: torch.Tensor, allowed: torch.Tensor) -> float | None:
    """The output's budget against the prediction (its worst element) when the prediction explains the error
    cleanly, else None."""
    if not bool(pred.isfinite().all()):
        return None
    err = float(((out - ref) ** 2).sum())
    resid = float(((out - pred) ** 2).sum())
    if err <= 0 or resid > (1 - CLEAN_EXPLAINED) * err:
        return None
    ratio = (out - pred).abs() / allowed.clamp_min(1e-300)
    if float((ratio > CLEAN_BUDGET).float().mean()) > CLEAN_OUTLIERS:
        return None
    return float(ratio.max())


# ---- fits on any output or gradient --------------------------------------------------------------


def num(c: float) -> str:
    """A fitted factor as a reader compares it: 2.00, 10.00, 0.10, 1.2e+03."""
    if abs(c - 1) < 0.01:
        return f"{c:.5f}"
    return f"{c:.2f}" if 0.01 <= abs(c) < 1000 else f"{c:.3g}"


def _what(trial: Any) -> str:
    return failed_tensor(trial)


def _relation(ctx: Any, trial: Any, c: float) -> str:
    """The fitted factor in terms of the case's sizes, where it is one of them (or its inverse or root)."""
    if ctx.op.name == "cross_entropy" and len(trial.inputs) > 1 and trial.grad:
        kept = int((trial.inputs[1] != dict(ctx.contract.params).get("ignore_index", -100)).sum())
        if kept > 1 and abs(c / kept - 1) < 0.01:
            return f" (= the {kept} rows the mean counts: the mean's 1/N forgotten)"
    for i, d in enumerate(trial.shape):
        if d <= 4:  # a small dim (1 included: its (d - 1) divides by zero) is no size a factor is named by
            continue
        for value, name in (
            (d, f"{d}"),
            (1 / d, f"1/{d}"),
            (math.sqrt(d), f"√{d}"),
            (1 / math.sqrt(d), f"1/√{d}"),
            (math.sqrt((d - 1) / d), f"√(({d} − 1)/{d}): an unbiased variance where the biased one is meant"),
            (math.sqrt(d / (d - 1)), f"√({d}/({d} − 1)): a biased variance where the unbiased one is meant"),
        ):
            if abs(abs(c) / value - 1) < min(0.01, abs(c - 1) / 10):
                return f" (= {name}, shape dim {i})"
    if abs(c) >= 8 and abs(c - round(c)) < 0.01 * abs(c):
        return f" (≈ {round(c)}: a count's 1/N dropped?)"
    return ""


def scale_fit(
    ctx: Any, trial: Any, out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor
) -> Signature | None:
    """out ≈ c·ref: a constant factor dropped or doubled (gelu without its 0.5, a mean's 1/N forgotten). Not
    where a constant offset explains the error nearly as well (outputs of nearly one value: logsumexp's). A
    layer norm's forward is fitted on its output less its bias (the bias is added after the normalised part),
    then on the whole output (a kernel that scales after adding the bias)."""
    if ctx.op.name == "layernorm" and not trial.grad:
        b = trial.inputs[2].to(torch.float64)
        found = _scale(ctx, trial, out - b, ref - b, allowed, "the output less its bias")
        if found is not None:
            return found
    return _scale(ctx, trial, out, ref, allowed, _what(trial))


def _scale(
    ctx: Any, trial: Any, out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor, what: str
) -> Signature | None:
    den = float((ref * ref).sum())
    if den <= 0:
        return None
    c = float((out * ref).sum()) / den
    budget = clean(out, ref, c * ref, allowed * max(1.0, abs(c)))
    if budget is None:  # the case failed and c·y explains it: however close c is to 1, it is the bug
        return None
    shift = float((out - ref).mean())  # outputs of nearly one value: a constant added fits as well
    if float(((out - ref - shift) ** 2).sum()) <= 2 * float(((out - c * ref) ** 2).sum()):
        return None
    zero = " (all zeros where the oracle is not: a loop that never ran, or a store skipped)"
    return sig(
        "scaled-output",
        f"{what} scaled by {num(c)}{zero if abs(c) < UNCHANGED else _relation(ctx, trial, c)}",
        factor=round(c, 6),
        budget_there=round(budget, 4),
    )


def sign_fit(
    ctx: Any, trial: Any, out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor
) -> Signature | None:
    """out ≈ a₊·ref where ref > 0 and a₋·ref where ref < 0, one side unchanged (leaky_relu's slope)."""
    pos, neg = ref > 0, ref < 0
    if int(pos.sum()) < 8 or int(neg.sum()) < 8:
        return None
    a = []
    for mask in (pos, neg):
        r, o = ref[mask], out[mask]
        a.append(float((o * r).sum() / (r * r).sum()))
    pred = torch.where(pos, a[0] * ref, a[1] * ref)
    budget = clean(out, ref, pred, allowed * max(1.0, abs(a[0]), abs(a[1])))
    if budget is None:
        return None
    changed = [i for i in (0, 1) if abs(a[i] - 1) >= UNCHANGED]
    if len(changed) != 1:
        return None  # both sides changed alike is a constant factor; unlike, not one sign's
    side = ("positive", "negative")[changed[0]]
    return sig(
        "sign-scaled",
        f"{_what(trial)}'s {side} side scaled by {num(a[changed[0]])} (the other side right)",
        side=side,
        factor=round(a[changed[0]], 6),
        budget_there=round(budget, 4),
    )


# ---- forward fits of particular families ------------------------------------------------------------------

GATES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str]] = {
    "silu": (torch.sigmoid, "σ({b}·x) in place of σ(x)"),
    "gelu": (torch.special.ndtr, "Φ({b}·x) in place of Φ(x) (erf({c}·x) for erf(x/√2))"),
}


def argument_fit(
    ctx: Any, trial: Any, out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor
) -> Signature | None:
    """x·g(b·x) for an activation x·g(x) (silu with σ(2x), gelu with erf(x) for erf(x/√2)): b fitted on a
    log grid then refined, the output factor by least squares."""
    if ctx.op.name not in GATES:
        return None
    gate, text = GATES[ctx.op.name]
    x = trial.inputs[0].to(torch.float64)

    def resid(b: float) -> tuple[float, float]:
        base = x * gate(b * x)
        den = float((base * base).sum())
        a = float((out * base).sum()) / den if den > 0 else 1.0
        return float(((out - a * base) ** 2).sum()), a

    grid = [2 ** (i / 16) for i in range(-64, 65)]
    b = min(grid, key=lambda g: resid(g)[0])
    lo, hi = b * 2 ** (-1 / 16), b * 2 ** (1 / 16)
    for _ in range(40):  # golden-section refinement in the bracketing grid step
        m1, m2 = lo + 0.382 * (hi - lo), lo + 0.618 * (hi - lo)
        lo, hi = (lo, m2) if resid(m1)[0] < resid(m2)[0] else (m1, hi)
    b = (lo + hi) / 2
    a = resid(b)[1]
    if abs(b - 1) < UNCHANGED:
        return None
    budget = clean(out, ref, a * x * gate(b * x), allowed * max(1.0, abs(a)))
    if budget is None:
        return None
    what = text.format(b=f"{b:.3g}", c=f"{b / math.sqrt(2):.3g}")
    extra = "" if abs(a - 1) < UNCHANGED else f", output scaled by {a:.3g}"
    return sig(
        "argument-scale",
        f"the activation's gate evaluated at a scaled argument: {what}{extra}",
        argument_factor=round(b, 4),
        output_factor=round(a, 4),
        budget_there=round(budget, 4),
    )


def masked_tail_fit(
    ctx: Any, trial: Any, out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor
) -> Signature | None:
    """softmax / logsumexp whose row sum gains k·exp(0 − max): k lanes past n read 0 (a masked load with
    other = 0.0 where −inf was meant, or padded lanes summed)."""
    if ctx.op.name not in ("softmax", "logsumexp"):
        return None
    x = trial.inputs[0].to(torch.float64)
    m = x.amax(-1, keepdim=True)
    n = x.shape[-1]
    if ctx.op.name == "softmax":
        e = (x - m).exp()
        s = e.sum(-1, keepdim=True)
        ok = (out > 0) & (ref > 0)
        if not bool(ok.all()):
            return None
        extra = (s * (ref / out - 1)).mean(-1, keepdim=True)  # each row's extra term, in units of e^m
        z = (-m).exp()
    else:
        extra = (ref.exp() * ((out - ref).exp() - 1)).unsqueeze(-1)  # e^out − e^ref
        z = torch.ones_like(extra)
        s = ref.exp().unsqueeze(-1)
    den = float((z * z).sum())
    k = float((extra * z).sum()) / den if den > 0 else 0.0
    if not k > 0.5:
        return None
    if ctx.op.name == "softmax":
        pred = e / (s + k * z)
    else:
        pred = (s + k).log().squeeze(-1)
    budget = clean(out, ref, pred, allowed)
    if budget is None:
        return None
    lanes = round(k)
    block = f"; the block of {n + lanes} lanes" if lanes and (n + lanes) & (n + lanes - 1) == 0 else ""
    return sig(
        "masked-tail",
        f"lanes past n read 0: each row's sum gains {k:.3g}·exp(0 − max), ≈{lanes} padded lane(s) of value 0 "
        f"counted{block} (a masked load with other = 0.0 where −inf was meant, or padded lanes summed)",
        padded_lanes=round(k, 3),
        columns=float(n),
        budget_there=round(budget, 4),
    )


def _reduction_parts(
    op: str, xs: Sequence[torch.Tensor]
) -> tuple[int, Callable[[int, int], torch.Tensor]] | None:
    """(K, partial(s, e)): the op's result counting only the reduction terms [s, e)."""
    if op in ("sum", "mean"):
        x = xs[0]
        k = x.shape[-1]
        cs = torch.cat([torch.zeros_like(x[..., :1]), x.cumsum(-1)], -1)
        div = float(k) if op == "mean" else 1.0
        return k, lambda s, e: (cs[..., e] - cs[..., s]) / div
    if op in ("matmul", "bmm"):
        a, b = xs[0], xs[1]
        return a.shape[-1], lambda s, e: a[..., s:e] @ b[..., s:e, :]
    if op == "linear":
        a, w, bias = xs[0], xs[1], xs[2]
        return a.shape[-1], lambda s, e: a[:, s:e] @ w[:, s:e].T + bias
    return None


def _last_tile(k: int, counted: int) -> bool:
    """Whether ``counted`` terms are what an overwritten running sum keeps: the last tile of a K-loop (a tile
    size, or the remainder K mod tile); any other suffix is a loop that started late."""
    return any(counted == b or counted == k % b for b in BLOCKS if b < k)


def _intervals(op: str, k: int) -> list[tuple[int, int, str, str]]:
    """Candidate counted intervals [s, e) with their cause and description."""
    out: list[tuple[int, int, str, str]] = []
    if op in ("sum", "mean"):
        for e in range(1, k):
            out.append((0, e, "tail-pattern", f"the last {k - e} of {k} terms of the reduction not counted"))
        for s in range(1, k):
            out.append(
                (
                    s,
                    k,
                    "overwritten-accumulator",
                    f"only the last {k - s} of {k} terms counted: the running "
                    "sum overwritten (acc = instead of acc +=)",
                )
                if _last_tile(k, k - s)
                else (
                    s,
                    k,
                    "wrong-extent",
                    f"a reduction over the wrong extent: the first {s} of {k} terms not counted",
                )
            )
        return out
    for b in BLOCKS:
        if b >= k:
            break
        last = (k - 1) // b * b
        out.append(
            (
                last,
                k,
                "overwritten-accumulator",
                f"only the last K-block of {b} counted ({k - last} of {k} "
                "terms): the running sum overwritten (acc = instead of acc +=)",
            )
        )
        out.append(
            (
                0,
                b,
                "tail-pattern",
                f"only the first K-block of {b} counted (the last {k - b} of {k} terms dropped)",
            )
        )
        if k % b:
            e = k // b * b
            out.append(
                (
                    0,
                    e,
                    "tail-pattern",
                    f"the last partial K-block dropped ({k - e} of {k} terms, tiles of {b})",
                )
            )
    return out


def reduction_fit(
    ctx: Any, trial: Any, out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor
) -> Signature | None:
    """A sum or matmul that counted only some of its K terms: a tail dropped, or only the last block kept."""
    found = _reduction_parts(ctx.op.name, [t.to(torch.float64) for t in trial.inputs])
    if found is None:
        return None
    k, partial = found
    cands = _intervals(ctx.op.name, k)
    if not cands:
        return None
    preds = [partial(s, e) for s, e, _, _ in cands]
    resid = [float(((out - p) ** 2).sum()) for p in preds]
    i = min(range(len(cands)), key=lambda j: resid[j])
    budget = clean(out, ref, preds[i], allowed)
    if budget is None:
        return None
    s, e, cause, text = cands[i]
    return sig(
        cause, text, counted_from=float(s), counted_to=float(e), terms=float(k), budget_there=round(budget, 4)
    )


def _row_factor(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor | None:
    """Each row's factor out/ref, averaged over the row's elements of non-negligible size."""
    if ref.dim() < 2 or ref.shape[-1] < 8:
        return None
    r = ref.reshape(-1, ref.shape[-1])
    o = out.reshape(-1, ref.shape[-1])
    rms = (r * r).mean(-1, keepdim=True).sqrt()
    big = r.abs() > 0.1 * rms
    ratio = torch.where(big, o / torch.where(big, r, torch.ones_like(r)), torch.zeros_like(r))
    cnt = big.sum(-1)
    if bool((cnt == 0).any()):
        return None
    return ratio.sum(-1) / cnt


def _statistics(
    op: str, xs: Sequence[torch.Tensor], out: torch.Tensor, ref: torch.Tensor
) -> list[tuple[str, torch.Tensor]] | None:
    """Each row's intermediate statistic as the kernel must have computed it to give this output: (what,
    values), read back through the row factor of the output against the fp64 result."""
    x = xs[0].to(torch.float64)
    if op == "logsumexp":
        m = x.amax(-1)
        return [("row sum of exp", (out - m).exp())]
    if op == "layernorm":
        b = xs[2].to(torch.float64)
        f = _row_factor(out - b, ref - b)
    else:
        f = _row_factor(out, ref)
    if f is None or not bool((f > 0).all()):
        return None
    x2 = x.reshape(-1, x.shape[-1])
    n = x2.shape[-1]
    if op == "softmax":
        s = (x2 - x2.amax(-1, keepdim=True)).exp().sum(-1)
        return [("row sum of exp (the denominator)", s / f), ("reciprocal of the row sum", f / s)]
    if op in ("rmsnorm", "layernorm"):
        eps = 1e-5
        centred = x2 - x2.mean(-1, keepdim=True) if op == "layernorm" else x2
        ms = (centred**2).mean(-1)
        r = (ms + eps).rsqrt()
        what = "variance" if op == "layernorm" else "mean of squares"
        ms_k = (ms + eps) / (f * f) - eps
        return [
            (f"reciprocal root of the row's {what}", r * f),
            (f"row's {what}", ms_k),
            (f"row's {what} plus eps", ms_k + eps),
            (f"row's sum of squares{' about the mean' if op == 'layernorm' else ''}", ms_k * n),
        ]
    return None


def on_grid(v: torch.Tensor, dt: torch.dtype, bits: int) -> torch.Tensor:
    """True where v lies within GRID_TOL of a value of the format (bits: significand bits with the implicit
    one), in units of the format's spacing at v."""
    q = v.to(dt).to(torch.float64)
    spacing = torch.exp2(torch.floor(torch.log2(v.abs().clamp_min(1e-300))) - (bits - 1))
    return ((v - q).abs() / spacing) <= GRID_TOL


def reduction_precision_fit(
    ctx: Any, trial: Any, out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor
) -> Signature | None:
    """softmax, logsumexp, rmsnorm, layernorm whose row statistic (the sum of exp, the mean of squares, its
    reciprocal root) is a bf16 or fp16 value in nearly every row: the reduction is kept in that format."""
    if ctx.op.name not in ("softmax", "logsumexp", "rmsnorm", "layernorm"):
        return None
    stats = _statistics(ctx.op.name, trial.inputs, out, ref)
    if not stats:
        return None
    for fmt, dt, bits in GRID_FORMATS:
        for what, v in stats:
            v = v.flatten()
            if v.numel() < GRID_MIN_ROWS or not bool((v.isfinite() & (v > 0)).all()):
                continue
            share = float(on_grid(v, dt, bits).float().mean())
            if share >= GRID_ROWS:
                return sig(
                    "low-precision-reduction",
                    f"the {what} is a {fmt} value in {share:.0%} of rows: the row's reduction is accumulated "
                    f"or kept in {fmt}, not in the declared accumulator",
                    format=fmt,
                    rows_on_grid=round(share, 3),
                )
    return None


# ---- per-row factors and reductions over the wrong extent ---------------------------------------------------

ROW_FACTOR_MIN = (
    2.0**-4
)  # fp8 e4m3's unit roundoff: a row factor further from 1 is no rounding of a row statistic
ROW_FACTOR_SPREAD = 0.01  # factors this close to one another are one constant (scale_fit's), not a row's own


def _span(lo: float, hi: float) -> str:
    return f"{num(lo)}–{num(hi)}"


def row_factor_fit(
    ctx: Any, trial: Any, out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor
) -> Signature | None:
    """out ≈ c_r·ref with one factor per row (or per tile of a row), the factors far from 1 and unlike one
    another: a row's normaliser read from another row, a softmax normalised per tile. Factors within
    ROW_FACTOR_MIN of 1 are left to the precision signatures (a row statistic rounded or kept narrow)."""
    if ref.dim() < 2 or ref.shape[-1] < 8:
        return None
    n = ref.shape[-1]
    for g in [n] + [b for b in reversed(BLOCKS) if 8 <= b < n and n % b == 0]:
        r, o = ref.reshape(-1, g), out.reshape(-1, g)
        if r.shape[0] < 2:
            continue
        den = (r * r).sum(1, keepdim=True)
        c = torch.where(den > 0, (o * r).sum(1, keepdim=True) / den.clamp_min(1e-300), torch.ones_like(den))
        lo, hi = float(c.min()), float(c.max())
        if max(abs(lo - 1), abs(hi - 1)) < ROW_FACTOR_MIN or hi - lo < ROW_FACTOR_SPREAD * max(
            abs(lo), abs(hi)
        ):
            if g == n:
                return None  # one row factor near 1, or one constant: not this fit's
            continue
        off = (c - 1).abs() >= ROW_FACTOR_MIN
        if not bool(off.all()) and bool((c[off].abs() < ROW_FACTOR_MIN).all()):
            continue  # the rows or tiles off are zeroed, the rest right: a dropped tail or tile, not a factor
        scale = c.abs().clamp_min(1.0).expand_as(r).reshape(ref.shape)
        budget = clean(out, ref, (c * r).reshape(ref.shape), allowed * scale)
        if budget is None:
            continue
        if g == n:
            text = (
                f"each row scaled by its own factor ({_span(lo, hi)}), far beyond any rounding: the row's "
                "statistic or normaliser is wrong (read from another row, or taken over the wrong extent)"
            )
        else:
            text = (
                f"each tile of {g} columns scaled by its own factor ({_span(lo, hi)}): the row normalised per "
                f"tile of {g}, not over the whole row of {n}"
            )
        return sig(
            "scaled-rows",
            text,
            group=float(g),
            factor_min=round(lo, 6),
            factor_max=round(hi, 6),
            budget_there=round(budget, 4),
        )
    return None


def _subset_masks(k: int) -> list[tuple[torch.Tensor, str]]:
    """Strided and every-other-tile subsets of K terms, each with its description."""
    idx = torch.arange(k)
    out = []
    for stride in (2, 3, 4, 8, 16, 32):
        if stride * 2 > k:
            break
        for o in range(stride):
            out.append(
                (
                    idx % stride == o,
                    f"every {stride}th term from {o}" if stride > 2 else f"every other term from {o}",
                )
            )
    for b in BLOCKS:
        if 2 * b >= k:
            break
        for o in (0, 1):
            out.append(
                ((idx // b) % 2 == o, f"every other tile of {b} from tile {o}: the pointer advanced twice")
            )
    return out


def _extent_sum(op: str, x: torch.Tensor, out: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    k = x.shape[-1]
    found = []
    for mask, how in _subset_masks(k):
        part = (x * mask).sum(-1)
        cnt = int(mask.sum())
        divs = [(1.0, "")] if op == "sum" else [(float(k), ""), (float(cnt), f", divided by {cnt}")]
        for d, extra in divs:
            found.append((part / d, f"sums {cnt} of {k} terms ({how}){extra}"))
    return found


def _counted(w: torch.Tensor) -> str:
    """The terms a 0/1 weight vector counts, in words."""
    k = w.numel()
    on = w.nonzero().flatten()
    cnt = on.numel()
    if cnt and int(on[-1] - on[0]) + 1 == cnt:
        return f"sums {cnt} of {k} terms (terms {int(on[0])}–{int(on[-1])} only)"
    if cnt > 1:
        steps = (on[1:] - on[:-1]).unique()
        if steps.numel() == 1:
            return f"sums {cnt} of {k} terms (every {int(steps[0])}th from {int(on[0])})"
        starts = [int(on[0])] + [int(b) for a, b in zip(on[:-1], on[1:]) if b - a > 1]
        runs = cnt // len(starts)
        gaps = {b - a for a, b in zip(starts, starts[1:])}
        if runs * len(starts) == cnt and len(gaps) == 1:
            return f"sums {cnt} of {k} terms (tiles of {runs}, one in every {gaps.pop() // runs} from term {starts[0]})"
    return f"sums {cnt} of {k} terms"


EXTENT_MAX_K = 1024  # the least-squares fit of a matmul's per-term weights runs up to this K
EXTENT_TOL = 0.1  # a fitted per-term weight this close to 0 or 1 is that


def _extent_matmul(op: str, xs: Sequence[torch.Tensor], out: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """out ≈ Σ_k w_k·a_ik·b_kj with each w_k fitted (least squares on a sample of outputs): the K terms counted."""
    a = xs[0]
    b = xs[1].mT if op == "linear" else xs[1]
    k = a.shape[-1]
    y = out - xs[2] if op == "linear" else out
    if k > EXTENT_MAX_K or a.dim() != b.dim() or a.dim() not in (2, 3):
        return []
    a3, b3, y3 = (t if t.dim() == 3 else t.unsqueeze(0) for t in (a, b, y))
    total = y3.numel()
    if total < 2 * k:
        return []
    g = torch.Generator().manual_seed(0)
    pick = torch.randperm(total, generator=g)[: min(total, 4 * k)]
    bi, rest = pick // (y3.shape[1] * y3.shape[2]), pick % (y3.shape[1] * y3.shape[2])
    i, j = rest // y3.shape[2], rest % y3.shape[2]
    design = a3[bi, i, :] * b3[bi, :, j]
    w = torch.linalg.lstsq(design, y3[bi, i, j].unsqueeze(-1)).solution.flatten()
    wr = w.round()
    if (
        float((w - wr).abs().max()) > EXTENT_TOL
        or not bool(((wr == 0) | (wr == 1)).all())
        or bool((wr == 1).all())
    ):
        return []
    pred = (a * wr) @ b + (xs[2] if op == "linear" else 0)
    return [(pred, _counted(wr))]


def _prefix_stat(
    op: str, xs: Sequence[torch.Tensor], ref: torch.Tensor, e: int, d: int, eps: float
) -> torch.Tensor | None:
    """The op with its row statistic taken over the first e columns (divided by d where it is a mean)."""
    x = xs[0]
    xe = x[..., :e]
    if op == "rmsnorm":
        ms, ms_e = (x * x).mean(-1, keepdim=True), (xe * xe).sum(-1, keepdim=True) / d
        return ref * ((ms + eps) / (ms_e + eps)).sqrt()
    if op == "l2norm":
        return ref * x.norm(dim=-1, keepdim=True) / xe.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    if op in ("layernorm", "layernorm-mean"):
        w, b = xs[1], xs[2]
        mu = xe.sum(-1, keepdim=True) / d
        if op == "layernorm":
            var = ((xe - mu) ** 2).sum(-1, keepdim=True) / d
        else:  # only the mean over the tile; the variance about it over the whole row
            var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) * (var + eps).rsqrt() * w + b
    m = x.amax(-1, keepdim=True)
    s, s_e = (x - m).exp().sum(-1, keepdim=True), (xe - m).exp().sum(-1, keepdim=True)
    if op == "softmax":
        return ref * s / s_e
    if op == "log_softmax":
        return ref + s.log() - s_e.log()
    if op == "logsumexp":
        return ref + (s_e.log() - s.log()).squeeze(-1)
    return None


PREFIX_STATS = {
    "rmsnorm": "mean of squares",
    "l2norm": "norm",
    "layernorm": "mean and variance",
    "softmax": "sum of exp",
    "log_softmax": "sum of exp",
    "logsumexp": "sum of exp",
}


def _extent_rows(ctx: Any, xs: Sequence[torch.Tensor], ref: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    op = ctx.op.name
    n = xs[0].shape[-1]
    eps = float(dict(ctx.contract.params).get("eps", 1e-5))
    ends = sorted({b for b in BLOCKS if b < n} | {n // 2} - {0})
    found = []
    variants = [(op, PREFIX_STATS[op])] + ([("layernorm-mean", "mean")] if op == "layernorm" else [])
    for e in ends:
        divs = (e, n) if op in ("rmsnorm", "layernorm") else (e,)
        for d in divs:
            for how, what in variants:
                pred = _prefix_stat(how, xs, ref, e, d, eps)
                if pred is not None:
                    extra = f" (divided by {n})" if d != e else ""
                    found.append((pred, f"the row's {what} taken over the first {e} of {n} columns{extra}"))
    return found


def extent_fit(
    ctx: Any, trial: Any, out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor
) -> Signature | None:
    """A reduction over the wrong extent: a sum or matmul that counted a strided or partial subset of its K
    terms (a sum's prefix and suffix, a matmul's whole K-blocks are reduction_fit's), or a row statistic
    (the mean of squares, the sum of exp) taken over the first tile of the row only."""
    op = ctx.op.name
    xs = [t.to(torch.float64) for t in trial.inputs]
    if op in ("sum", "mean"):
        cands = _extent_sum(op, xs[0], out)
    elif op in ("matmul", "bmm", "linear"):
        cands = _extent_matmul(op, xs, out)
    elif op in PREFIX_STATS:
        cands = _extent_rows(ctx, xs, ref)
    else:
        return None
    cands = [(p, t) for p, t in cands if p.shape == out.shape and bool(p.isfinite().all())]
    if not cands:
        return None
    pred, text = min(cands, key=lambda c: float(((out - c[0]) ** 2).sum()))
    budget = clean(out, ref, pred, allowed)
    if budget is None:
        return None
    return sig("wrong-extent", f"a reduction over the wrong extent: {text}", budget_there=round(budget, 4))


# ---- backward fits ------------------------------------------------------------------------------------


def missing_term_fit(
    ctx: Any, trial: Any, out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor
) -> Signature | None:
    """softmax's dx = y·(dy − Σ y·dy) computed as y·dy: the row term −y·Σ(y·dy) missing."""
    if ctx.op.name != "softmax" or trial.dy is None or trial.grad != ctx.op.input_name(0):
        return None
    x = trial.inputs[0].to(torch.float64)
    dy = trial.dy.to(torch.float64)
    y = x.softmax(-1)
    term = y * (y * dy).sum(-1, keepdim=True)
    den = float((term * term).sum())
    if den <= 0:
        return None
    c = float(((out - ref) * term).sum()) / den  # out ≈ ref + c·term; c = 1: the term −y·Σ(y·dy) is missing
    budget = clean(out, ref, ref + c * term, allowed)
    if budget is None:
        return None
    what = "lacks −y·Σ(y·dy)" if abs(c - 1) < 0.05 else f"has {1 - c:.3g}× the term −y·Σ(y·dy) in place of 1×"
    return sig(
        "missing-term",
        f"d{trial.grad} {what} (the softmax backward's row term)",
        term_factor=round(1 - c, 4),
        budget_there=round(budget, 4),
    )


@dataclass(frozen=True)
class FitRow:
    """One fit of the diagnosis table (kcgate.engine.naming): the transformation it fits, the evidence it
    reads, the limit of its claim, the test that holds it, and the tensors it applies to."""

    fit: Fit
    evidence: str
    limit: str
    test: str
    forward: bool = True
    grad: bool = False


_SEM = "tests/engine/test_semantic_signatures.py::test_every_semantic_bug_is_named_right_on_every_seed"

FITS: tuple[FitRow, ...] = (
    # before the scale: a row's sum gaining k·exp(−max) scales each row by nearly one factor at a small
    # boundary shape, which the scale fit would take for one constant
    FitRow(masked_tail_fit, "each row's sum gains k·exp(−max)", "clean, k > 0.5", _SEM),
    FitRow(
        scale_fit,
        "out ≈ c·ref",
        "clean: within 2× the bound of c·ref, 90% of the error energy",
        _SEM,
        grad=True,
    ),
    FitRow(sign_fit, "one sign of ref scaled", "clean, and only one side changed", _SEM, grad=True),
    FitRow(argument_fit, "x·g(b·x) fitted over b", "clean", _SEM),
    FitRow(missing_term_fit, "dx = ref + c·y·Σ(y·dy)", "clean", _SEM, forward=False, grad=True),
    FitRow(reduction_fit, "a prefix or last block of K counted", "clean", _SEM),
    FitRow(
        reduction_precision_fit, "the row statistic on a narrow grid", "80% of ≥ 8 rows on the grid", _SEM
    ),
    FitRow(extent_fit, "a strided or partial set of terms counted", "clean", _SEM),
    FitRow(row_factor_fit, "one factor per row or tile", "factors ≥ 1/16 from 1, clean", _SEM, grad=True),
)


def _allowed(ctx: Any, trial: Any) -> torch.Tensor | None:
    """An absolute per-element allowance: the comparison's, or the family's bound where the contract counts
    ULPs (or compares exactly)."""
    if trial.grad or ctx.contract.tolerance.method in ("error-bound", "relative", "abs-rel"):
        return trial.cmp.allowed.to(torch.float64).expand_as(trial.cmp.ref)
    try:
        with torch.no_grad():
            return ctx.op.bound(upcast(trial.inputs), trial.cmp.ref, ctx.bound_args()).to(torch.float64)
    except Exception:  # a custom op's bound may not apply: no fit
        return None


def fit_inputs(ctx: Any, trial: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(out, ref, allowed) in fp64 where a fit can be evidence: finite, of the oracle's shape, not tiny."""
    if trial.out is None or trial.cmp is None or not isinstance(trial.out, torch.Tensor):
        return None
    out = trial.out.detach().to("cpu", torch.float64)
    ref = trial.cmp.ref.to(torch.float64)
    if out.shape != ref.shape or not bool(out.isfinite().all()) or not bool(ref.isfinite().all()):
        return None
    if out.numel() < FIT_MIN_ELEMENTS:
        return None  # a fitted parameter against one or two values explains anything
    allowed = _allowed(ctx, trial)
    if allowed is None or allowed.shape != ref.shape:
        return None
    return out, ref, allowed


def run_fit(row: FitRow, ctx: Any, trial: Any) -> Signature | None:
    """One fit on the trial's deciding tensor, where it applies (a forward fit to an output, a gradient fit
    to a gradient)."""
    if not (row.grad if trial.grad else row.forward):
        return None
    found = fit_inputs(ctx, trial)
    if found is None:
        return None
    with torch.no_grad():
        return row.fit(ctx, trial, *found)
