"""What a custom op's inputs hold, read from its own generator's draws: rows of probabilities or of
log-probabilities (over the last dim), and inputs that share a shape and dtype (so they can be equal). The
stability probes built from them (kcgate.engine.checks.stability: peaked distributions, ties) are the inputs
real loss kernels break on: a JSD whose exp underflows, a TVD gradient wrong where p == q."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kcgate.numerics.derived import as_drawn, trace
from kcgate.numerics.ops.base import Tensors, upcast

# A row sums to one within this (a bf16 softmax's rows: a few units of 2^-8), its log-sum-exp likewise
ROW_TOL = 0.05
PEAK = (
    40.0  # the peaked probe's logits: normal × PEAK, so most log-probabilities lie far below exp's fp32 range
)
MAX_PAIRS = 2  # ties probes per case: the first pairs of inputs of one shape and dtype


def _rows_sum_to_one(t: torch.Tensor) -> bool:
    s = t.sum(-1)
    return bool(((s - 1).abs() <= ROW_TOL).all())


def kind(t: torch.Tensor) -> str:
    """ "prob" for rows of probabilities, "log" for rows of log-probabilities, "" otherwise (a tensor of one
    element, or of one column, holds no distribution worth peaking)."""
    if not t.is_floating_point() or t.dim() == 0 or t.shape[-1] < 2 or not bool(t.isfinite().all()):
        return ""
    x = t.detach().to(torch.float64)
    if bool((x >= 0).all()) and bool((x <= 1).all()) and _rows_sum_to_one(x):
        return "prob"
    if bool((x <= 0).all()) and _rows_sum_to_one(x.exp()):
        return "log"
    return ""


def distributions(samples: Sequence[Tensors]) -> tuple[tuple[int, str], ...]:
    """(input index, "prob" | "log") for every input that holds distributions on every sample."""
    if not samples:
        return ()
    found = []
    for i, t in enumerate(samples[0]):
        k = kind(t)
        if k and all(len(s) > i and kind(s[i]) == k for s in samples[1:]):
            found.append((i, k))
    return tuple(found)


def tie_pairs(inputs: Tensors) -> tuple[tuple[int, int], ...]:
    """(i, j), i < j, for float inputs of one shape and dtype, of more than one element: at most MAX_PAIRS."""
    out = []
    for i, a in enumerate(inputs):
        for j in range(i + 1, len(inputs)):
            b = inputs[j]
            if a.is_floating_point() and a.numel() > 1 and a.shape == b.shape and a.dtype == b.dtype:
                out.append((i, j))
    return tuple(out[:MAX_PAIRS])


def peaked(t: torch.Tensor, k: str, g: torch.Generator) -> torch.Tensor:
    """A near-one-hot draw of the same kind as ``t``: the softmax (or log_softmax) of normal logits × PEAK."""
    z = torch.randn(t.shape, generator=g, dtype=torch.float64) * PEAK
    out = torch.softmax(z, -1) if k == "prob" else torch.log_softmax(z, -1)
    return out.to(device=t.device, dtype=t.dtype)


def tied(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a`` with every other row (every other element of a vector) taken from ``b``: whole rows, so a row of
    probabilities still sums to one, and a == b exactly there."""
    out = a.clone()
    out[::2] = b[::2]
    return out


# The range probes (issue 56): values near exp's and log's limits, subnormals, a large dynamic range. Which
# apply is read from the traced reference (its aten ops) and from what each input holds on every sample.
EXP_OPS = frozenset({"exp", "exp2", "expm1", "tanh", "sinh", "cosh", "logaddexp", "logaddexp2"})
LOG_OPS = frozenset({"log", "log2", "log10", "log1p", "xlogy", "special_xlog1py", "logit"})
REDUCING = frozenset({"sum", "matmul", "conv", "fallback"})  # the trace's kinds that reduce (derived.op_kind)
F32 = torch.finfo(torch.float32)
# exp-range: the most positive value past fp32's exp overflow (ln max = 88.72); the most negative where
# exp(−x) squared still fits fp32 (−ln max / 2), so a textbook σ(x) = 1/(1 + exp(−x)) and its autograd
# backward (exp(−x) / (1 + exp(−x))²) stay exact enough; then the same for fp16 (ln 65504 = 11.09) where the
# reference is not valid on fp32's
EXP_LEVELS = tuple(
    (math.log(top) + pad, 0.5 - math.log(top) / 2) for top, pad in ((F32.max, 3.0), (65504.0, 1.0))
)
# dynamic-range: each element times 2^k, k drawn in [−E, E] (inputs within [−1, 1]: [−2E, 0]); fp16's range
# holds fewer binades
BINADES = {torch.float16: 6}
DEFAULT_BINADES = 20
EVERY = 2  # the log-range and subnormal probes move every other element (of the flattened input)


