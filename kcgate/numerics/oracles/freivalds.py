"""Freivalds' randomized check for matrix products, with a threshold from error analysis.

Verifies ``c ≈ a @ b`` for 2-D or batched ``(..., M, K) @ (..., K, N)`` inputs in O(k·n²) work instead of
the O(n³) of an fp64 recomputation. Linear layers (``y = x @ W.T + bias``) go through
:func:`freivalds_linear`; the attention GEMMs ``Q @ K^T`` and ``P @ V`` are batched matmuls
(``freivalds_check(q, k.mT, s)``, ``freivalds_check(p, v, o)``).

How it decides (the derivation is in docs/freivalds.md):

* ``k`` Rademacher vectors r ∈ {±1}^N are drawn *after* ``c`` exists, from a fresh generator seeded from
  ``os.urandom`` (the seed is recorded), so a kernel cannot predict them. A corrupted element δ at (i, j)
  adds exactly ±δ to row i of the residual ``d = A(Br) − Cr``.
* The contract's elementwise bound on the kernel's error E = Ĉ − AB is
  ``|E_ij| ≤ β_ij = λ·√K·u_acc·(|A||B|)_ij + u_out·|Ĉ_ij|`` (Higham–Mary, λ = 8). Given E, ``(Er)_i`` is a
  sum of N terms with independent random signs, so Hoeffding gives ``P(|(Er)_i| > s·‖β_i‖₂) ≤ 2·exp(−s²/2)``,
  and ``‖β_i‖₂ ≤ λ√K·u_acc·‖A_i‖₂·‖B‖_F + u_out·‖Ĉ_i‖₂`` (Cauchy–Schwarz). ``s`` is chosen so that the
  union over all rows and vectors is ``false_alarm`` (default 1e-9).
* The check's own rounding (mat-vecs in fp32 for fp32/bf16/fp16 inputs, fp64 for fp64) is bounded with the
  same probabilistic model and added: ``λ·u_c·(N·‖A_i‖·max_k‖B_k‖ + √K·‖A_i‖·‖Br‖ + N·‖Ĉ_i‖)``.

So ``τ_i = s·(λ√K·u_acc·‖A_i‖‖B‖_F + u_out·‖Ĉ_i‖) + own_i``, per row and scale-aware. A product within the
bound fails this test with probability at most ``false_alarm_prob`` (recorded in the result). A row with any
element error above ``τ_i`` is caught by each vector with probability ≥ 1/2, so by ``k`` vectors (default 10)
with ≥ 1 − 2^-k.
* The sensitivity test (``excess``, the Freivalds form of kcgate.engine.sensitivity's excess-error gate) holds the
  residuals to what a *correct* product gives: (E r)_i has variance ‖E_i‖², modelled per row as a sequential
  accumulator's error plus the output rounding plus the check's own fp32 rounding; the rms and the max of
  the normalised residuals must stay within ``excess`` (1.5) of that (docs/freivalds.md).

Cost: one pass over each matrix (A, B, C). On the CPU, fp32, bf16 and fp16 operands go through kcgate's
fused native kernel (:mod:`kcgate.numerics.oracles.native`), which reads each element once for both the projection
and the row norm, with fp32 accumulation (bf16 and fp16 convert exactly). Where it does not apply (no C
compiler, other devices, fp64, fp16 on a CPU without hardware conversion), each matrix costs one skinny
GEMM and one row-norm pass: fp16 and bf16 operands are copied, exactly, into one reused fp32 buffer of
8 MiB, one row block at a time, and multiplied and normed there while the block is in cache, so products
with ±1 stay exact, accumulation is fp32 (u_c above), and no full-size copy is made. torch 2.13 has no
bf16/fp16 GEMM with an fp32 output on the CPU (``out_dtype`` is CUDA-only), and a low-precision output
would round the projections far beyond the own-error bound.
Large fp32 GEMMs run in whichever orientation measured faster on first use (see :func:`_skinny`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import torch

from kcgate.numerics.oracles import native
from kcgate.vocab import dtypes

__all__ = [
    "DEFAULT_FALSE_ALARM",
    "DEFAULT_LAMBDA",
    "FREIVALDS_AUTO_MIN_FLOPS",
    "DEFAULT_VECTORS",
    "FreivaldsResult",
    "RowErrors",
    "aggregate",
    "freivalds_check",
    "freivalds_linear",
    "reference_freivalds",
    "row_errors",
    "unit_roundoff",
    "use_freivalds",
    "verify",
]

DEFAULT_LAMBDA = 8.0
"""Higham–Mary's λ: a practical gate (FACTS.md)."""

