"""Error patterns: an error field named as a cause (``results.Signature``): bias, tail and tile, NaN, sparse,
offset, garbage, row scale, noise; pure functions over tensors, rows of ``kcgate.engine.naming``'s table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from kcgate.results.model import Signature
from kcgate.vocab.catalogue import families
from kcgate.vocab.causes import INTEGRITY

# Families whose intermediates include exp(x): a NaN/Inf there is an exp overflow.
EXP_FAMILIES = families("exp")


def first_issue(issues: Sequence[str]) -> str:
    """The integrity issue to name first (the cause table's order; unknown issues after, alphabetically)."""
    rank = {name: i for i, name in enumerate(INTEGRITY)}
    return min(issues, key=lambda i: (rank.get(i, len(rank)), i))


def sig(cause: str, summary: str, **evidence: float | str) -> Signature:
    return Signature(cause, summary, tuple(sorted(evidence.items())))


# ---- bias and patterns --------------------------------------------------------------


def rms(x: torch.Tensor) -> float:
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
    if t is None or rms(signed) > ROUNDING_SCALE * rms(ref):
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
    """The error is (almost all) a constant, or a constant per block along the last dimension. Not where the
    reference is one value (a top-1 router's weights, all 1): there an offset and a factor are the same claim,
    and a wrong normaliser would be named an added term (megablocks#87)."""
    e = signed.to(torch.float64)
    if not bool(e.isfinite().all()) or e.numel() < 8:
        return None
    r = ref.to(torch.float64)
    if bool(r.isfinite().all()) and _spread(r) <= 1e-6 * float(r.abs().mean()):
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
        means, pred = _block_means(e, block)
        resid = float(((e - pred) ** 2).mean())
        if float((pred**2).mean()) >= 0.9 * energy and resid < 0.05 * energy:
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
        n = e.shape[-1]
        where = "one constant per row" if block == n else f"one constant per block of {block} columns"
        where += f" (the last one {n % block} columns)" if n % block else ""
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
    """Block sizes along the flattened last dimension: tiles of 8..128 columns (a partial last tile where
    the row holds at least two whole ones: a boundary shape's odd n), and whole rows."""
    n = e.shape[-1] if e.dim() else 1
    sizes = [b for b in (128, 64, 32, 16, 8) if b < n and (n % b == 0 or n >= 2 * b)]
    return ([n] if e.dim() > 1 and n >= 8 else []) + sizes


def _block_means(e: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's mean per block of ``block`` columns (the last one partial where n is no multiple), and
    those means spread back over the elements."""
    n = e.shape[-1] if e.dim() else 1
    rows = e.reshape(-1, n)
    which = torch.arange(n) // block
    count = torch.bincount(which).to(e.dtype)
    means = torch.zeros(rows.shape[0], count.numel(), dtype=e.dtype).index_add_(1, which, rows) / count
    return means.reshape(-1, 1), means[:, which].reshape(e.shape)


def garbage_signature(out: torch.Tensor, ref: torch.Tensor, cmp: Any) -> Signature | None:
    """Most elements wrong by as much as the result itself, or more: no precision model explains that."""
    o, r = out.to(torch.float64), ref.to(torch.float64)
    ok = o.isfinite() & r.isfinite()
    if int(ok.sum()) < 8 or float((cmp.ratio > 1).float().mean()) < 0.25:
        return None
    o, r = o[ok], r[ok]
    err_rms, ref_rms = rms(o - r), rms(r)
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
        f"diffuse unbiased errors on {over:.0%} of elements (rms {rms(e):.3g}), no accumulator width fits",
        over_fraction=round(over, 4),
        error_rms=rms(e),
    )


# ---- the entry point used by kcgate.engine.checks.verdict -------------------------------------------------


UNDERFLOW_X = 87.0  # exp(x) for x below −87.3 (ln of fp32's smallest normal) is subnormal, then 0 below −103


def underflow_inputs(inputs: Sequence[torch.Tensor]) -> bool:
    """Inputs below exp's range and none above it: a NaN from them is an exp that underflowed to 0 (then log 0,
    0·log 0 or 0/0), not an overflow."""
    xs = [x.detach().double().nan_to_num(0, 0, 0) for x in inputs if x.is_floating_point() and x.numel()]
    return any(float(x.min()) < -UNDERFLOW_X for x in xs) and all(float(x.max()) <= 80 for x in xs)


def underflow_signature(out: torch.Tensor, ref: torch.Tensor) -> Signature | None:
    """NaN/Inf introduced where the oracle is finite, on inputs below exp's range (``underflow_inputs``)."""
    o = out.to(torch.float64)
    introduced = int((~o.isfinite() & ref.isfinite()).sum())
    if not introduced or bool((o.isfinite() & ~ref.isfinite()).any()):
        return None
    return sig(
        "underflow",
        f"{introduced} NaN/Inf result(s) where the oracle is finite, on inputs below exp's range (x < "
        f"−{UNDERFLOW_X:g}): an exp underflowed to 0, then log 0, 0·log 0 or 0/0 (stay in log space: "
        "logaddexp or logsumexp, or clamp before the log)",
        introduced=float(introduced),
    )


def _large_inputs(inputs: Sequence[torch.Tensor]) -> bool:
    """Inputs past exp's range (ln of fp32's max is 88.7): a NaN from them is an exp overflow."""
    xs = [x for x in inputs if x.is_floating_point() and x.numel()]
    return any(float(x.detach().double().nan_to_num(0, 0, 0).abs().max()) > 80 for x in xs)