@dataclass(frozen=True)
class RangeProbe:
    """One range probe: where kcgate infers it, and what a failure under it means. Its name is its cause's
    (kcgate.vocab.causes)."""

    name: str
    on: tuple[str, ...]  # the input domains it moves
    ops: frozenset[str] = frozenset()  # it applies where the traced reference has one of these ops ...
    kinds: frozenset[str] = frozenset()  # ... or of these rounding kinds (neither: always)
    shift_free: bool = False  # not on an input the reference is shift-invariant in (the offset probe's)
    # not where the reference has one of these ops: a dynamic range of 2^±20 in what reaches an exp (softmax's
    # logits; attention's q and k, through the scores) is no reduction's small terms but exp's overflow and
    # underflow, exp-range's to probe: there it measures the formulation (x − lse carries u·|x| in a correct
    # kernel that saves a logsumexp; a fixed softcap attention's bf16 scores), not a bug
    unless_ops: frozenset[str] = frozenset()
    # not where the reference has one of these kinds: inputs that reach its exp through a matmul (attention's
    # q and k) would be scaled far past exp's limits, not near them (a false alarm on a fixed softcap attention)
    unless: frozenset[str] = frozenset()
    what: str = ""  # what a failure under it means
    why: str = ""  # why kcgate inferred it


ANY = ("signed", "nonneg", "unit", "unit+")
RANGE_PROBES = (
    RangeProbe("exp-range", ("signed",), ops=EXP_OPS, shift_free=True, unless=frozenset({"matmul", "conv"}),
               what="wrong near exp's overflow and underflow (an exp without max-subtraction or a threshold: "
               "softplus as log(1 + exp(x)))",
               why="the reference takes an exp and these inputs hold signed values"),
    RangeProbe("log-range", ("nonneg", "unit+"), ops=LOG_OPS,
               what="wrong on values near the smallest normal (a log without a clamp, or a clamp or eps the "
               "reference does not have)",
               why="the reference takes a log and these inputs are non-negative"),
    RangeProbe("subnormal", ANY,
               what="wrong on subnormal inputs (flushed to zero, then a log or a division)",
               why="these inputs hold non-integer floats"),
    RangeProbe("dynamic-range", ANY, kinds=REDUCING, unless_ops=EXP_OPS,
               what="wrong where one row spans many binades (a reduction that loses its small terms, an eps or "
               "threshold in the wrong place)",
               why="the reference reduces and these inputs hold non-integer floats"),
)  # fmt: skip
RANGE = {p.name: p for p in RANGE_PROBES}


def ops_of(trace: Sequence[Any]) -> tuple[frozenset[str], frozenset[str]]:
    """The base names ("exp", "log", ...) and rounding kinds of a traced reference's operations."""
    names = frozenset(
        str(o.name).split(".")[1].lstrip("_") if "." in str(o.name) else str(o.name) for o in trace
    )
    return names, frozenset(o.kind for o in trace)


def domain(t: torch.Tensor) -> str:
    """What an input's values allow the range probes to do: "signed" (both signs), "nonneg" (all ≥ 0),
    "unit" and "unit+" (those within [−1, 1]), or "" (not float, one element, integer-valued such as a mask
    or counts, or not finite): a unit input is never scaled up, a non-negative one never made negative."""
    if not t.is_floating_point() or t.numel() < 2 or not bool(t.isfinite().all()):
        return ""
    x = t.detach().to(torch.float64)
    if bool((x == x.round()).all()):
        return ""
    nonneg = bool((x >= 0).all())
    if bool((x.abs() <= 1).all()):
        return "unit+" if nonneg else "unit"
    return "nonneg" if nonneg else "signed"


def domains_of(samples: Sequence[Tensors]) -> tuple[str, ...]:
    """Each input's ``domain``, the same on every sample ("" where the samples disagree)."""
    if not samples:
        return ()
    out = []
    for i, t in enumerate(samples[0]):
        d = domain(t)
        out.append(d if all(len(s) > i and domain(s[i]) == d for s in samples[1:]) else "")
    return tuple(out)


def _every_other(t: torch.Tensor) -> torch.Tensor:
    return (torch.arange(t.numel()) % EVERY == 0).reshape(t.shape).to(t.device)


def exp_range(t: torch.Tensor, top: float, bottom: float) -> torch.Tensor:
    """``t`` scaled so that its largest positive value is ``top`` and its most negative ``bottom``."""
    x = t.detach().to(torch.float64)
    pos, neg = float(x.clamp(min=0).max()), float((-x).clamp(min=0).max())
    out = torch.where(x > 0, x * (top / pos if pos else 1.0), x * (-bottom / neg if neg else 1.0))
    return out.to(t.dtype)