DEFAULT_FALSE_ALARM = 1e-9
"""Probability (over the random vectors) that a product meeting the contract's bound fails the check."""

DEFAULT_VECTORS = 10
"""Random vectors per check (``protocol.freivalds_vectors``). An element of row i whose error exceeds the
row's threshold moves that row's residual past the threshold with probability ≥ 1/2 per Rademacher vector
(of the two signs of r_j, one adds |δ| to the rest of the sum), so a row with such an element is missed with
probability ≤ 2^-k: 2^-10 ≈ 9.8e-4 ≤ 1e-3."""

EXCESS_FACTOR = 1.5
"""The sensitivity test's factor (``tolerance.excess``, kcgate.engine.sensitivity): 0 turns it off."""
_SEQ_ROUND = (
    0.31  # RMS rounding per add of a sequential sum, in units of u·|partial sum| (kcgate.engine.sensitivity)
)
_OUT_ROUND = 0.42  # RMS of rounding to nearest in units of u·|value| (ulp ≈ 1.47·u·|value|, over √12)
_TAIL = 2.0  # the max statistic's floor: _TAIL·√(2·ln 2n) over n residuals (kcgate.engine.sensitivity.TAIL)

FREIVALDS_AUTO_MIN_FLOPS = 2**30
"""With ``oracle = "auto"``, contracts use Freivalds when batch·M·N·K (multiply-adds) is at least this.

2^30 is a 1024³ product: below it the fp64 recomputation costs under a second on a CPU and gives the
elementwise verdict; above it the O(n³) fp64 oracle dominates the run time and Freivalds' O(n²) check wins.
"""

_ORACLE_SETTINGS = ("freivalds", "fp64", "auto")
_CHUNK_ELEMENTS = 1 << 21  # fp32 upcast buffer: 8 MiB; 8% slower than 2 MiB when quiet, 4x faster under load
_AUTOTUNE_MIN_ELEMENTS = 1 << 20  # operands below 1024² use the default GEMM orientation, untimed
_ORIENTATION: dict[tuple[object, ...], bool] = {}  # key of _orientation_key -> big operand on the left
_REF_TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-4, 1e-4)}
_REF_LOW_PRECISION = (1e-2, 5e-2)
_TINY_NORM = 2.0**-60  # a smaller fp32 row norm may have lost squares below fp32's normal range (2^-126)


@dataclass(frozen=True)
class FreivaldsResult:
    """Diff of one Freivalds check.

    ``budget_used`` is ``max_i residual_i / τ_i`` (≤ 1 passes). ``worst_row`` is the flat row index over
    ``(*batch, M)``; ``residual`` and ``threshold`` are that row's values. ``seed`` reproduces the vectors.
    ``false_alarm_prob`` bounds the probability that a product meeting the contract's error bound fails.
    """

    passed: bool
    budget_used: float
    worst_row: int
    residual: float
    threshold: float
    seed: int
    k: int
    false_alarm_prob: float
    # the sensitivity test (``excess``): residuals against what a correct product's error field gives
    bound_passed: bool = True  # within the contract's bound (budget_used <= 1)
    excess_ratio: float = 0.0  # max(rms_ratio, max_ratio) / factor; <= 1 passes
    rms_ratio: float = 0.0  # rms of the residuals / the model of a correct product's (and the check's own)
    max_ratio: float = 0.0  # the largest normalised residual / _TAIL·√(2 ln 2n)
    excess_row: int = -1  # flat row of the largest normalised residual
    rows_over: int = 0  # rows whose residual exceeds the bound's τ for some vector
    flagged: tuple[int, ...] = ()  # up to 8 flat rows that fail a test, worst first (to recompute exactly)


def unit_roundoff(dtype: torch.dtype | str) -> float:
    """Unit roundoff u = 2^-p (``"float32"``, ``torch.float32``, or a format with no tensor dtype: ``"tfloat32"``)."""
    return dtypes.unit_roundoff(str(dtype).removeprefix("torch."))


def use_freivalds(m: int, k: int, n: int, oracle_setting: str = "auto") -> bool:
    """Whether a contract should use Freivalds for an (m, k) @ (k, n) product (m includes any batch)."""
    if oracle_setting not in _ORACLE_SETTINGS:
        raise ValueError(f"oracle must be one of {_ORACLE_SETTINGS}, got {oracle_setting!r}")
    if oracle_setting == "auto":
        return m * k * n >= FREIVALDS_AUTO_MIN_FLOPS
    return oracle_setting == "freivalds"


