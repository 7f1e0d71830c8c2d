"""C-PRC-04 overflow probe: fp8 outputs whose exact value lies beyond the format's range must give the
declared ``overflow`` result — ``saturate`` ±max, ``inf`` ±inf, ``nan`` NaN — and in-range outputs in the
same call must still be correctly rounded.

The probe scales the first float input by a power of two so that about half of the fp64 oracle's
outputs land beyond max (both signs where the op allows it: matmul yes, gelu/silu only positive), and
judges every element against a reference kcgate computes itself (never a torch cast, whose overflow
behaviour differs by format and build). Non-fp8 outputs are not probed.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import torch

from kcgate.engine.checks.c_support import count_budget, out_ulp, rounding_slack
from kcgate.engine.diagnosis import sig
from kcgate.engine.harness import run_trial
from kcgate.engine.trial import CaseContext, Trial, oracle
from kcgate.numerics.metrics import Comparison, compare, to_metrics
from kcgate.numerics.ops.base import BoundArgs, Tensors, upcast
from kcgate.results.model import Signature
from kcgate.vocab import dtypes

EXPECTED = {"saturate": "±max", "inf": "±inf", "nan": "NaN"}
HEADROOM = 2.0  # the median |output| of the probe lands at ~2·max (rounded up to a power of two)


@dataclass(frozen=True)
class Probe:
    """The overflow probe's trial (in-range elements measured for rounding) and its policy verdict."""

    trial: Trial
    budget: float
    signature: Signature | None
    message: str
    extra: dict[str, float]


def fp8_format(dtype: torch.dtype) -> dtypes.Format | None:
    """The format record of an fp8 dtype kcgate knows (float8_e4m3fn, float8_e5m2), else None."""
    name = str(dtype).removeprefix("torch.")
    return dtypes.FORMATS.get(name) if name.startswith("float8") else None


def probe(ctx: CaseContext) -> Probe | None:
    """Run the overflow probe for an fp8 output dtype; None when not applicable."""
    fmt = fp8_format(ctx.out_dtype)
    xs = overflow_inputs(ctx, fmt.max) if fmt else None
    if fmt is None or xs is None:
        return None
    t = run_trial(ctx, inputs=xs, salt="overflow")
    if t.out is None or t.issues:  # raised, bad shape, stray writes: the verdict reports them
        return Probe(t, 0.0, None, "", {})
    ref = t.ref if t.ref is not None else oracle(ctx, xs)
    slack = _slack(ctx, xs, ref)
    _in_range_metrics(ctx, t, ref, slack, fmt)
    return judge(t.out, ref, slack, fmt, str(ctx.contract.param("overflow")), t)


def overflow_inputs(ctx: CaseContext, fmax: float) -> Tensors | None:
    """Fresh inputs with the first float input scaled by 2^k (exact) so the median |output| is ≥ 2·max."""
    xs = ctx.inputs(ctx.case.shape, "overflow")
    pos = next((i for i, x in enumerate(xs) if x.is_floating_point()), None)
    if pos is None:
        return None
    ref = oracle(ctx, xs).abs().flatten()
    ref = ref[ref.isfinite() & (ref > 0)]
    if ref.numel() == 0:
        return None
    scale = 2.0 ** math.ceil(math.log2(HEADROOM * fmax / float(ref.median())))
    x = xs[pos]
    limit = torch.finfo(x.dtype).max
    scaled = (x.to(torch.float64) * scale).clamp(-limit, limit).to(x.dtype)
    return tuple(scaled if i == pos else t for i, t in enumerate(xs))


def _slack(ctx: CaseContext, xs: Tensors, ref: torch.Tensor) -> torch.Tensor:
    """Absolute compute slack: the clean trials' slack, or the op's own compute-error bound (without the
    output rounding) where larger — the scaled inputs scale a reduction's error with them."""
    up = upcast(xs)
    args = BoundArgs(dtypes.unit_roundoff(ctx.contract.accumulate), 0.0, ctx.contract.tolerance.lam)
    return torch.maximum(rounding_slack(ctx, xs, ref), ctx.op.bound(up, ref, args).to(torch.float64))