def log_range(t: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Every other element of a non-negative input near the input dtype's smallest normal (in [tiny, 2·tiny)):
    a log of them is near its lowest finite value, and a log without a clamp or an eps added meets them."""
    tiny = torch.finfo(t.dtype).tiny
    u = torch.rand(t.shape, generator=g, dtype=torch.float64).to(t.device)
    return torch.where(_every_other(t), tiny * (1 + u), t.to(torch.float64)).to(t.dtype)


def subnormal(t: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Every other element a subnormal of the input dtype, with the element's sign (a kernel that flushes
    them to 0, then takes a log or divides, is wrong there)."""
    tiny = torch.finfo(t.dtype).tiny
    u = torch.rand(t.shape, generator=g, dtype=torch.float64).to(t.device)
    x = t.to(torch.float64)
    sign = torch.where(x < 0, -1.0, 1.0)
    return torch.where(_every_other(t), sign * tiny * (0.05 + 0.9 * u), x).to(t.dtype)


def trace_ops(
    reference: Callable[..., Any], sample: Tensors, dtype: torch.dtype
) -> tuple[frozenset[str], frozenset[str]] | None:
    """``ops_of`` the reference traced on one sample drawn in ``dtype``; None where the dispatch mode cannot
    follow it (then no range probe is inferred)."""
    try:
        return ops_of(trace(reference, as_drawn(upcast(sample), dtype)))
    except Exception:
        return None


def plan(
    reference: Callable[..., Any],
    samples: Sequence[Tensors],
    dtype: torch.dtype,
    leave: set[int],
    shifted: set[int],
    tracer: Callable[[Tensors, torch.dtype], tuple[frozenset[str], frozenset[str]] | None] | None = None,
) -> dict[str, tuple[tuple[int, str], ...]]:
    """Each range probe's inputs, (index, domain), inferred from the reference traced on the first sample and
    the inputs' domains on all: exp's limits on signed inputs where it takes an exp (not ``shifted`` ones,
    which the offset probe moves), the smallest normal on non-negative ones where it takes a log, subnormals
    on every float input, a large dynamic range where it reduces and takes no exp. Distributions (the peaked probe's), integer
    values (masks, counts) and the inputs in ``leave`` are left alone. ``tracer``: where the reference is traced
    (its sandbox child, kcgate.sandbox.reference); default here."""
    if not samples:
        return {}
    dists = {i for i, _ in distributions(samples)}
    doms = [(i, d) for i, d in enumerate(domains_of(samples)) if d and i not in dists | leave]
    if not doms:
        return {}
    traced = (tracer or (lambda x, d: trace_ops(reference, x, d)))(samples[0], dtype)
    if traced is None:
        return {}
    ops, kinds = traced
    out = {}
    for p in RANGE_PROBES:
        got = tuple((i, d) for i, d in doms if d in p.on and not (p.shift_free and i in shifted))
        unless = p.unless & kinds or p.unless_ops & ops
        if got and (not p.ops and not p.kinds or p.ops & ops or p.kinds & kinds) and not unless:
            out[p.name] = got
    return out


def move(name: str, t: torch.Tensor, kind: str, g: torch.Generator, level: float = 0.0) -> torch.Tensor:
    """Input ``t`` (of domain ``kind``) as range probe ``name`` moves it; ``level``: exp-range's largest
    value (one of EXP_LEVELS, else a declared one, its most negative minus half of it), dynamic-range's
    binades (0: the dtype's default)."""
    if name == "exp-range":
        return exp_range(t, level, dict(EXP_LEVELS).get(level, -level / 2))
    if name == "log-range":
        return log_range(t, g)
    if name == "subnormal":
        return subnormal(t, g)
    return dynamic_range(t, kind, g, level)


def dynamic_range(t: torch.Tensor, kind: str, g: torch.Generator, binades: float = 0.0) -> torch.Tensor:
    """Each row (over the last dim) times its own power of two 2^r, r in [−E, E/2], and each element times
    another, 2^k, k in [−E/2, 0] (``binades`` E, else the dtype's default): small terms beside large ones in
    one reduction, and whole rows small enough that an eps or a threshold matters; a unit input only
    downward."""
    e = int(binades or BINADES.get(t.dtype, DEFAULT_BINADES))
    rows = (*t.shape[:-1], 1) if t.dim() > 1 else (1,)
    r = torch.randint(-e, (0 if kind.startswith("unit") else e // 2) + 1, rows, generator=g)
    k = r + torch.randint(-(e // 2), 1, t.shape, generator=g)
    return (t.to(torch.float64) * torch.exp2(k.to(torch.float64)).to(t.device)).to(t.dtype)