def freivalds_check(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    *,
    accumulate: torch.dtype | str = "float32",
    lam: float = DEFAULT_LAMBDA,
    k: int = DEFAULT_VECTORS,
    generator: torch.Generator | None = None,
    false_alarm: float = DEFAULT_FALSE_ALARM,
    bias: torch.Tensor | None = None,
    excess: float = EXCESS_FACTOR,
) -> FreivaldsResult:
    """Check ``c ≈ a @ b (+ bias)`` against the contract's error bound for the declared accumulator, and
    (``excess`` > 0) against what a correct product's error field gives (the sensitivity test).

    ``accumulate`` is the declared accumulator dtype; the output's unit roundoff comes from ``c.dtype``.
    ``generator`` (optional) only seeds a fresh generator, so the seed in the result reproduces the run.
    A product within the bound fails the bound test with probability ≤ ``false_alarm_prob``; ``passed``
    needs both tests (see the module docstring and docs/freivalds.md).
    """
    m, kk, n = _check_shapes(a, b, c, bias)
    if k < 1:
        raise ValueError("k must be at least 1")
    rows = c.numel() // n if n else 0
    seed = _draw_seed(generator)
    cdt = torch.float64 if torch.float64 in (a.dtype, b.dtype, c.dtype) else torch.float32
    with _serial(c.device):
        rad = _rademacher(k, n, seed, cdt, c.device)
    with _highest_matmul_precision():
        y, b_rows = _project_rows(rad, b)  # y = (B r)^T: (..., k, K)
        z, a_rows = _project_rows(y, a)  # z = (A B r)^T: (..., k, M)
        w, c_rows = _project_rows(rad, c)  # w = (C r)^T: (..., k, M)
    with _serial(c.device):
        return _decide(
            a=a,
            b=b,
            c=c,
            bias=bias,
            rad=rad,
            y=y,
            z=z,
            w=w,
            rows_norms=(a_rows, b_rows, c_rows),
            dims=(rows, kk, n),
            k=k,
            seed=seed,
            u=(unit_roundoff(accumulate), unit_roundoff(c.dtype), unit_roundoff(cdt)),
            lam=lam,
            false_alarm=false_alarm,
            excess=excess,
        )


@contextlib.contextmanager
def _serial(device: torch.device) -> Iterator[None]:
    """The check's small O(k·n) steps on one CPU thread: (k, n) tensors pass torch's parallel grain size at
    k = 10, and on a loaded machine each parallel region then waits for descheduled threads (measured: 0.4 s
    instead of 0.07 s for an n = 4096 check at load 6 on 2 vCPUs). The big passes keep every thread."""
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _decide(
    *,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    bias: torch.Tensor | None,
    rad: torch.Tensor,
    y: torch.Tensor,
    z: torch.Tensor,
    w: torch.Tensor,
    rows_norms: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    dims: tuple[int, int, int],
    k: int,
    seed: int,
    u: tuple[float, float, float],
    lam: float,
    false_alarm: float,
    excess: float,
) -> FreivaldsResult:
    """Residuals, thresholds and both tests from the projections (O(k·n), on one thread)."""
    rows, kk, n = dims
    a_rows, b_rows, c_rows = rows_norms
    a_rows, b_rows, c_rows = (_finite_norms(n, x) for n, x in ((a_rows, a), (b_rows, b), (c_rows, c)))
    resid = _residual(z, w, rad, bias)
    s = math.sqrt(2.0 * math.log(2.0 * max(rows, 1) * k / false_alarm))
    y_norms = torch.linalg.vector_norm(y, dim=-1)
    tau = _threshold(
        a_rows=a_rows,
        b_rows=b_rows,
        c_rows=c_rows,
        y_norm=y_norms.amax(dim=-1),
        bias=bias,
        dims=(kk, n),
        u=u,
        lam=lam,
        s=s,
    )
    own_fail = 3.0 * rows * k * 2.0 * math.exp(-lam * lam / 2.0)
    result = _verdict(resid, tau, seed=seed, k=k, false_alarm_prob=false_alarm + own_fail)
    if excess <= 0:
        return result
    scale = _correct_scale(a_rows=a_rows, b_rows=b_rows, c_rows=c_rows, y_norm=y_norms, dims=(kk, n), u=u)
    return _with_excess(result, resid, tau, scale, excess)


