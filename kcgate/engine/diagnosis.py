"""Violation signatures: turn measured error evidence into a named cause (``results.Signature``).

The classifiers are small pure functions over tensors (testable with injected faults, see
docs/signature-accuracy.md); ``kcgate.engine.naming`` holds them as rows of one table and names a failed case.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import torch

from kcgate.engine.backward import grad_dot_scale, reference_grads
from kcgate.numerics.emulate import round_mantissa
from kcgate.numerics.ops.base import upcast
from kcgate.results.model import Signature
from kcgate.vocab import dtypes
from kcgate.vocab.catalogue import MATMUL_LIKE, families, has
from kcgate.vocab.causes import INTEGRITY

# Families whose intermediates include exp(x): a NaN/Inf there is an exp overflow.
EXP_FAMILIES = families("exp")


def first_issue(issues: Sequence[str]) -> str:
    """The integrity issue to name first (the cause table's order; unknown issues after, alphabetically)."""
    rank = {name: i for i, name in enumerate(INTEGRITY)}
    return min(issues, key=lambda i: (rank.get(i, len(rank)), i))


# Significand bits (with the implicit bit) of the formats an accumulator or operand path may use.
FORMAT_BITS: dict[str, int] = {"fp32": 24, "fp16 or tf32": 11, "bf16": 8, "fp8 e4m3": 4}
# err_rms ≈ C·√K·u·‖a∘b‖₂ for a running sum rounded every 32 terms (the MMA-tile granularity);
# C was fitted once on emulated fp16/bf16 accumulators so their effective bits come out as 11 and 8.
_ACC_C = 0.0588


def sig(cause: str, summary: str, **evidence: float | str) -> Signature:
    return Signature(cause, summary, tuple(sorted(evidence.items())))


# ---- accumulator width -------------------------------------------------------------------------


def normalized_error(err: torch.Tensor, scale: torch.Tensor) -> float:
    """rms of err/scale over elements with a positive scale (scale = ‖a∘b‖₂ per output element)."""
    ok = (scale > 0) & err.isfinite()
    if not bool(ok.any()):
        return math.nan
    return float(((err[ok] / scale[ok]) ** 2).mean().sqrt())


def fit_accumulator(ks: Sequence[int], nerr: Sequence[float]) -> tuple[float, float]:
    """(effective bits, log-log slope of normalized error vs K) from a K sweep."""
    pts = [(k, e) for k, e in zip(ks, nerr) if e > 0 and math.isfinite(e)]
    if not pts:
        return math.inf, math.nan
    us = [e / (_ACC_C * math.sqrt(k)) for k, e in pts]  # nerr = err/‖a∘b‖₂ ≈ C·√K·u
    bits = -sum(math.log2(u) for u in us) / len(us)
    slope = _slope([math.log(k) for k, _ in pts], [math.log(e) for _, e in pts]) if len(pts) > 1 else math.nan
    return bits, slope


def _slope(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else math.nan


def nearest_format(bits: float) -> str:
    return min(FORMAT_BITS, key=lambda f: abs(FORMAT_BITS[f] - bits))


ACC_SLOPE = (0.3, 0.8)  # a rounding accumulator's normalized error grows like K^0.5 (biased: K^1)
ACC_RESIDUAL = 0.35  # rms of the log-log fit's residual: above it the points are not one power law
ACC_MIN_KS = 3  # distinct reduction lengths needed before a width is claimed
ACC_MIN_BITS = 3  # fp8 e5m2's significand: a fit below it is an error as large as the result, no format


def fit_residual(ks: Sequence[int], nerr: Sequence[float]) -> float:
    """rms residual of the straight-line fit of log(nerr) against log(K)."""
    pts = [(math.log(k), math.log(e)) for k, e in zip(ks, nerr) if e > 0 and math.isfinite(e)]
    if len(pts) < 2:
        return math.inf
    xs, ys = [x for x, _ in pts], [y for _, y in pts]
    b = _slope(xs, ys)
    if not math.isfinite(b):
        return math.inf
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return math.sqrt(sum((y - my - b * (x - mx)) ** 2 for x, y in pts) / len(pts))


# A running sum rounded to u every B terms: nerr(K) ≈ C0·u·√((⌈K/B⌉ + 1)/2) (the rounded partial sums are
# ≈ √(jB)·rms(a∘b); C0 = 8·_ACC_C, so B = 32 at large K is the old C·√K·u). B is fitted with u: a
# sequential sum (B = 1) and a blocked one (B = 128) have different curves below and above K = B.
_ACC_C0 = 8 * _ACC_C
ACC_BLOCKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
ACC_GROWTH = 1.5  # the error must grow this much over the sweep: a flat one is not an accumulator
ACC_TIE = 0.05  # rounding intervals whose fit is within this residual of the best fit equally well
FORMAT_MATCH = 0.75  # bits: an interval's fitted width this close to a format's names the format


def _rounded(k: int, block: int) -> float:
    return math.sqrt((math.ceil(k / block) + 1) / 2)


Partials = Sequence[dict[int, float]]  # per sweep point: B -> the rms of √(Σ_j S_jB²)/‖a∘b‖₂ on its own data


def fit_blocked(
    ks: Sequence[int], nerr: Sequence[float], partials: Partials | None = None
) -> list[tuple[int, float, float]]:
    """(rounding interval B, effective bits, rms log residual) for each B in ACC_BLOCKS whose model grows over
    the sweep, the width fitted by least squares in log space. ``partials``: the rounded partial sums measured
    on each point's own inputs (``partial_sums``) in place of the zero-mean model ``_rounded``: a sum of
    same-sign terms grows like K, and so do its roundings."""
    pts = [
        (k, e, partials[i] if partials is not None else None)
        for i, (k, e) in enumerate(zip(ks, nerr))
        if e > 0 and math.isfinite(e)
    ]
    if len(pts) < 2:
        return []

    def model(k: int, b: int, p: dict[int, float] | None) -> float:
        return p[b] if p is not None else _rounded(k, b)

    lo, hi = min(pts, key=lambda x: x[0]), max(pts, key=lambda x: x[0])
    out = []
    for b in ACC_BLOCKS:
        if any(p is not None and b not in p for _, _, p in pts):
            continue
        if model(hi[0], b, hi[2]) / model(lo[0], b, lo[2]) < ACC_GROWTH:
            continue
        dev = [math.log(e / (_ACC_C0 * model(k, b, p))) for k, e, p in pts]
        log_u = sum(dev) / len(dev)
        resid = math.sqrt(sum((d - log_u) ** 2 for d in dev) / len(dev))
        out.append((b, -log_u / math.log(2), resid))
    return out


def _grows(ks: Sequence[int], nerr: Sequence[float]) -> bool:
    pts = sorted((k, e) for k, e in zip(ks, nerr) if e > 0 and math.isfinite(e))
    return len(pts) > 1 and pts[-1][1] >= ACC_GROWTH * pts[0][1]


def accumulator_signature(
    ks: Sequence[int],
    nerr: Sequence[float],
    declared_bits: int,
    grid: str | None = None,
    partials: Partials | None = None,
) -> Signature | None:
    """ "keeps its running sum in bf16, rounding about every 128 terms" when a K sweep fits a rounding
    accumulator (at least three reduction lengths, growing with K, one rounding interval's curve within the
    residual bound) well below the declared width; never from one K. ``grid``: the format whose values the
    outputs are (they end in that format), which settles the width when several intervals fit. ``partials``:
    the rounded partial sums measured on each point's inputs; where the error grows like K they tell a running
    sum of same-sign terms (its partial sums grow like K: plain rounding) from a biased one."""
    if len({k for k, e in zip(ks, nerr) if e > 0 and math.isfinite(e)}) < ACC_MIN_KS or not _grows(ks, nerr):
        return None
    bits, slope = fit_accumulator(ks, nerr)
    if not math.isfinite(bits) or not math.isfinite(slope) or slope < ACC_SLOPE[0] / 2 or bits < ACC_MIN_BITS:
        return None
    if slope > ACC_SLOPE[1]:  # error vs K: √K-like growth is rounding, ≈ K is bias
        same_sign = _width_fit(ks, nerr, declared_bits, grid, slope, partials) if partials else None
        if same_sign is not None:
            return same_sign
        if bits > declared_bits - 3 or slope > 1.3 or fit_residual(ks, nerr) > ACC_RESIDUAL:
            return None
        return sig(
            "biased-rounding",
            f"error grows like K^{slope:.2f} (biased rounding), ≈{bits:.1f} effective bits",
            effective_bits=round(bits, 2),
            slope=round(slope, 3),
        )
    found = _width_fit(ks, nerr, declared_bits, grid, slope)
    if (
        found is None and partials
    ):  # the zero-mean model misses terms of one sign: their measured partial sums
        found = _width_fit(ks, nerr, declared_bits, grid, slope, partials)
    return found


def _width_fit(
    ks: Sequence[int],
    nerr: Sequence[float],
    declared_bits: int,
    grid: str | None,
    slope: float,
    partials: Partials | None = None,
) -> Signature | None:
    fits = fit_blocked(ks, nerr, partials)
    best = min((r for _, _, r in fits), default=math.inf)
    if best > ACC_RESIDUAL:
        return None
    near = [(b, w, r) for b, w, r in fits if r <= best + ACC_TIE and ACC_MIN_BITS <= w <= declared_bits - 3]
    if not near:
        return None
    return _width(near, grid, slope)


def _every(blocks: Sequence[int]) -> str:
    """The rounding intervals that fit, in words: "after every add", "every 64-128 terms"."""
    lo, hi = min(blocks), max(blocks)
    if hi == 1:
        return "after every add"
    return f"every {lo} terms" if lo == hi else f"every {lo}-{hi} terms"


def _width(near: list[tuple[int, float, float]], grid: str | None, slope: float) -> Signature:
    """Name the accumulator only as far as the fits allow: the outputs' format, else the one format that the
    fitted intervals match, else the bits with no format (none fits, or several do). The intervals named are
    those that fit the format; the evidence's ``block`` is the best fit's."""
    evidence: dict[str, float | str] = {"slope": round(slope, 3)}
    if grid is not None:
        fit = [x for x in near if abs(x[1] - FORMAT_BITS[grid]) <= 2 * FORMAT_MATCH]
        if fit:
            return _named(
                fit, grid, f"keeps its running sum in {grid} (the outputs are {grid} values)", evidence
            )
    # outputs that are values of one narrow format are not values of another: a running sum kept in that
    # other format would have ended there, so the fit cannot name it
    refuted = {name for name, _ in GRIDS if grid is not None and name != grid}
    fmts = [
        f
        for f in FORMAT_BITS
        if f not in refuted and any(abs(w - FORMAT_BITS[f]) <= FORMAT_MATCH for _, w, _ in near)
    ]
    if len(fmts) == 1:
        fit = [x for x in near if abs(x[1] - FORMAT_BITS[fmts[0]]) <= FORMAT_MATCH]
        return _named(fit, fmts[0], f"behaves like a {fmts[0]} accumulator", evidence)
    b, w, _ = min(near, key=lambda x: x[2])
    which = (
        "; fits " + " or ".join(fmts) + ": the sweep cannot tell which"
        if fmts
        else "; no standard format fits"
    )
    lo, hi = min(x for _, x, _ in near), max(x for _, x, _ in near)
    return sig(
        "low-precision-accumulator",
        f"accumulates at fewer bits than declared (≈{lo:.1f}-{hi:.1f} effective bits, depending on how often "
        f"it rounds){which}",
        effective_bits=round(w, 2),
        nearest=" or ".join(fmts),
        block=float(b),
        **evidence,
    )


def _named(
    fit: list[tuple[int, float, float]], fmt: str, what: str, evidence: dict[str, float | str]
) -> Signature:
    b, w, _ = min(fit, key=lambda x: x[2])
    return sig(
        "low-precision-accumulator",
        f"{what}, rounding {_every([x for x, _, _ in fit])} (≈{w:.1f} effective bits)",
        effective_bits=round(w, 2),
        nearest=fmt,
        block=float(b),
        **evidence,
    )


def dot_scale(op: str, inputs: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """‖a∘b‖₂ per output element for dot-product ops (None where the op is not a plain dot/sum)."""
    f = [t.to(torch.float64) for t in inputs]
    if has(op, "plain_product"):
        return ((f[0] ** 2) @ (f[1] ** 2)).sqrt()
    if op == "linear":
        return ((f[0] ** 2) @ (f[1] ** 2).T + f[2] ** 2).sqrt()
    if op in ("sum", "mean"):
        s = (f[0] ** 2).sum(-1).sqrt()
        return s / f[0].shape[-1] if op == "mean" else s
    return None


# ---- operand rounding, bias, patterns --------------------------------------------------------------


def round_operands(t: torch.Tensor, bits: int, mode: str) -> torch.Tensor:
    return round_mantissa(t, bits - 1, mode).to(torch.float64)


def operand_signature(
    out: torch.Tensor,
    ref: torch.Tensor,
    inputs: Sequence[torch.Tensor],
    oracle: Any,
    float_inputs: Sequence[int],
) -> Signature | None:
    """Does the output match the oracle on operands rounded to 11 or 8 bits far better than the exact one?"""
    o = out.to(torch.float64)
    e_exact = _rms(o - ref)
    if not e_exact > 0:
        return None
    best = None
    for name, bits in (("tf32", 11), ("bf16", 8)):
        for mode in ("truncate", "nearest"):
            xs = [round_operands(t, bits, mode) if i in float_inputs else t for i, t in enumerate(inputs)]
            e = _rms(o - oracle(*xs).to(torch.float64))
            if e < 0.25 * e_exact and (best is None or e < best[0]):
                best = (e, name, bits, mode)
    if best is None:
        return None
    e, name, bits, mode = best
    return sig(
        "operand-truncation",
        f"operands rounded to {bits} bits ({name}-like, {'truncated' if mode == 'truncate' else 'rounded'})",
        operand_bits=float(bits),
        residual_ratio=round(e / e_exact, 4),
        mode=mode,
    )


def _rms(x: torch.Tensor) -> float:
    x = x[x.isfinite()]
    return float((x**2).mean().sqrt()) if x.numel() else math.nan


ROUNDING_SCALE = 2.0**-4  # fp8 e4m3's unit roundoff: a relative rms error above it is no rounding mode's


def _bias_t(signed: torch.Tensor, ref: torch.Tensor) -> tuple[float, float] | None:
    """The t statistic of sign(ref)·error (mean over its standard error) and the fraction of nonzero errors."""
    d = (signed * ref.sign()).flatten()
    d = d[d.isfinite()]
    if d.numel() < 16 or not bool((d != 0).any()):
        return None
    t = float(d.mean() / (d.std() / math.sqrt(d.numel()) + 1e-300))
    return t, float((d != 0).float().mean())


def _biased(signed: torch.Tensor, ref: torch.Tensor) -> float | None:
    found = _bias_t(signed, ref)
    return found[0] if found is not None and abs(found[0]) >= 8 and found[1] >= 0.1 else None


def bias_signature(signed: torch.Tensor, ref: torch.Tensor) -> Signature | None:
    """Errors that push magnitudes one way, at a rounding scale: mean of sign(ref)·error well away from 0
    relative to its spread, and a relative rms error no rounding mode exceeds (a wrong mask or a shifted
    position is biased too, but it is not rounding: those fall through to a plainer name)."""
    t = _biased(signed, ref)
    if t is None or _rms(signed) > ROUNDING_SCALE * _rms(ref):
        return None
    direction = "toward zero" if t < 0 else "away from zero"
    return sig(
        "biased-rounding",
        f"biased rounding {direction} (mean error t = {t:.1f})",
        t_statistic=round(t, 2),
        direction=direction,
    )


def tail_signature(ratio: torch.Tensor, dense: bool = False) -> Signature | None:
    """Violations concentrated in a suffix of the last dimension: a tail tile mishandled. ``dense``: the bad
    columns must be bad in most rows (a few corrupted elements are sparse, not a tile)."""
    if ratio.dim() == 0 or ratio.shape[-1] < 4:
        return None
    over = (ratio > 1).reshape(-1, ratio.shape[-1])
    bad_cols = over.any(0)
    if dense and (
        over.shape[0] < 2 or not bool(bad_cols.any()) or float(over[:, bad_cols].float().mean()) < 0.5
    ):
        return None
    if not bool(bad_cols.any()) or bool(bad_cols.all()):
        return None
    n = bad_cols.numel()
    first = int(bad_cols.nonzero()[0])
    if not bool(bad_cols[first:].all()):
        return periodic_signature(bad_cols)
    tail = n - first
    return sig(
        "tail-pattern",
        f"errors only in the last {tail} of {n} columns (a mishandled tail tile)",
        tail_columns=float(tail),
        columns=float(n),
    )


def periodic_signature(bad_cols: torch.Tensor) -> Signature | None:
    idx = bad_cols.nonzero().flatten()
    for period in (8, 16, 32, 64, 128):
        if (
            bad_cols.numel() >= 2 * period
            and idx.numel() > 1
            and bool(((idx % period) == idx[0] % period).all())
        ):
            return sig(
                "tile-pattern",
                f"errors repeat every {period} columns (a tile-period pattern)",
                period=float(period),
            )
    return None


OVERFLOW_ADVICE = {
    "forward": "exp overflowed (subtract the row max before exp)",
    "gradient": "exp overflowed in the backward (build the gradient from the forward's max-subtracted "
    "probabilities or its saved logsumexp, not from exp(x) again)",
    "large-inputs": "an intermediate overflowed on inputs past exp's range (|x| > 80): keep intermediates "
    "in range (shift or scale before exponentiating or squaring)",
}


def overflow_where(op: str, grad: str) -> str:
    """Which OVERFLOW_ADVICE fits: a family with exp in its forward or its backward, or any family whose
    inputs were past exp's range (the only other way ``diagnose`` calls a NaN an exp overflow)."""
    if op not in EXP_FAMILIES:
        return "large-inputs"
    return "gradient" if grad else "forward"


def nan_signature(
    out: torch.Tensor, ref: torch.Tensor, exp_overflow: bool = False, where: str = "forward"
) -> Signature | None:
    """NaN/Inf introduced where the oracle is finite (``exp_overflow``: by an exp, overflow-nan, with the
    advice for ``where``: OVERFLOW_ADVICE), or swallowed where the oracle is not."""
    o = out.to(torch.float64)
    introduced = int((~o.isfinite() & ref.isfinite()).sum())
    swallowed = int((o.isfinite() & ~ref.isfinite()).sum())
    if swallowed:
        return sig(
            "nan-pattern",
            f"{swallowed} non-finite result(s) replaced by finite values (NaN/Inf swallowed)",
            swallowed=float(swallowed),
            introduced=float(introduced),
        )
    if introduced and exp_overflow:
        return sig(
            "overflow-nan",
            f"{introduced} NaN/Inf result(s) where the oracle is finite: {OVERFLOW_ADVICE[where]}",
            introduced=float(introduced),
        )
    if introduced:
        cause = "overflow" if bool(o.isinf().any()) else "nan-pattern"
        return sig(
            cause, f"{introduced} NaN/Inf result(s) where the oracle is finite", introduced=float(introduced)
        )
    return None


# ---- structure of the error field: sparse, offset, garbage, row scale, noise ---------------------------


SPARSE_REST = 8  # elements within the bound that "the rest" must count at least
SPARSE_SHARE = 3  # and at least this many times the corrupted ones


def sparse_signature(cmp: Any) -> Signature | None:
    """A few elements far over the bound, standing out from the rest (which are within it)."""
    ratio, err = cmp.ratio, cmp.err
    if bool(((ratio > 1) & ~err.isfinite()).any()):
        return None
    bad = (ratio > 3) & err.isfinite()  # corrupted: well past the bound
    marginal = (ratio > 1) & ~bad  # a few marginal violations do not hide the corrupted ones
    n_bad, n = int(bad.sum()), ratio.numel()
    if n_bad == 0 or n_bad > max(8, n // 200) or int(marginal.sum()) > max(4, n // 50):
        return None
    if n - n_bad < max(SPARSE_REST, SPARSE_SHARE * n_bad):
        return None  # "a few corrupted, the rest within the bound" needs a rest: a tiny output wrong everywhere is not
    good = err[~bad & err.isfinite()]
    floor = float(good.quantile(0.99)) if good.numel() > 1 else 0.0
    if float(err[bad].min()) < 5 * floor:
        return None
    idx = [list(map(int, i)) for i in bad.nonzero()[:5]]
    where = ", ".join(str(i) for i in idx) + (" ..." if n_bad > 5 else "")
    return sig(
        "sparse",
        f"{n_bad} of {n} element(s) corrupted (at {where}), the rest within the bound",
        corrupted=float(n_bad),
        indices=where,
    )


def offset_signature(signed: torch.Tensor, ref: torch.Tensor) -> Signature | None:
    """The error is (almost all) a constant, or a constant per block along the last dimension."""
    e = signed.to(torch.float64)
    if not bool(e.isfinite().all()) or e.numel() < 8:
        return None
    energy = float((e**2).mean())
    if energy == 0:
        return None
    mean = float(e.mean())
    # (block, residual energy, means): one constant (block 0), then one per row, then per tile from the largest
    fits: list[tuple[int, float, torch.Tensor]] = []
    if mean**2 >= 0.9 * energy and _spread(e) < 0.3 * abs(mean):
        fits.append((0, float(((e - mean) ** 2).mean()), torch.tensor([mean])))
    for block in _blocks(e):
        means = e.reshape(-1, block).mean(1, keepdim=True)
        resid = float(((e.reshape(-1, block) - means) ** 2).mean())
        if float((means**2).mean()) >= 0.9 * energy and resid < 0.05 * energy:
            fits.append((block, resid, means))
    # the coarsest structure that fits, unless a finer one leaves a tenth of its residual or less
    for i, (block, resid, means) in enumerate(fits):
        if resid > OFFSET_EXACT * energy and any(r < OFFSET_FINER * resid for _, r, _ in fits[i + 1 :]):
            continue
        if block == 0:
            return sig(
                "offset", f"a constant offset of {mean:.3g} on every element", offset=mean, block="all"
            )
        lo, hi = float(means.min()), float(means.max())
        where = (
            "one constant per row" if block == e.shape[-1] else f"one constant per block of {block} columns"
        )
        return sig(
            "offset",
            f"{where} ({lo:.3g} to {hi:.3g}) added to the output",
            offset=float(means.abs().max()),
            block=float(block),
        )
    return None


OFFSET_EXACT = 1e-6  # a residual below this share of the error energy is rounding: nothing finer is needed
OFFSET_FINER = (
    0.1  # a finer offset is named over a coarser one only where it leaves this share of its residual
)


def _spread(e: torch.Tensor) -> float:
    return float(e.std()) if e.numel() > 1 else 0.0


def _blocks(e: torch.Tensor) -> list[int]:
    """Block sizes along the flattened last dimension: tiles of 8..128 columns, and whole rows."""
    n = e.shape[-1] if e.dim() else 1
    sizes = [b for b in (128, 64, 32, 16, 8) if b < n and n % b == 0]
    return ([n] if e.dim() > 1 and n >= 8 else []) + sizes


def garbage_signature(out: torch.Tensor, ref: torch.Tensor, cmp: Any) -> Signature | None:
    """Most elements wrong by as much as the result itself, or more: no precision model explains that."""
    o, r = out.to(torch.float64), ref.to(torch.float64)
    ok = o.isfinite() & r.isfinite()
    if int(ok.sum()) < 8 or float((cmp.ratio > 1).float().mean()) < 0.25:
        return None
    o, r = o[ok], r[ok]
    err_rms, ref_rms = _rms(o - r), _rms(r)
    corr = _corr(o, r)
    if not (err_rms >= 10 * ref_rms or (err_rms >= 0.5 * ref_rms and corr < 0.5)):
        return None
    return sig(
        "garbage",
        f"errors far beyond any precision model (rms error {err_rms:.3g} against outputs of rms {ref_rms:.3g}, "
        f"correlation {corr:.2f}): not an accumulator width",
        error_rms=err_rms,
        output_rms=ref_rms,
        correlation=round(corr, 3),
    )


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a - a.mean(), b - b.mean()
    den = float(a.norm() * b.norm())
    return float((a * b).sum()) / den if den > 0 else 0.0


def row_scale_signature(signed: torch.Tensor, ref: torch.Tensor) -> Signature | None:
    """err = δ_row × ref: each row off by one factor (its normaliser or reduction is imprecise)."""
    if ref.dim() < 2 or ref.shape[-1] < 8:
        return None
    e, r = signed.to(torch.float64), ref.to(torch.float64)
    if not bool(e.isfinite().all()):
        return None
    r2 = r.reshape(-1, r.shape[-1])
    e2 = e.reshape(-1, r.shape[-1])
    den = (r2**2).sum(1, keepdim=True)
    delta = (e2 * r2).sum(1, keepdim=True) / den.clamp_min(1e-300)  # least squares per row
    energy = float((e2**2).sum())
    if energy == 0 or float(((e2 - delta * r2) ** 2).sum()) > 0.1 * energy:
        return None
    return sig(
        "row-scale",
        f"each row is off by one factor (relative {float(delta.abs().max()):.3g} at most): "
        "the row's reduction or normaliser is imprecise",
        max_row_factor=float(delta.abs().max()),
    )


NOISE_MIN = 16  # elements: fewer cannot show that errors are diffuse and unbiased


def noise_signature(cmp: Any) -> Signature | None:
    """Diffuse errors: many elements over the bound, unbiased."""
    over = float((cmp.ratio > 1).float().mean())
    if over < 0.02 or cmp.ratio.numel() < NOISE_MIN or _biased(cmp.signed, cmp.ref) is not None:
        return None
    e = cmp.signed[cmp.signed.isfinite()]
    return sig(
        "noise",
        f"diffuse unbiased errors on {over:.0%} of elements (rms {_rms(e):.3g}), no accumulator width fits",
        over_fraction=round(over, 4),
        error_rms=_rms(e),
    )


# ---- the entry point used by kcgate.engine.checks.verdict -------------------------------------------------


def semantics_signature(ctx: Any, trial: Any, nonfinite: bool = False) -> Signature | None:
    """The forward output, or the gradient that decides the trial, within the bound of one of the family's
    known mistakes (``OpFamily.mistakes``): "matches the op with the causal mask dropped". ``nonfinite``:
    an element NaN (or the same infinity) in both the output and the mistake's oracle matches too."""
    if trial.out is None:
        return None
    if trial.grad:
        return grad_semantics_signature(ctx, trial, nonfinite)
    if getattr(ctx.op, "mistakes", None) is None:
        return None
    if ctx.contract.tolerance.method not in ("error-bound", "relative"):
        return None  # the allowance must be an absolute error to hold another oracle to it
    up = upcast(trial.inputs)
    out = trial.out.detach().to(torch.float64)
    for what, family in ctx.op.mistakes():
        with torch.no_grad():
            alt = family.oracle(*up).to(torch.float64)
            allowed = family.bound(up, alt, ctx.bound_args())
        if alt.shape != out.shape:
            continue
        there = budget_against(out, alt, allowed, nonfinite)
        if there <= 1:
            return sig(
                "wrong-semantics",
                f"matches the op with {what} (budget {there:.2g} against it){_alike(out, trial.cmp, nonfinite)}",
                mistake=what,
                budget_there=round(there, 4),
            )
    return None


def grad_semantics_signature(ctx: Any, trial: Any, nonfinite: bool = False) -> Signature | None:
    """The deciding gradient within the gradient bound of a known mistake's own gradient (fp64 autograd
    through the mistaken oracle, the same dY): "the gradient of logits matches the op with the mean over
    every row, ignored ones included". The family's known mistakes, then its known wrong backwards
    (``OpFamily.grad_mistakes``: the forward right, the gradient formula wrong)."""
    if trial.dy is None or ctx.contract.tolerance.method == "abs-rel":
        return None
    idx = [i for i in range(len(trial.inputs)) if ctx.op.input_name(i) == trial.grad]
    if len(idx) != 1:
        return None
    i = idx[0]
    out = trial.out.detach().to(torch.float64)
    known = [f() for f in (getattr(ctx.op, "mistakes", None), getattr(ctx.op, "grad_mistakes", None)) if f]
    for what, family in (m for group in known for m in group):
        if family.grad_bound is None:
            continue
        try:
            up, refs = reference_grads(SimpleNamespace(op=family), trial.inputs, trial.dy)  # type: ignore[arg-type]
            with torch.no_grad():
                allowed = family.grad_bound(up, trial.dy.to(torch.float64), refs, ctx.grad_bound_args())[i]
        except Exception:  # a mistake whose oracle has no gradient here: not this one
            continue
        if allowed is None or refs[i].shape != out.shape:
            continue
        there = budget_against(out, refs[i], allowed, nonfinite)
        if there <= 1:
            return sig(
                "wrong-semantics",
                f"the gradient of {trial.grad} matches the op with {what} (budget {there:.2g} against it)"
                f"{_alike(out, trial.cmp, nonfinite)}",
                mistake=what,
                budget_there=round(there, 4),
            )
    return None


def budget_against(out: torch.Tensor, alt: torch.Tensor, allowed: torch.Tensor, nonfinite: bool) -> float:
    """max |out − alt|/allowed (NaN: infinite). ``nonfinite``: an element NaN in both, or the same infinity in
    both, matches; but only where the finite elements are most of the output (an output that is NaN nearly
    everywhere matches any mistake that is, and says nothing)."""
    ratio = ((out - alt).abs() / allowed.clamp_min(1e-300)).nan_to_num(nan=math.inf)
    if nonfinite:
        alike = (out.isnan() & alt.isnan()) | (out.isinf() & (out == alt))
        if int(alike.sum()) * 2 > out.numel():
            return math.inf
        ratio = ratio.masked_fill(alike, 0.0)
    return float(ratio.max()) if ratio.numel() else math.inf


def nonfinite_semantics_signature(ctx: Any, trial: Any) -> Signature | None:
    """NaN/Inf where the contract's oracle is finite that one of the family's known mistakes gives in exactly
    those elements, the rest within that mistake's bound: the mistake, not an overflow (a causal mask that
    hides each query's own key leaves the first query no key, and a softmax over no key is NaN)."""
    if trial.out is None or trial.cmp is None:
        return None
    o, ref = trial.out.detach().to(torch.float64), trial.cmp.ref.to(torch.float64)
    if o.shape != ref.shape or not bool((~o.isfinite() & ref.isfinite()).any()):
        return None
    if bool((o.isfinite() & ~ref.isfinite()).any()):
        return None  # NaN swallowed as well: nan_signature names that
    return semantics_signature(ctx, trial, nonfinite=True)


def _alike(out: torch.Tensor, cmp: Any, nonfinite: bool) -> str:
    """The evidence of a non-finite match, in words: "; row 0 of each of the 8 (2×4) leading slices is NaN as
    in that mistake's output, where the contract's oracle is finite"."""
    if not nonfinite or cmp is None:
        return ""
    bad = ~out.isfinite() & cmp.ref.to(torch.float64).isfinite()
    what = "NaN" if bool(out[bad].isnan().all()) else "NaN/Inf"
    where = f"{int(bad.sum())} element(s) are {what}"
    if out.dim() >= 2 and bool((bad.all(-1) == bad.any(-1)).all()):  # whole rows
        rows = bad.all(-1).reshape(-1, out.shape[-2])
        idx = rows.any(0).nonzero().flatten().tolist()
        which = ", ".join(map(str, idx[:5])) + (" ..." if len(idx) > 5 else "")
        which, verb = (f"row {which}", "is") if len(idx) == 1 else (f"rows {which}", "are")
        lead = "×".join(map(str, out.shape[:-2]))
        if lead and bool((rows == rows[0]).all()):  # the same rows in every leading slice (batch, head)
            where = f"{which} of each of the {rows.shape[0]} ({lead}) leading slices {verb} {what}"
        else:
            where = f"{int(rows.sum())} whole row(s) ({which}) are {what}"
    return f"; {where} as in that mistake's output, where the contract's oracle is finite"


# A within-the-bound failure is named as a known mistake when the kernel's rms error against that mistake's
# oracle is at most this share of its error against the contract's: the error all but vanishes (an eps
# mismatch in fp32 drops it 30-100x; a real fault keeps it, as no mistaken oracle reproduces it).
EXPLAINED_SHARE = 0.25


def explain_excess(ctx: Any, ts: Sequence[Any]) -> Signature | None:
    """An excess-error failure that one of the family's variants or known mistakes explains: "eps = 1e-6
    instead of the contract's 1e-5", "eps added outside the square root". The bound cannot tell these apart
    (they are within it), so the test is closer: the error against the mistaken oracle, rerun on the same
    inputs, all but vanishes (``EXPLAINED_SHARE``); the best-fitting mistake is named."""
    known = [
        f() for f in (getattr(ctx.op, "variants", None), getattr(ctx.op, "mistakes", None)) if f is not None
    ]
    fwd = [t for t in ts if not t.grad and t.out is not None and t.cmp is not None]
    if not known or not fwd:
        return None
    best: tuple[float, str] | None = None
    for what, family in (m for group in known for m in group):
        shares = []
        for t in fwd:
            up = upcast(t.inputs)
            with torch.no_grad():
                alt = family.oracle(*up).to(torch.float64)
            if alt.shape != t.out.shape:
                break
            out = t.out.detach().to(torch.float64)
            own = _rms_finite(out - t.cmp.ref.to(torch.float64))
            shares.append(_rms_finite(out - alt) / own if own > 0 else math.inf)
        else:
            share = max(shares, default=math.inf)
            if share <= EXPLAINED_SHARE and (best is None or share < best[0]):
                best = (share, what)
    if best is None:
        return None
    return sig(
        "wrong-semantics",
        f"matches the op with {best[1]} (its rms error against that falls to {best[0]:.2g} of the error "
        "against the contract's oracle)",
        mistake=best[1],
        error_share=round(best[0], 4),
    )


def _rms_finite(e: torch.Tensor) -> float:
    e = e[e.isfinite()]
    return float(e.pow(2).mean().sqrt()) if e.numel() else math.inf


def _large_inputs(inputs: Sequence[torch.Tensor]) -> bool:
    """Inputs past exp's range (ln of fp32's max is 88.7): a NaN from them is an exp overflow."""
    xs = [x for x in inputs if x.is_floating_point() and x.numel()]
    return any(float(x.detach().double().nan_to_num(0, 0, 0).abs().max()) > 80 for x in xs)


def _operand(ctx: Any, trial: Any) -> Signature | None:
    if ctx.op.name not in MATMUL_LIKE or trial.grad:
        return None
    return operand_signature(trial.out, trial.cmp.ref, trial.inputs, ctx.op.oracle, ctx.op.float_inputs)


def _accumulator(ctx: Any, ts: Sequence[Any]) -> Signature | None:
    pts: list[tuple[int, float]] = []
    part: list[dict[int, float] | None] = []
    for t in ts:
        if t.grad:  # the trial is decided by a gradient: fit its own reduction
            found = grad_dot_scale(ctx, t) if t.cmp is not None else None
            if found is not None:
                pts.append((found[0], normalized_error(t.cmp.err, found[1])))
            continue
        scale = dot_scale(ctx.op.name, t.inputs) if t.cmp is not None else None
        if scale is not None:
            pts.append((ctx.op.reduction_len(t.shape), normalized_error(t.cmp.err, scale)))
            part.append(partial_sums(ctx.op.name, t.inputs))
    if not pts:
        return None
    order = sorted(range(len(pts)), key=lambda i: pts[i])
    parts = [part[i] for i in order] if len(part) == len(pts) and all(p is not None for p in part) else None
    pts = [pts[i] for i in order]
    declared = dtypes.FORMATS[dtypes.canonical(ctx.contract.accumulate)].p
    outs = [t.out for t in ts if not t.grad and t.out is not None]
    named = accumulator_signature(
        [k for k, _ in pts],
        [e for _, e in pts],
        declared,
        output_grid(outs),
        parts,  # type: ignore[arg-type]
    )
    if named is not None and ctx.op.name not in MATMUL_LIKE:  # tf32 is a tensor-core operand format only
        return Signature(
            named.cause,
            named.summary.replace("fp16 or tf32", "fp16"),
            tuple(
                (k, v.replace("fp16 or tf32", "fp16") if isinstance(v, str) else v) for k, v in named.evidence
            ),
        )
    return named


PARTIAL_SAMPLE = 256  # output elements whose partial sums a matmul's same-sign test measures


def partial_sums(op: str, inputs: Sequence[torch.Tensor]) -> dict[int, float] | None:
    """For each rounding interval B: the rms over output elements of √(Σ_j S_jB²)/‖a∘b‖₂, S_jB the exact
    partial sum after j·B terms (the last one the whole sum): what a running sum rounded every B terms
    rounds, measured on these inputs (zero-mean terms give ``_rounded``'s √((⌈K/B⌉ + 1)/2))."""
    f = [t.detach().to(torch.float64) for t in inputs]
    if op in ("sum", "mean"):
        terms = f[0].reshape(-1, f[0].shape[-1])
    elif op in ("matmul", "bmm") and f[0].dim() == f[1].dim() and f[0].dim() in (2, 3):
        a, b = (t if t.dim() == 3 else t.unsqueeze(0) for t in f[:2])
        g = torch.Generator().manual_seed(0)
        n = a.shape[0] * a.shape[1] * b.shape[2]
        pick = torch.randperm(n, generator=g)[:PARTIAL_SAMPLE]
        bi, rest = pick // (a.shape[1] * b.shape[2]), pick % (a.shape[1] * b.shape[2])
        terms = a[bi, rest // b.shape[2], :] * b[bi, :, rest % b.shape[2]]
    else:
        return None
    k = terms.shape[-1]
    cs = terms.cumsum(-1)
    scale = (terms**2).sum(-1).sqrt()
    ok = scale > 0
    if not bool(ok.any()):
        return None
    out = {}
    for blk in ACC_BLOCKS:
        idx = torch.arange(blk - 1, k + blk - 1, blk).clamp_max(k - 1).unique()
        energy = (cs[:, idx] ** 2).sum(-1).sqrt()
        out[blk] = float(((energy[ok] / scale[ok]) ** 2).mean().sqrt())
    return out


GRIDS = (("bf16", torch.bfloat16), ("fp16 or tf32", torch.float16))
GRID_SHARE = (
    0.9  # this share of an fp32/fp64 output's values exactly representable in a format: it ends there
)


def output_grid(outs: Sequence[torch.Tensor]) -> str | None:
    """The narrower format whose values a wide (fp32/fp64) output consists of, if any: a running sum kept in
    bf16 returns bf16 values, whatever dtype it is cast to last. None for narrow outputs (no evidence)."""
    vals = [o.detach().flatten() for o in outs if o.dtype in (torch.float32, torch.float64)]
    if not vals:
        return None
    v = torch.cat([x.to(vals[0].dtype) for x in vals])
    v = v[v.isfinite() & (v != 0)]
    if v.numel() < 16:
        return None
    for name, dt in GRIDS:
        if float((v.to(dt).to(v.dtype) == v).float().mean()) >= GRID_SHARE:
            return name
    return None
