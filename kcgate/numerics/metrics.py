"""Error measurement: ULP distance in the output dtype, abs/rel error, and budget used against a bound.

``budget_used`` = max over elements of |error| / allowed. NaN where the oracle is finite is an
infinite error (a category change, not a large number).

Two implementations of one comparison, chosen by where the tensors live (``torch_ops``):

* **torch ops where the tensors live** (``compare_on_device``, ``metrics_on_device``, below): every device
  but the CPU, and the CPU too under ``KCGATE_VERIFY=device``. Only summaries (scalars) come back.
* **numpy on CPU views** (``compare_on_host``, ``metrics_on_host``): the CPU's fast path. On the small
  tensors most cases compare numpy's per-operation cost is well under torch's dispatch (a 40x40 fp32
  comparison on the 2-vCPU AMD VM: compare 24 against 44 µs, its metrics 13 against 25 µs; docs/runners.md),
  and the results are bitwise the same (tests/engine/test_device_verification.py), so the CPU keeps it.

``compare`` and ``to_metrics`` dispatch; every caller goes through them. Comparisons hold torch tensors.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from kcgate.results.model import Metrics
from kcgate.vocab import dtypes

_INT_VIEW = {
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float64: torch.int64,
}


# numpy warns where torch is silent (inf - inf, 0/0): the NaN and inf results are what the comparison reads
quiet = np.errstate(all="ignore")


def host(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a numpy array sharing its memory (no copy; broadcast strides are kept)."""
    try:
        return t.numpy()
    except (RuntimeError, TypeError):  # it requires grad, is a lazy negation, or lives on a device
        return t.detach().cpu().resolve_neg().resolve_conj().numpy()


def tensor(a: np.ndarray | np.generic) -> torch.Tensor:
    """A numpy result as a CPU tensor sharing its memory (numpy returns scalars from 0-d arithmetic)."""
    return torch.from_numpy(np.asarray(a))


NUMPY_DTYPES = {torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64}