def _correct_scale(
    *,
    a_rows: torch.Tensor,
    b_rows: torch.Tensor,
    c_rows: torch.Tensor,
    y_norm: torch.Tensor,
    dims: tuple[int, int],
    u: tuple[float, float, float],
) -> torch.Tensor:
    """Per row (..., M), the RMS residual a correct product gives: (E r)_i has variance ‖E_i‖² for Rademacher
    r, with ‖E_i‖² modelled as a sequential accumulator's (kcgate.engine.sensitivity) plus the output rounding, and
    the check's own fp32 projections modelled the same way. Σ_k A_ik²‖B_k‖² is taken as ‖A_i‖²‖B‖_F²/K."""
    kk, n = dims
    u_acc, u_out, u_c = u
    a2, c2 = a_rows.double().square(), c_rows.double().square()
    b2 = b_rows.double().square().sum(dim=-1, keepdim=True)  # ‖B‖_F², (..., 1)
    y2 = y_norm.double().square().amax(dim=-1, keepdim=True)  # the largest ‖y‖² over the vectors
    k_ = max(kk, 1)
    ab = a2 * b2 / k_  # ≈ Σ_k A_ik²‖B_k‖²
    kernel = (_SEQ_ROUND * u_acc) ** 2 * kk * (ab / 2 + c2 / 3) + (_OUT_ROUND * u_out) ** 2 * c2
    own = (_SEQ_ROUND * u_c) ** 2 * (n / 2 * ab + kk / 2 * a2 * y2 / k_ + n / 2 * c2)
    return (kernel + own).sqrt()


def _with_excess(
    result: FreivaldsResult, resid: torch.Tensor, tau: torch.Tensor, scale: torch.Tensor, factor: float
) -> FreivaldsResult:
    """The sensitivity statistics of kcgate.engine.sensitivity on the residuals, normalised by ``scale``."""
    z = resid / scale.unsqueeze(-2).clamp_min(1e-300)  # (..., k, M)
    worst = resid.amax(dim=-2)  # resid has no NaN (_residual maps it to inf)
    bound = torch.where(worst == 0, 0.0, worst / tau).nan_to_num(nan=math.inf, posinf=math.inf).reshape(-1)
    rows_over = int((bound > 1.0).sum())  # rows whose residual exceeds τ for some vector (inf/inf: NaN, over)
    level = _TAIL * math.sqrt(2 * math.log(2 * max(z.numel(), 1)))
    per_row = z.nan_to_num(nan=math.inf, posinf=math.inf).amax(dim=-2).reshape(-1)
    score = torch.maximum(per_row / (factor * level), bound)
    top = torch.topk(score, min(8, score.numel()))  # largest first, NaN first as in a descending sort
    flagged = tuple(int(i) for v, i in zip(top.values.tolist(), top.indices.tolist()) if v > 1.0)
    squares = float(z.square().sum())  # finite only if every z is: then no mask is needed (the same sum)
    if math.isfinite(squares):
        count = z.numel()
    else:
        finite = z.isfinite()
        count = int(finite.sum())
        squares = float(torch.where(finite, z, 0.0).square().sum())
    if count == 0:
        return replace(result, bound_passed=result.passed, rows_over=rows_over, flagged=flagged)
    rms = math.sqrt(squares / count)
    row = int(per_row.argmax())
    max_ratio = float(per_row[row]) / level
    ratio = max(rms, max_ratio) / factor
    return replace(
        result,
        passed=result.passed and ratio <= 1.0,
        bound_passed=result.passed,
        excess_ratio=ratio,
        rms_ratio=rms,
        max_ratio=max_ratio,
        excess_row=row,
        rows_over=rows_over,
        flagged=flagged,
    )


def freivalds_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    y: torch.Tensor,
    bias: torch.Tensor | None = None,
    **kwargs: object,
) -> FreivaldsResult:
    """Check a linear layer ``y ≈ x @ weight.T + bias`` (``weight`` is (N, K), as in ``torch.nn.Linear``)."""
    return freivalds_check(x, weight.mT, y, bias=bias, **kwargs)  # type: ignore[arg-type]