def _in_range_metrics(
    ctx: CaseContext, t: Trial, ref: torch.Tensor, slack: torch.Tensor, fmt: dtypes.Format
) -> None:
    """The probe trial measures rounding on in-range elements only (|ref| ≤ max); the rest is policy."""
    assert t.out is not None
    allowed = 0.5 * out_ulp(ref, getattr(torch, fmt.name)) + slack
    cmp = compare(t.out, ref, allowed, "error-bound")
    keep = ref.abs() <= fmt.max
    zero = torch.zeros_like(cmp.err)
    t.cmp = Comparison(
        torch.where(keep, cmp.err, zero),
        torch.where(keep, cmp.signed, zero),
        cmp.allowed,
        torch.where(keep, cmp.ratio, zero),
        torch.where(keep, cmp.ulp, zero),
        cmp.ref,
    )
    t.metrics = to_metrics(t.cmp, dict(t.metrics.extra))


def judge(
    out: torch.Tensor, ref: torch.Tensor, slack: torch.Tensor, fmt: dtypes.Format, policy: str, t: Trial
) -> Probe:
    """Policy violations among overflowing elements; budget 2 per violating element (count_budget).

    Overflowing: RNE with an unbounded exponent exceeds max, i.e. |ref| > max + ½ ulp(max) (+ slack).
    Between max and that threshold (+ slack) either ±max or the policy's result is accepted."""
    o = out.to(torch.float64)
    a, sign = ref.abs(), ref.sign()
    half_ulp = 2.0 ** (math.floor(math.log2(fmt.max)) - fmt.p)
    over = a > fmt.max + half_ulp + slack
    edge = (a > fmt.max) & ~over
    ok = _is_policy(o, sign, fmt.max, policy)
    bad = (over & ~ok) | (edge & ~(ok | (o == sign * fmt.max)))
    beyond = over | edge
    n_bad, n_beyond = int(bad.sum()), int(beyond.sum())
    extra = {
        "overflow_elements": float(n_beyond),
        "overflow_negative": float((beyond & (ref < 0)).sum()),
        "overflow_violations": float(n_bad),
    }
    if not n_bad:
        return Probe(t, 0.0, None, "", extra)
    observed = Counter(classify(o[bad], sign[bad], fmt.max)).most_common(1)[0][0]
    i = int(bad.flatten().nonzero()[0])
    example = f"{float(ref.flatten()[i]):+.4g} -> {float(o.flatten()[i]):+.4g}"
    summary = (
        f"{fmt.name} overflow gives {observed}, not {policy} ({EXPECTED[policy]}): "
        f"{n_bad} of {n_beyond} overflowing elements, e.g. {example}"
    )
    signature = sig(
        "overflow",
        summary,
        policy=policy,
        observed=observed,
        violations=float(n_bad),
        example=example,
        format=fmt.name,
    )
    message = f"overflowing outputs break the declared overflow = {policy!r}: {summary}"
    return Probe(t, count_budget(n_bad), signature, message, extra)


def _is_policy(o: torch.Tensor, sign: torch.Tensor, fmax: float, policy: str) -> torch.Tensor:
    if policy == "nan":
        return o.isnan()
    return o == sign * (math.inf if policy == "inf" else fmax)


def classify(o: torch.Tensor, sign: torch.Tensor, fmax: float) -> list[str]:
    """What each overflowing output became: nan, inf, saturate (±max), wrapped (wrong sign, as integer
    wrap-around gives) or finite-wrong (right sign, finite, not max)."""
    kinds = torch.full(o.shape, 4)
    kinds = torch.where(o.abs() == fmax, 2, kinds)
    kinds = torch.where(o.isinf(), 1, kinds)
    kinds = torch.where(o * sign < 0, 3, kinds)
    kinds = torch.where(o.isnan(), 0, kinds)
    names = ("nan", "inf", "saturate", "wrapped", "finite-wrong")
    return [names[int(k)] for k in kinds.flatten()]
