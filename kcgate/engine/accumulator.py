"""Precision evidence of a reduction: the accumulator width a K sweep fits (the rounding interval's model),
the operands' rounding (tf32, bf16) and the outputs' grid; rows of engine/naming.py."""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import Any

import torch

from kcgate.engine.backward import grad_dot_scale
from kcgate.engine.diagnosis import rms, sig
from kcgate.numerics.emulate import round_mantissa
from kcgate.numerics.ops.base import upcast
from kcgate.numerics.reductions import accumulated, picker
from kcgate.results.model import Signature
from kcgate.vocab import dtypes
from kcgate.vocab.catalogue import MATMUL_LIKE, has

# Significand bits (with the implicit bit) of the formats an accumulator or operand path may use.
FORMAT_BITS: dict[str, int] = {"fp32": 24, "fp16 or tf32": 11, "bf16": 8, "fp8 e4m3": 4}


# err_rms ≈ C·√K·u·‖a∘b‖₂ for a running sum rounded every 32 terms (the MMA-tile granularity);
# C was fitted once on emulated fp16/bf16 accumulators so their effective bits come out as 11 and 8.
_ACC_C = 0.0588


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


ACC_BLOCKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


ACC_GROWTH = 1.5  # the error must grow this much over the sweep: a flat one is not an accumulator


ACC_TIE = 0.05  # rounding intervals whose fit is within this residual of the best fit equally well


FORMAT_MATCH = 0.75  # bits: an interval's fitted width this close to a format's names the format


def _rounded(k: int, block: int) -> float:
    return math.sqrt((math.ceil(k / block) + 1) / 2)


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
    e_exact = rms(o - ref)
    if not e_exact > 0:
        return None
    best = None
    for name, bits in (("tf32", 11), ("bf16", 8)):
        for mode in ("truncate", "nearest"):
            xs = [round_operands(t, bits, mode) if i in float_inputs else t for i, t in enumerate(inputs)]
            e = rms(o - oracle(*xs).to(torch.float64))
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


# A running sum rounded to u every B terms: nerr(K) ≈ C0·u·√((⌈K/B⌉ + 1)/2) (the rounded partial sums are
# ≈ √(jB)·rms(a∘b); C0 = 8·_ACC_C, so B = 32 at large K is the old C·√K·u). B is fitted with u: a
# sequential sum (B = 1) and a blocked one (B = 128) have different curves below and above K = B.
_ACC_C0 = 8 * _ACC_C


Partials = Sequence[dict[int, float]]  # per sweep point: B -> the rms of √(Σ_j S_jB²)/‖a∘b‖₂ on its own data


# ---- a custom op: the traced reductions emulated at each width (kcgate.numerics.reductions) ---------------

TRACED_FIT = 0.75  # log2: the kernel's excess error within this of an emulated running sum's fits its width
TRACED_OVER = 4.0  # the kernel's excess error at least this many times the declared width's largest emulated
ROW_SAME = 0.95  # |mean|/rms of the rows' relative factors past this: every row scaled alike
ROW_MORE = 0.3  # ... and this much past the emulated accumulator's: not its rounding (an unbiased variance)
KURTOSIS_RATIO = (
    2.0  # the error's kurtosis within this factor of the range of the fitting emulations' kurtoses
)
CAPTURED = 0.5  # share of the excess error's energy the emulated errors' span must hold, row by row
ROW_PER_FIELD = 8  # elements of a row per emulated error field regressed on (at most len(row) / this)


def kurtosis(e: torch.Tensor) -> float:
    """E[e⁴]/E[e²]² over the elements (3 for a Gaussian field; large where the error sits on a few places)."""
    m2 = float((e * e).mean())
    return float((e**4).mean()) / m2**2 if m2 > 0 else 1.0