def verify(
    kernel: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    a: torch.Tensor,
    b: torch.Tensor,
    **kwargs: object,
) -> FreivaldsResult:
    """Run ``kernel(a, b)`` and check its output; the vectors are drawn after the kernel has returned."""
    c = kernel(a, b)
    return freivalds_check(a, b, c, **kwargs)  # type: ignore[arg-type]


def aggregate(results: Sequence[FreivaldsResult]) -> FreivaldsResult:
    """Combine several checks (trials, shapes) into one: worst budget, all must pass, union false alarm."""
    if not results:
        raise ValueError("nothing to aggregate")
    worst = max(results, key=lambda r: r.budget_used if not math.isnan(r.budget_used) else math.inf)
    return FreivaldsResult(
        passed=all(r.passed for r in results),
        budget_used=worst.budget_used,
        worst_row=worst.worst_row,
        residual=worst.residual,
        threshold=worst.threshold,
        seed=worst.seed,
        k=min(r.k for r in results),
        false_alarm_prob=min(1.0, sum(r.false_alarm_prob for r in results)),
    )


@dataclass(frozen=True)
class RowErrors:
    """One row of a product recomputed in fp64 (a row the check flagged)."""

    elements: int
    over: int  # elements over the contract's bound β_ij
    excess: int  # elements over the sensitivity level (factor·_TAIL·√(2 ln 2N) × a correct element's RMS)
    worst_ratio: float  # the largest |error| / β_ij
    index: tuple[int, ...]  # (batch..., row, column) of that element


def row_errors(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    row: int,
    *,
    bias: torch.Tensor | None = None,
    accumulate: torch.dtype | str = "float32",
    lam: float = DEFAULT_LAMBDA,
    factor: float = EXCESS_FACTOR,
) -> RowErrors:
    """Recompute flat row ``row`` (over ``(*batch, M)``) of ``a @ b (+ bias)`` in fp64: O(K·N)."""
    m, kk = a.shape[-2:]
    n = b.shape[-1]
    batch = _broadcast(a.shape[:-2], b.shape[:-2])
    flat, i = divmod(row, m)
    where = []
    for size in reversed(batch):
        flat, j = divmod(flat, size)
        where.append(j)
    at = tuple(reversed(where))
    a_row = a.expand(*batch, m, kk)[at][i].double()
    bm = b.expand(*batch, kk, n)[at].double()
    bias64 = bias.double() if bias is not None else torch.zeros(n, dtype=torch.float64)
    exact = a_row @ bm + bias64
    err = (c[at][i].double() - exact).abs().nan_to_num(nan=math.inf, posinf=math.inf)
    u_acc, u_out = unit_roundoff(accumulate), unit_roundoff(c.dtype)
    k_eff = kk + (bias is not None)
    beta = lam * math.sqrt(k_eff) * u_acc * (a_row.abs() @ bm.abs() + bias64.abs()) + u_out * exact.abs()
    sigma = (
        (_SEQ_ROUND * u_acc) ** 2 * k_eff * ((a_row.square() @ bm.square()) / 2 + exact.square() / 3)
        + (_OUT_ROUND * u_out * exact).square()
    ).sqrt()
    level = factor * _TAIL * math.sqrt(2 * math.log(2 * max(n, 1)))
    ratio = torch.where(err == 0, 0.0, err / beta).nan_to_num(nan=math.inf, posinf=math.inf)
    j = int(ratio.argmax()) if n else 0
    return RowErrors(
        elements=n,
        over=int((err > beta).sum()),
        excess=int((err > level * sigma).sum()),
        worst_ratio=float(ratio[j]) if n else 0.0,
        index=(*at, i, j),
    )


def reference_freivalds(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    k: int = 10,
    atol: float | None = None,
    rtol: float | None = None,
    *,
    generator: torch.Generator | None = None,
) -> FreivaldsResult:
    """The reference method (the baseline to beat), re-implemented as published.

    ``k`` Uniform(−1, 1) vectors in the input dtype, three batched matmuls, and per column
    ``max|A(BR) − CR| ≤ atol + rtol·max|CR|``. Defaults: fp32 (1e-4, 1e-4); bf16 and fp16 (1e-2, 5e-2).
    It states no false-alarm probability (``nan`` in the result).
    """
    d_atol, d_rtol = _REF_TOLERANCES.get(a.dtype, _REF_LOW_PRECISION)
    atol = d_atol if atol is None else atol
    rtol = d_rtol if rtol is None else rtol
    seed = _draw_seed(generator)
    gen = torch.Generator(device=a.device).manual_seed(seed)
    n = b.shape[-1]
    r = torch.rand((n, k), generator=gen, device=a.device, dtype=torch.float32).mul_(2).sub_(1).to(a.dtype)
    abr = torch.matmul(a, torch.matmul(b, r))
    cr = torch.matmul(c, r.to(c.dtype)).to(abr.dtype)
    err = (abr - cr).abs().amax(dim=-2)  # (..., k)
    tol = atol + rtol * cr.abs().amax(dim=-2)
    return _worst(err, tol, seed=seed, k=k, false_alarm_prob=math.nan)