def f64(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's values in float64, as numpy (exact for every floating and integer dtype)."""
    if t.dtype == torch.float64:
        return host(t)
    if t.dtype in NUMPY_DTYPES or not t.is_floating_point():
        return host(t).astype(np.float64)
    return host(t.to(torch.float64))  # bfloat16, fp8: numpy has no such type


def minus(t: torch.Tensor, r: np.ndarray) -> np.ndarray:
    """t − r in float64 (``f64(t) - r``): numpy widens a float32 or float16 operand exactly inside the
    subtraction, without the float64 copy."""
    if t.dtype in NUMPY_DTYPES and r.dtype == np.float64:
        return np.subtract(host(t), r, dtype=np.float64)
    return f64(t) - r


def ulp_keys(x: torch.Tensor) -> np.ndarray:
    """Monotone integer keys of the bit patterns, as int64; −0 and +0 are adjacent."""
    if x.dtype not in _INT_VIEW:
        x = x.to(torch.float32)
    return _keys(host(x.contiguous().view(_INT_VIEW[x.dtype])))


_MAGNITUDE = {n: np.iinfo(f"i{n}").max for n in (1, 2, 4, 8)}


def _keys(bits: np.ndarray) -> np.ndarray:
    """Negative patterns (sign bit set) map to -magnitude - 1, so keys are ordered like the values. In int64
    from the start (a sign-extended pattern keeps its sign and magnitude bits), in place: one array."""
    low = _MAGNITUDE[bits.dtype.itemsize]  # the magnitude bits (np.iinfo costs 0.9 µs a call)
    keys = bits.astype(np.int64)
    keys ^= (keys >> 63) & low
    return keys


@quiet
def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|key(a) − key(b)| as float64, measured in a's dtype (b is rounded to it first)."""
    kind = NUMPY_DTYPES.get(a.dtype)
    if kind is not None and b.dtype in NUMPY_DTYPES:  # rounded by numpy (to nearest even, as torch does)
        ints = _INTS[kind]
        kb = _keys(np.ascontiguousarray(host(b).astype(kind)).view(ints))
        d = _keys(np.ascontiguousarray(host(a)).view(ints))
        d -= kb
    else:
        d = ulp_keys(a) - ulp_keys(b.to(a.dtype))
    return tensor(np.absolute(d, dtype=np.float64))  # |d| < 2^63: the cast before abs rounds alike


_INTS = {kind: np.dtype(f"i{np.dtype(kind).itemsize}") for kind in NUMPY_DTYPES.values()}


_EXPONENT = np.int64(0x7FF0 << 48)  # a float64's exponent bits


@quiet
def format_ulp(values: np.ndarray, out_dtype: torch.dtype) -> np.ndarray:
    """The output format's ulp at |values| (float64), 2^(⌊log2|v|⌋ − (p − 1)), read exactly from the
    exponent bits; below the normal range the smallest normal's ulp; inf and NaN stay themselves."""
    tiny, scale = _ulp_constants(out_dtype)
    a = np.maximum(np.abs(values), tiny)
    ulp = (a.view(np.int64) & _EXPONENT).view(np.float64) * scale  # 2^⌊log2 a⌋, scaled exactly
    return ulp if not a.size or math.isfinite(a.max()) else np.where(np.isfinite(a), ulp, a)


@functools.cache
def _ulp_constants(out_dtype: torch.dtype) -> tuple[float, float]:
    """The format's smallest normal and 2^(1 − p), once per dtype (finfo and the name lookup cost 2 µs)."""
    fmt = dtypes.FORMATS[str(out_dtype).removeprefix("torch.")]
    return torch.finfo(out_dtype).tiny, 2.0 ** (1 - fmt.p)


@dataclass
class Comparison:
    """Elementwise comparison of one output against the oracle (kept as tensors for signatures)."""

    err: torch.Tensor  # |out − ref| in fp64, inf where categories differ
    signed: torch.Tensor  # out − ref (nan where categories differ)
    allowed: torch.Tensor
    ratio: torch.Tensor  # err / allowed
    ulp: torch.Tensor
    ref: torch.Tensor
    finite: bool = False  # known: every element of the output and the reference is finite
    # 16- and 8-bit float outputs only (None otherwise): the distance from the correctly rounded fp64 result
    cr_ulp: float | None = None  # the largest, in ULPs of the output format
    cr_miss: float | None = None  # the share of (finite) elements that are not the correctly rounded value


def compare(out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor, method: str) -> Comparison:
    """Compare a kernel output with the fp64 oracle under a per-element allowance: as torch ops where the
    output lives, or through numpy on the CPU (``torch_ops``; bitwise the same results)."""
    impl = compare_on_device if torch_ops(out) else compare_on_host
    return impl(out, ref, allowed, method)


@quiet
def compare_on_host(out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor, method: str) -> Comparison:
    """``compare`` through numpy on CPU views (the CPU's fast path)."""
    o = out.detach().cpu()
    ref = ref.to(torch.float64)
    ref = ref.expand_as(o) if ref.shape != o.shape else ref
    diff = minus(o, host(ref))
    err = np.abs(diff)
    if not err.size or math.isfinite(err.max()):  # usual: all finite (max propagates NaN; masks are no-ops)
        ulp = ulp_distance(o, ref) if o.is_floating_point() else tensor(err)
        err_t, signed, finite = tensor(err), tensor(diff), True
    else:
        o64 = o.to(torch.float64)
        (err_t, signed, ulp), finite = _special(o, o64, ref, tensor(diff)), False
    if method in ("exact", "ulp"):
        ratio = _ulp_ratio(ulp, allowed, err_t)
    else:
        ratio = tensor(_ratio(host(err_t), f64(allowed)))
    cr_ulp, cr_miss = rounding(o, host(ref)) if o.is_floating_point() else (None, None)
    return Comparison(err_t, signed, allowed, ratio, ulp, ref, finite, cr_ulp, cr_miss)


@quiet
def correctly_rounded(ref: np.ndarray, out_dtype: torch.dtype) -> np.ndarray:
    """fp64 values rounded once, to nearest even, to the output format (subnormals included; beyond the
    format's largest finite value, ±inf). Exact: a division and multiplication by a power of two, and
    numpy's round, which rounds halves to even."""
    spacing = format_ulp(ref, out_dtype)
    cr = np.round(ref / spacing) * spacing
    big = dtypes.FORMATS[str(out_dtype).removeprefix("torch.")].max
    return np.where(np.abs(cr) > big, np.copysign(np.inf, cr), cr)


@quiet
def rounding(out: torch.Tensor, ref: np.ndarray) -> tuple[float | None, float | None]:
    """For a 16- or 8-bit float output: (the largest distance from the correctly rounded fp64 result in
    ULPs, the share of elements that are not that value), over the elements whose oracle is finite.

    A correct low-precision kernel rounds once at the end, so it sits within about one rounding of the
    oracle and its budget used is near 1 however good it is; how often it misses the correctly rounded
    value still moves when a regression adds error well inside one rounding (docs/diff.md)."""
    name = str(out.dtype).removeprefix("torch.")
    if not dtypes.low_precision(name) or not out.numel():
        return None, None
    ref = np.broadcast_to(ref, tuple(out.shape)).reshape(-1)
    finite = np.isfinite(ref)
    n = int(np.count_nonzero(finite))
    if not n:
        return None, None
    cr = correctly_rounded(ref, out.dtype)
    o = f64(out).reshape(-1)
    miss = (o != cr) & finite
    if not miss.any():
        return 0.0, 0.0
    ulps = host(ulp_distance(out.reshape(-1)[torch.from_numpy(miss)], tensor(cr[miss])))
    return float(np.nanmax(ulps)) if ulps.size else 0.0, int(np.count_nonzero(miss)) / n


def _special(
    o: torch.Tensor,
    o64: torch.Tensor,
    ref: torch.Tensor,
    diff: torch.Tensor,
    ulps: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """err, signed error and ULPs where NaN or Inf occur: matching specials are exact, a category change is
    an infinite error (and a NaN signed error). ``ulps``: the ULP distance to use (``ulp_distance``, or the
    device path's ``ulp_distance_on_device``)."""
    same_class = (o64.isnan() == ref.isnan()) & (o64.isinf() == ref.isinf())
    both_special = (o64.isnan() & ref.isnan()) | (o64.isinf() & (o64 == ref))
    diff = torch.where(both_special, torch.zeros_like(o64), diff)
    err = torch.where(same_class, diff.abs(), torch.full_like(o64, float("inf")))
    ulp = (ulps or ulp_distance)(o, ref) if o.is_floating_point() else diff.abs()
    ulp = torch.where(both_special, torch.zeros_like(ulp), ulp)
    ulp = torch.where(same_class, ulp, torch.full_like(ulp, float("inf")))
    return err, torch.where(same_class, diff, torch.nan), ulp


def _ratio(err: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """err / allowed elementwise (allowed broadcasts); a zero allowance gives inf where err > 0, else 0."""
    if bool((allowed > 0).all()):  # the usual case: no zero allowance
        return np.asarray(err / allowed, dtype=np.float64)
    allowed = np.broadcast_to(allowed, err.shape)
    safe = np.where(allowed > 0, allowed, 1.0)
    return np.where(allowed > 0, err / safe, np.where(err > 0, np.inf, 0.0))


@quiet
def _ulp_ratio(ulp: torch.Tensor, allowed_ulps: torch.Tensor, err: torch.Tensor) -> torch.Tensor:
    u = np.where(np.isinf(host(err)), np.inf, host(ulp))
    return tensor(_ratio(u, f64(allowed_ulps)))


def to_metrics(cmp: Comparison, extra: dict[str, float] | None = None) -> Metrics:
    """Summarize a comparison; the worst element is the one with the largest err/allowed. As torch ops where
    the comparison lives (only the summary's scalars come back), or through numpy on the CPU."""
    return (metrics_on_device if torch_ops(cmp.ratio) else metrics_on_host)(cmp, extra)


@quiet
def metrics_on_host(cmp: Comparison, extra: dict[str, float] | None = None) -> Metrics:
    """``to_metrics`` through numpy on CPU views (the CPU's fast path)."""
    ratio = host(cmp.ratio).reshape(-1)
    n = ratio.size
    if n == 0:
        return Metrics(budget_used=0.0, elements=0, extra=tuple(sorted((extra or {}).items())))
    worst = int(ratio.argmax())  # the first largest; the first NaN where there is one
    budget = float(ratio[worst])  # = ratio.max(), which also propagates a NaN
    if not math.isfinite(budget):  # NaN or inf: the worst is the first inf or NaN, NaN counted as inf
        worst = int(np.nan_to_num(ratio, nan=np.inf).argmax())
    idx = _unravel(worst, cmp.ratio.shape)
    err = host(cmp.err).reshape(-1)
    mag = np.abs(host(cmp.ref).reshape(-1))
    if mag.min() > 0:  # the usual case: no zero (and no NaN) in the reference, no mask to apply
        rel = float((err / mag).max())
    else:
        nz = mag > 0
        rel = float((err[nz] / mag[nz]).max()) if bool(nz.any()) else 0.0
    allowed = at(f64(cmp.allowed), cmp.ratio.shape, idx)
    return Metrics(
        budget_used=budget,
        max_abs_err=float(err.max()),
        max_rel_err=rel,
        max_ulp=float(host(cmp.ulp).max()),
        mismatches=0 if budget <= 1 else int(np.count_nonzero(ratio > 1)),  # none over when the max is not
        elements=n,
        worst_index=idx,
        allowed_at_worst=float(allowed),
        extra=tuple(sorted((extra or {}).items())),
        cr_ulp=cmp.cr_ulp,
        cr_miss=cmp.cr_miss,
    )


def at(a: np.ndarray, shape: Sequence[int], idx: tuple[int, ...]) -> np.ndarray:
    """``a`` broadcast to ``shape``, at ``idx`` (without building the broadcast view in the usual cases)."""
    return a if a.ndim == 0 else spread(a, shape)[idx]


def spread(a: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``a`` broadcast to ``shape`` (itself when it has that shape)."""
    return a if a.shape == tuple(shape) else np.broadcast_to(a, shape)


def sum_squares(a: np.ndarray) -> float:
    """Σ a² over all elements (inf and NaN propagate). Up to ``_BLAS_DOT_MAX`` elements one BLAS dot product
    (OpenBLAS runs those on the calling thread); above it numpy's own single-threaded einsum, because
    OpenBLAS splits a longer dot over its own thread pool, and on a machine whose cores are busy each call
    then waits for descheduled threads: 16-28 ms (median) for 2^20 float64 values with np.dot or np.vdot
    against einsum's 1.1 ms (numpy 2.4, OpenBLAS 0.3.31, 2-vCPU Intel Xeon VM at load 7), 0.5 s of a 256×4096
    rmsnorm case. The two sum in different orders: the figures agree to a few units of the last place."""
    flat = a.reshape(-1)
    if flat.size <= _BLAS_DOT_MAX:
        return float(np.dot(flat, flat))
    return float(np.einsum("i,i->", flat, flat))


_BLAS_DOT_MAX = 8192  # OpenBLAS's dot stays on one thread up to 10,000 elements (x86_64 kernels)


def _unravel(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The multi-index of a flat index (``torch.unravel_index`` costs 0.3 s on first use: it imports sympy)."""
    idx = []
    for dim in reversed(shape):
        flat, i = divmod(flat, dim)
        idx.append(i)
    return tuple(reversed(idx))


# Extra figures that say how a case was measured, kept from whichever trial has them (the largest), not
# only from the worst trial: ``dy_scale``, the power of two kcgate scaled its upstream gradient by.
KEPT_EXTRA = ("dy_scale",)


def merge_metrics(ms: list[Metrics]) -> Metrics:
    """The worst of several trials (by budget used), with mismatches and elements summed."""
    worst = max(ms, key=lambda m: -1.0 if m.budget_used is None else m.budget_used)
    extra = dict(worst.extra)
    for key in KEPT_EXTRA:
        if seen := [dict(m.extra)[key] for m in ms if key in dict(m.extra)]:
            extra[key] = max(seen)
    return Metrics(
        budget_used=worst.budget_used,
        max_abs_err=max((m.max_abs_err for m in ms if m.max_abs_err is not None), default=None),
        max_rel_err=max((m.max_rel_err for m in ms if m.max_rel_err is not None), default=None),
        max_ulp=max((m.max_ulp for m in ms if m.max_ulp is not None), default=None),
        mismatches=sum(m.mismatches for m in ms),
        elements=sum(m.elements for m in ms),
        worst_index=worst.worst_index,
        allowed_at_worst=worst.allowed_at_worst,
        extra=tuple(sorted(extra.items())) if extra != dict(worst.extra) else worst.extra,
        cr_ulp=max((m.cr_ulp for m in ms if m.cr_ulp is not None), default=None),
        cr_miss=_share([(m.cr_miss, m.elements) for m in ms]),
    )


def _share(parts: list[tuple[float | None, int]]) -> float | None:
    """The share over all trials' elements, from each trial's share and element count."""
    known = [(s, n) for s, n in parts if s is not None]
    total = sum(n for _, n in known)
    return sum(s * n for s, n in known) / total if total else None


# ---- the same comparison as torch ops, where the tensors live --------------------------------------
# ``compare_on_host`` and ``metrics_on_host`` above read tensors through numpy: the fastest path for the small
# CPU tensors most cases compare, but on an accelerator every read is a copy of a full tensor. The functions
# below compute the same Comparison and the same Metrics with torch ops on the tensors' own device, and bring
# back only scalars (the summary's numbers, and the worst element's index). They give bitwise the same
# results as the numpy path (elementwise IEEE arithmetic, maxima, first-index argmax, exact counts);
# tests/engine/test_device_verification.py checks that on random and special values, on the repository's
# contracts and on the realistic-bug corpus, and counts that no full tensor crosses to the host. Off the CPU
# they are the only path; ``KCGATE_VERIFY=device`` makes the CPU take them too (``torch_ops``).

VERIFY_ENV = "KCGATE_VERIFY"


def verify_on_device() -> bool:
    """Whether the CPU too verifies with torch ops (``KCGATE_VERIFY=device``); other devices always do."""
    return os.environ.get(VERIFY_ENV, "host") == "device"


def torch_ops(t: torch.Tensor) -> bool:
    """Whether ``t``'s comparison runs as torch ops where it lives: off the CPU always (a numpy read would copy
    the whole tensor to the host), on the CPU under ``KCGATE_VERIFY=device``."""
    return t.device.type != "cpu" or verify_on_device()


def compare_on_device(out: torch.Tensor, ref: torch.Tensor, allowed: torch.Tensor, method: str) -> Comparison:
    """``compare`` as torch ops on ``out``'s device (``ref`` and ``allowed`` are moved there once)."""
    o = out.detach()
    ref = _onto(ref, o.device).to(torch.float64)
    ref = ref.expand_as(o) if ref.shape != o.shape else ref
    allowed = _onto(allowed, o.device)
    o64 = o.to(torch.float64)
    diff = o64 - ref
    err = diff.abs()
    if not err.numel() or bool(err.max().isfinite()):  # one scalar back: all finite (max propagates NaN)
        ulp = ulp_distance_on_device(o, ref) if o.is_floating_point() else err
        signed, finite = diff, True
    else:
        err, signed, ulp = _special(o, o64, ref, diff, ulp_distance_on_device)
        finite = False
    allowed64 = allowed.to(torch.float64)
    if method in ("exact", "ulp"):
        ratio = _ratio_on_device(torch.where(err.isinf(), torch.inf, ulp), allowed64)
    else:
        ratio = _ratio_on_device(err, allowed64)
    cr_ulp, cr_miss = rounding_on_device(o, ref) if o.is_floating_point() else (None, None)
    return Comparison(err, signed, allowed, ratio, ulp, ref, finite, cr_ulp, cr_miss)


def _onto(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``: moved there (host to device: the oracle's values and the allowance) only when it
    is elsewhere."""
    return t if t.device == device else t.to(device)


def format_ulp_on_device(values: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """``format_ulp`` as torch ops where ``values`` (float64) live: the same exponent-bit arithmetic."""
    tiny, scale = _ulp_constants(out_dtype)
    a = torch.clamp(values.abs(), min=tiny)
    ulp = (a.view(torch.int64) & _EXPONENT).view(torch.float64) * scale
    return torch.where(a.isfinite(), ulp, a)


def rounding_on_device(out: torch.Tensor, ref: torch.Tensor) -> tuple[float | None, float | None]:
    """``rounding`` as torch ops where ``out`` lives: only the two summary numbers come back."""
    name = str(out.dtype).removeprefix("torch.")
    if not dtypes.low_precision(name) or not out.numel():
        return None, None
    ref = ref.to(torch.float64).expand(out.shape).reshape(-1)
    finite = ref.isfinite()
    n = int(finite.sum())
    if not n:
        return None, None
    spacing = format_ulp_on_device(ref, out.dtype)
    cr = torch.round(ref / spacing) * spacing  # torch.round: halves to even, as numpy's
    big = dtypes.FORMATS[name].max
    cr = torch.where(cr.abs() > big, torch.copysign(torch.full_like(cr, math.inf), cr), cr)
    miss = (out.reshape(-1).to(torch.float64) != cr) & finite
    misses = int(miss.sum())
    if not misses:
        return 0.0, 0.0
    ulps = ulp_distance_on_device(out.reshape(-1)[miss], cr[miss])
    return float(ulps.nan_to_num(nan=-math.inf).max()), misses / n


def ulp_distance_on_device(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``ulp_distance`` as torch ops: b rounded to a's dtype (to nearest even, as numpy rounds), the keys'
    distance as float64."""
    if a.dtype not in _INT_VIEW:
        a = a.to(torch.float32)
    rounded = _to_half(b) if a.dtype == torch.float16 and b.dtype == torch.float64 else b.to(a.dtype)
    d = _keys_on_device(a) - _keys_on_device(rounded)
    return d.abs().to(torch.float64)


def _to_half(b: torch.Tensor) -> torch.Tensor:
    """float64 to float16 rounded once, to nearest even, as numpy rounds (torch's cast goes through float32
    and rounds twice: 1 + 2^-11 + 2^-40 becomes 1, not 1 + 2^-10): round to odd into float32 first (toward
    zero, the last bit set where inexact), whose 24 bits then round correctly to float16's 11."""
    f = b.to(torch.float32)
    back = f.to(torch.float64)
    toward_zero = torch.where(back.abs() > b.abs(), torch.nextafter(f, torch.zeros_like(f)), f)
    inexact = (toward_zero.to(torch.float64) != b) & b.isfinite()
    odd = toward_zero.view(torch.int32) | inexact.to(torch.int32)
    return odd.view(torch.float32).to(torch.float16)


def _keys_on_device(x: torch.Tensor) -> torch.Tensor:
    """``_keys`` on the bit patterns, in torch (arithmetic shifts on the signed view, as numpy's)."""
    bits = x.contiguous().view(_INT_VIEW[x.dtype])
    width = bits.element_size() * 8
    return (bits ^ ((bits >> (width - 1)) & _MAGNITUDE[bits.element_size()])).to(torch.int64)


def _ratio_on_device(err: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """``_ratio`` as torch ops (one scalar back: whether every allowance is positive)."""
    if bool((allowed > 0).all()):
        return err / allowed
    allowed = allowed.expand_as(err)
    safe = torch.where(allowed > 0, allowed, 1.0)
    zero_or_inf = torch.where(err > 0, torch.inf, 0.0).to(err.dtype)
    return torch.where(allowed > 0, err / safe, zero_or_inf)


def metrics_on_device(cmp: Comparison, extra: dict[str, float] | None = None) -> Metrics:
    """``to_metrics`` as torch ops on the comparison's device: the summary's seven numbers come back in one
    transfer (the budget, the worst element's flat index, max |err|, max rel err, max ULPs, the count over
    1, the allowance at the worst), each as the numpy path computes it."""
    ratio = cmp.ratio.reshape(-1)
    n = ratio.numel()
    extras = tuple(sorted((extra or {}).items()))
    if n == 0:
        return Metrics(budget_used=0.0, elements=0, extra=extras)
    # the first largest; the first NaN where there is one, else the first inf (numpy's argmax then nan_to_num)
    worst = ratio.nan_to_num(nan=math.inf).argmax()
    err = cmp.err.reshape(-1)
    mag = cmp.ref.reshape(-1).abs()
    rel = torch.where(mag > 0, err / mag, -math.inf).max()  # -inf: no nonzero reference value (then 0)
    allowed = cmp.allowed.to(torch.float64)
    at_worst = allowed if allowed.dim() == 0 else torch.take(allowed.expand(cmp.ratio.shape), worst)
    parts = (ratio.max(), worst, err.max(), rel, cmp.ulp.max(), (ratio > 1).sum(), at_worst)
    budget, flat, abs_err, rel_err, ulp, over, allowed_at = torch.stack(
        [p.to(torch.float64).reshape(()) for p in parts]
    ).tolist()
    return Metrics(
        budget_used=budget,
        max_abs_err=abs_err,
        max_rel_err=0.0 if rel_err == -math.inf else rel_err,
        max_ulp=ulp,
        mismatches=int(over),
        elements=n,
        worst_index=_unravel(int(flat), cmp.ratio.shape),
        allowed_at_worst=allowed_at,
        extra=extras,
        cr_ulp=cmp.cr_ulp,
        cr_miss=cmp.cr_miss,
    )