def captured(e: torch.Tensor, fields: Sequence[torch.Tensor]) -> float | None:
    """The share of the error's energy that lies, row by row (the last dimension), in the span of the
    emulated accumulators' error fields (the first len(row)/ROW_PER_FIELD of them): where a rounded reduction
    moves the output (a norm's rows along 1 and x̂, a softmax's along its own row). None where a row is too
    short to regress on one field, or the error is 0. The test has power only where the fields share a span
    (one field captured by the others): independent sums (a bias gradient's columns) do not."""
    if e.dim() < 1 or not fields:
        return None
    m = min(len(fields), e.shape[-1] // ROW_PER_FIELD)
    total = float((e * e).sum())
    if m < 1 or not total > 0:
        return None
    rows = e.reshape(-1, e.shape[-1], 1)
    x = torch.stack([f.reshape(rows.shape[:2]) for f in fields[:m]], -1)  # (rows, L, m)
    try:
        proj = x @ torch.linalg.lstsq(x, rows, driver="gelsd").solution
    except RuntimeError:  # a degenerate system: no evidence either way
        return None
    return float((proj * proj).sum()) / total


def row_consistency(e: torch.Tensor, ref: torch.Tensor) -> float | None:
    """|mean|/rms over rows (the last dimension) of each row's least-squares factor <e, ref>/<ref, ref>: 1
    where every row is off by one factor of one sign, near 0 where the factors' signs vary (a rounding's);
    None for fewer than 4 rows of 16."""
    if e.dim() < 2 or e.shape[-1] < 16:
        return None
    er, rr = e.reshape(-1, e.shape[-1]), ref.reshape(-1, e.shape[-1])
    den = (rr * rr).sum(1)
    ok = den > 0
    if int(ok.sum()) < 4:
        return None
    f = (er * rr).sum(1)[ok] / den[ok]
    m2 = float(f.pow(2).mean())
    return float(f.mean().abs()) / math.sqrt(m2) if m2 > 0 else None


def traced_accumulator(ctx: Any, worst: Any) -> Signature | None:
    """A custom op's failure fitted by its reference with the traced reductions (sum, mean, var over a
    dimension; in a backward, the sums over broadcast dimensions too) accumulated at fp16, bf16 and fp32: the
    reference's sandbox child runs the emulation and sends the deciding output or gradient; the fit is here."""
    if ctx.op.name != "custom" or worst.cmp is None:
        return None
    ref = worst.cmp.ref.to("cpu", torch.float64)
    if worst.grad:
        names = list(ctx.op.input_names)
        if worst.dy is None or worst.grad not in names:
            return None
        index = names.index(worst.grad)
        if worst.inputs[index].numel() * 2 > worst.dy.numel():
            return (
                None  # not a broadcast input (a weight, a bias): its gradient is no sum of the backward's own
            )
        out, dtype = ref + worst.cmp.signed.to("cpu", torch.float64), worst.inputs[index].dtype
    else:
        if not isinstance(worst.out, torch.Tensor) or not worst.out.is_floating_point():
            return None
        index, out, dtype = None, worst.out.detach().to("cpu", torch.float64), worst.out.dtype
    if out.shape != ref.shape or not bool(out.isfinite().all()) or not bool(ref.isfinite().all()):
        return None
    got = _emulated(ctx, worst, index)
    if got is None:
        return None
    declared = dtypes.FORMATS[dtypes.canonical(ctx.contract.accumulate)].p
    return traced_signature(out, ref, dtype, got, declared, rows=not worst.grad)


def _emulated(ctx: Any, worst: Any, index: int | None) -> dict[str, Any] | None:
    root = inspect.unwrap(ctx.op.oracle)  # a custom op's oracle wraps its reference (run in fp64)
    name, outputs = getattr(worst, "output", ""), list(ctx.contract.outputs)
    dy = None if index is None else worst.dy.detach().to("cpu", torch.float64)
    remote = getattr(root, "remote", None)
    try:
        if remote is not None:
            got = remote("accumulated")(upcast(worst.inputs), name, outputs, dy, index)
        else:
            got = accumulated(root, upcast(worst.inputs), picker(name, outputs), dy, index)
    except Exception:  # noqa: BLE001 — no emulation, no evidence: the case keeps its other names
        return None
    return got if isinstance(got, dict) else None


def traced_signature(
    out: torch.Tensor,
    ref: torch.Tensor,
    out_dtype: torch.dtype,
    got: dict[str, Any],
    declared_bits: int,
    rows: bool = False,
) -> Signature | None:
    """Name the accumulator whose emulation errs as the kernel does: the kernel's error in excess of its
    output's own rounding (√(rms² − rms(round(ref) − ref)²)) within 2^TRACED_FIT of the reference's with its
    reductions summed at a width 3 bits or more under the declared one (every rounding interval B emulated),
    and TRACED_OVER times the declared width's worst. ``got``: the emulation as kcgate.numerics.reductions
    sends it (checked as data). Several widths fitting: the cause is named, the width left open. Refused where
    every row is off by one factor of one sign and the emulation's are not (``rows``: required to be testable,
    ≥ 4 rows of 16: a forward output), where the excess lies outside the emulated errors' span row by row, and
    where its kurtosis is past KURTOSIS_RATIO times the largest of the fitting emulations' or under the smallest
    over it (the error sits elsewhere than a rounded sum puts it: a softcap never applied)."""
    runs = got.get("runs")
    k = got.get("k")
    if not isinstance(runs, list) or not isinstance(k, int):
        return None
    base = rms(ref.to(out_dtype).to(torch.float64) - ref)
    total = rms(out - ref)
    if not math.isfinite(total) or total <= base:
        return None
    excess = math.sqrt(total**2 - base**2)
    widths = {"fp16": 11, "bf16": 8, "fp32": 24}
    errs: list[tuple[str, int, float]] = []
    for run in runs:
        if not (isinstance(run, (list, tuple)) and len(run) == 3 and run[0] in widths):
            return None
        fmt, block, emu = run
        if not isinstance(emu, torch.Tensor) or emu.shape != ref.shape or not isinstance(block, int):
            return None
        errs.append((str(fmt), block, rms(emu.to(torch.float64) - ref)))
    wide = [e for f, _, e in errs if widths[f] > declared_bits - 3]
    if not wide or not excess > TRACED_OVER * max(wide):
        return None
    fits = [
        (f, b, e)
        for f, b, e in errs
        if widths[f] <= declared_bits - 3 and e > 0 and abs(math.log2(excess / e)) <= TRACED_FIT
    ]
    if not fits:
        return None
    f, b, e = min(fits, key=lambda x: abs(math.log2(excess / x[2])))
    emu = next(run[2] for run in runs if run[0] == f and run[1] == b).to(torch.float64)
    q_k, q_e = row_consistency(out - ref, ref), row_consistency(emu - ref, ref)
    if rows and (q_k is None or q_e is None):
        return None  # too few rows to tell a rounding's factors of either sign from one systematic factor
    if q_k is not None and q_e is not None and q_k >= ROW_SAME and q_k - q_e > ROW_MORE:
        return None  # every row off by one factor of one sign: a systematic change, not a rounding's
    fmts = sorted({x[0] for x in fits}, key=lambda x: -widths[x])
    kurts = [
        kurtosis(run[2].to(torch.float64) - ref)
        for run in runs
        if run[0] == f and run[1] in {x[1] for x in fits if x[0] == f}
    ]
    if not min(kurts) / KURTOSIS_RATIO <= kurtosis(out - ref) <= max(kurts) * KURTOSIS_RATIO:
        return None  # the error sits elsewhere than a rounded sum puts it (kurtosis out of the fits' range)
    fields = [run[2].to(torch.float64) - ref for run in runs if run[0] in fmts]
    fields.sort(key=lambda t: abs(math.log2(max(rms(t), 1e-300) / excess)))
    share = captured(out - ref, fields[1:]) if len(fields) > 2 else None
    power = captured(fields[0], fields[1:]) if share is not None else None  # do the fields share a span?
    if (
        power is not None
        and power >= CAPTURED
        and share is not None
        and share < CAPTURED * excess**2 / total**2
    ):
        return None  # the error lies elsewhere than a rounded reduction moves the output: another change
    bits = widths[f] - math.log2(excess / e)
    same = [x[1] for x in fits if x[0] == f]
    art = {x: "an" if x.startswith("fp") else "a" for x in fmts}
    every = f"rounding {_every(same)}, ≈{bits:.1f} effective bits"
    which = (
        f"behaves like {art[f]} {f} accumulator {every}"
        if len(fmts) == 1
        else f"fits {' or '.join(f'{art[x]} {x}' for x in fmts)} accumulator, the emulation cannot tell which "
        f"(as {f}: {every})"
    )
    return sig(
        "low-precision-accumulator",
        f"{which}: the reference with its traced reductions (up to {k} terms) summed in {f} errs {e:.3g} rms, "
        f"the kernel {excess:.3g} beyond its final rounding (summed in the declared width: {max(wide):.2g})",
        effective_bits=round(bits, 2),
        nearest=" or ".join(fmts),
        block=float(b),
        ratio=round(excess / e, 3),
    )