def _check_shapes(
    a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None
) -> tuple[int, int, int]:
    if a.dim() < 2 or b.dim() < 2 or c.dim() < 2:
        raise ValueError("a, b and c must be at least 2-D")
    m, kk = a.shape[-2:]
    kb, n = b.shape[-2:]
    if kk != kb or tuple(c.shape[-2:]) != (m, n):
        raise ValueError(f"shapes do not chain: {tuple(a.shape)} @ {tuple(b.shape)} -> {tuple(c.shape)}")
    batch = _broadcast(a.shape[:-2], b.shape[:-2])
    if tuple(batch) != tuple(c.shape[:-2]):
        raise ValueError(f"batch shape of c {tuple(c.shape[:-2])} is not that of a @ b {tuple(batch)}")
    if bias is not None and tuple(bias.shape) != (n,):
        raise ValueError(f"bias must have shape ({n},), got {tuple(bias.shape)}")
    return m, kk, n


def _broadcast(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """``torch.broadcast_shapes`` for two shapes, without its 0.4 s first call (it imports sympy)."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise ValueError(f"batch shapes {a} and {b} do not broadcast")
    return tuple(y if x == 1 else x for x, y in zip(a, b))


def _draw_seed(generator: torch.Generator | None) -> int:
    """A 63-bit seed: from ``os.urandom``, or drawn from ``generator`` when one is given."""
    if generator is None:
        return int.from_bytes(os.urandom(8), "little") >> 1
    return int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item())


@contextlib.contextmanager
def _highest_matmul_precision() -> Iterator[None]:
    """The check's own fp32 GEMMs must not run in TF32 or similar (their error would exceed the bound)."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def _rademacher(k: int, n: int, seed: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(seed)
    bits = torch.randint(0, 2, (k, n), generator=gen, device=device, dtype=torch.int8)
    return bits.to(dtype).mul_(2).sub_(1)


def _project_rows(v: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(v @ x.mT, row norms of x)`` in ``v.dtype``: v is (..., k, Q), x is (..., P, Q).

    On the CPU, :func:`_fused` does both in one pass where it applies. Otherwise, same dtype: one GEMM and one norm pass (two large ops: few parallel regions, robust on a shared machine).
    Low precision (fp16, bf16): row blocks of x (all batch entries, about 8 MiB as fp32) are copied into one
    reused ``v.dtype`` buffer, which is exact, and multiplied and normed while in cache. So the products
    with ±1 vectors are exact, products with ``Y`` round as in an fp32 GEMM, the GEMM accumulates in fp32,
    the norms cannot overflow fp16, and no full-size copy is made. The reused buffer avoids a fresh
    allocation (and its page faults) per block. Each block costs three parallel regions (copy, GEMM, norm):
    on a machine whose cores are busy with other work each region waits for a descheduled thread, so this
    path degrades more under load than the two-op same-dtype path.
    """
    fused = _fused(v, x)
    if fused is not None:
        return fused
    if x.dtype == v.dtype:
        return _skinny(x, v), torch.linalg.vector_norm(x, dim=-1)
    rows, width = x.shape[-2:]
    lead = math.prod(x.shape[:-2])
    step = min(max(1, _CHUNK_ELEMENTS // max(width * lead, 1)), rows)
    if step == 0:  # no rows
        batch = _broadcast(v.shape[:-2], x.shape[:-2])
        empty = torch.empty((*batch, v.shape[-2], 0), dtype=v.dtype, device=x.device)
        return empty, torch.empty((*x.shape[:-2], 0), dtype=v.dtype, device=x.device)
    buffer = torch.empty((*x.shape[:-2], step, width), dtype=v.dtype, device=x.device)
    projections, norms = [], []
    for start in range(0, rows, step):
        block = buffer[..., : min(step, rows - start), :]
        block.copy_(x[..., start : start + step, :])
        projections.append(_skinny(block, v, work=x.numel()))
        norms.append(torch.linalg.vector_norm(block, dim=-1))
    return torch.cat(projections, dim=-1), torch.cat(norms, dim=-1)


def _fused(v: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """:func:`_project_rows` in one pass per matrix with kcgate's native kernel, or None where it does not
    apply (not the CPU, fp64, no compiler, or no OpenMP while torch uses several threads).

    Batched operands go one broadcast batch entry at a time (views, no copies); the norms keep x's shape."""
    if not native.handles(x, v):
        return None
    lib = native.status()
    if lib.lib is None or not (lib.openmp or torch.get_num_threads() == 1):
        return None
    batch = _broadcast(v.shape[:-2], x.shape[:-2])
    rows, width = x.shape[-2:]
    xs = x.expand(*batch, rows, width)
    vs = v.expand(*batch, *v.shape[-2:])
    proj = torch.empty((*batch, v.shape[-2], rows), dtype=torch.float32)
    norms = torch.empty((*batch, rows), dtype=torch.float32)
    for index in itertools.product(*map(range, batch)):
        if native.project(xs[index], vs[index], out=(proj[index], norms[index])) is None:
            return None
    own = (1,) * (len(batch) - x.dim() + 2) + tuple(x.shape[:-2])  # x's batch shape, padded
    pick = tuple(slice(0, 1) if size == 1 else slice(None) for size in own)
    return proj, norms[pick].reshape(*x.shape[:-2], rows)


def _finite_norms(norms: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Row norms (shape ``x.shape[:-1]``) that neither overflowed nor underflowed in fp32.

    A row whose squared norm exceeds fp32's range (values above about 1.8e19) gives inf, which would make τ
    infinite and pass any product; a row of values below about 1e-19 has squares in or under fp32's
    subnormal range, and a norm of 0 would make τ zero and fail a correct product. Such rows (rare) are
    normed again in fp64, exactly as far as τ needs. Rows of x that hold inf or NaN keep their non-finite
    norm (c then fails anyway); rows of zeros keep 0."""
    if norms.numel() == 0 or (math.isfinite(float(norms.sum())) and float(norms.min()) >= _TINY_NORM):
        return norms  # two reductions, where isfinite().all() alone took 35 to 100 µs
    redo = ~torch.isfinite(norms) | (norms < _TINY_NORM)
    fixed = norms.double()
    fixed[redo] = torch.linalg.vector_norm(x.expand(*norms.shape, x.shape[-1])[redo].double(), dim=-1)
    return fixed


def _skinny(x: torch.Tensor, v: torch.Tensor, *, work: int | None = None) -> torch.Tensor:
    """``v @ x.mT`` (contiguous, (..., k, P)) in the GEMM orientation that is faster on this machine.

    The two orientations, ``v @ x.mT`` and ``(x @ v.mT).mT``, are the same fp32 (or fp64) GEMM with the
    operands swapped, so either one's rounding is within the own-error bound; only their speed differs, and
    which one wins depends on the machine. For a 4096² fp32 x and k = 2, MKL took 10.2 ms for ``v @ x.mT``
    and 5.1 ms for ``(x @ v.mT).mT`` on an AMD EPYC VM, but 2.7 ms and 4.8 ms on an Intel Xeon VM; for a
    128 × 4096 block on the Intel VM, 34 µs and 200 µs. So on the CPU, when the operand (``work``: the whole
    matrix a block comes from) has at least ``_AUTOTUNE_MIN_ELEMENTS``, the first call for a (dtype, k,
    memory layout, rough shape of x) times both orientations twice, interleaved, keeps the one with the
    shorter best time in ``_ORIENTATION`` for the rest of the process, and returns the last product it
    computed. Smaller operands and other devices use ``v @ x.mT``.
    """
    key = _orientation_key(x, v, x.numel() if work is None else work)
    if key is None:
        return _gemm(x, v, big_left=False)
    big_left = _ORIENTATION.get(key)
    if big_left is not None:
        return _gemm(x, v, big_left=big_left)
    best = {True: math.inf, False: math.inf}
    out = x.new_empty(0)
    for _ in range(2):
        for left in (True, False):
            start = time.perf_counter()
            out = _gemm(x, v, big_left=left)
            best[left] = min(best[left], time.perf_counter() - start)
    _ORIENTATION[key] = best[True] <= best[False]
    return out


def _gemm(x: torch.Tensor, v: torch.Tensor, *, big_left: bool) -> torch.Tensor:
    if big_left:
        return torch.matmul(x, v.mT).mT.contiguous()
    return torch.matmul(v, x.mT).contiguous()


def _orientation_key(x: torch.Tensor, v: torch.Tensor, work: int) -> tuple[object, ...] | None:
    """Cache key of :func:`_skinny`'s choice, or None where nothing is timed (small work, not on the CPU).

    Rough shape: the bit lengths of P, Q and the batch sizes; layout: which of x's last two strides is 1.
    """
    if x.device.type != "cpu" or work < _AUTOTUNE_MIN_ELEMENTS:
        return None
    rows, width = x.shape[-2:]
    layout = (x.stride(-1) == 1, x.stride(-2) == 1)
    batch = math.prod(x.shape[:-2]), math.prod(v.shape[:-2])
    shape = (rows.bit_length(), width.bit_length(), batch[0].bit_length(), batch[1].bit_length())
    return (x.dtype, v.dtype, v.shape[-2], layout, shape)


def _residual(z: torch.Tensor, w: torch.Tensor, rad: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``|A(Br) − (Cr − bias·r)|`` per vector and row, in fp64, with NaN mapped to +inf."""
    d = z.double() - w.double()
    if bias is not None:
        d = d + (rad.double() @ bias.double()).unsqueeze(-1)
    return d.abs_().nan_to_num_(nan=math.inf, posinf=math.inf)


def _threshold(
    *,
    a_rows: torch.Tensor,
    b_rows: torch.Tensor,
    c_rows: torch.Tensor,
    y_norm: torch.Tensor,
    bias: torch.Tensor | None,
    dims: tuple[int, int],
    u: tuple[float, float, float],
    lam: float,
    s: float,
) -> torch.Tensor:
    """Per-row τ_i (shape (..., M), fp64): the kernel's allowance times s, plus the check's own error."""
    kk, n = dims
    u_acc, u_out, u_c = u
    a_n = a_rows.double()
    c_n = c_rows.double()
    b_rows = b_rows.double()
    b_fro = torch.linalg.vector_norm(b_rows, dim=-1).unsqueeze(-1)  # (..., 1)
    b_max = (b_rows.amax(dim=-1) if kk else b_rows.sum(dim=-1)).unsqueeze(-1)  # K = 0: no rows, 0
    y_max = y_norm.double().unsqueeze(-1)
    bias_n = 0.0 if bias is None else float(torch.linalg.vector_norm(bias.double()))
    k_eff = kk + (bias is not None)
    kernel = lam * math.sqrt(k_eff) * u_acc * (a_n * b_fro + bias_n) + u_out * c_n
    own = lam * u_c * (n * a_n * b_max + math.sqrt(kk) * a_n * y_max + n * c_n + n * bias_n)
    safety = 1.0 + 4.0 * (kk + n) * u_c  # rounding in the norms and in this formula
    return (s * kernel + own) * safety


def _verdict(
    resid: torch.Tensor, tau: torch.Tensor, *, seed: int, k: int, false_alarm_prob: float
) -> FreivaldsResult:
    """Reduce residuals (..., k, M) against τ (..., M) to one result."""
    worst_vec = resid.amax(dim=-2)  # (..., M)
    return _worst(
        worst_vec, tau.expand_as(worst_vec), seed=seed, k=k, false_alarm_prob=min(1.0, false_alarm_prob)
    )


def _worst(
    err: torch.Tensor, tol: torch.Tensor, *, seed: int, k: int, false_alarm_prob: float
) -> FreivaldsResult:
    """The entry with the largest err / tol (same shapes); a NaN ratio (NaN in c) is a failure."""
    ratio = torch.where(err == 0, 0.0, err.double() / tol.double())  # in fp64: bf16 residuals too
    ratio = ratio.nan_to_num(nan=math.inf, posinf=math.inf).reshape(-1)
    if ratio.numel() == 0:
        return FreivaldsResult(True, 0.0, 0, 0.0, 0.0, seed, k, false_alarm_prob)
    worst = int(torch.argmax(ratio))
    budget = float(ratio[worst])
    return FreivaldsResult(
        passed=budget <= 1.0,
        budget_used=budget,
        worst_row=worst,
        residual=float(err.reshape(-1)[worst]),
        threshold=float(tol.reshape(-1)[worst]),
        seed=seed,
        k=k,
        false_alarm_prob=false_alarm_prob,
    )
