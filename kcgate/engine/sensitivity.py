"""The sensitivity gate (``excess-error``): the kernel's error against what a correct implementation does.

The error bound is the contract's provable ceiling and is loose by design (torch's fp32 matmul uses 0.001
of it). This second gate compares the kernel's error field with references run on the same inputs:

* the family's **composite** (``OpFamily.composite``: torch's own implementation, or the tolerance's
  declared ``baseline``) run in the contract's precision: on the inputs' own dtype, or upcast to the output
  dtype when that is wider (bf16 inputs, fp32 output);
* for the row sums, an **emulated blocked kernel** (``blocked_sum``: a tree within blocks of 1024, a running
  sum across, in ``accumulate``), a correct order whose error exceeds torch's on long rows;
* **correct alternative formulations** (kcgate.engine.formulations: saved-logsumexp softmax, ``logsumexp −
  x[t]`` cross-entropy, LlamaRMSNorm, eager attention with scores in the input dtype), which raise the rms
  limit to a factor on the least accurate correct implementation (issue 32).

It claims only comparisons that ran: with no reference (a custom op without a baseline) it does not judge
(``errors`` is None) and the bound alone decides; outputs under MIN_ELEMENTS are pooled over trials
(``pooled``) and not judged if the pool stays short. Its messages name the tensor measured, the forward output.

Per element, s = √(σ_seq² + ulp_out²/12) weights the error (σ_seq: a *sequential* sum's RMS error in
``accumulate``, ``SEQ_ROUND``/``SEQ_C`` models) and z = |err|/s. ``ref`` is the larger of the references'
rms(z) and a correctly rounded output's; with ``excess_reference = "sequential"`` (or no reference) at least
1, the sequential model itself. Two statistics:

* ``rms``: rms(z_kernel) / max(ref, each alternative's rms z)        (diffuse noise, offsets, biases)
* ``max``: max(z_kernel) / max(max(z) of every reference, TAIL·√(2·ln 2N)·ref)   (a few corrupted elements)

``excess_ratio`` = the larger of the two / the factor (``tolerance.excess``, 1.5). The case fails with
``excess-error`` only on decided evidence (issues 46 and 53, ``kcgate.engine.excess_line.decide``): Wald's SPRT
on the trials whose max statistic crosses the factor, or the rms statistic's sequential confidence bound pooled
over the trials with rows as the independent units; near the line more trials are drawn
(``kcgate.engine.sequential``), and a case still undecided at the cap passes as ``inconclusive:``, as it does
where the correct implementations keep under 4 bits. Torch's result plus unbiased noise at 2x its error is √5 ≈ 2.24x
torch's rms; correct tree, blocked, tiled, online and Liger-style orders measured at most 1.22x (docs/sensitivity.md,
tests/engine/checks/test_excess_power.py). A sequential order over a long fp32 reduction is 2-80x and fails unless
declared; its failure says so (``Excess.order_hint``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from kcgate.engine.formulations import alternatives
from kcgate.engine.reference_checks import ReferenceFault
from kcgate.engine.trial import CaseContext, Trial, kernels_inputs
from kcgate.numerics.metrics import (
    _unravel,
    f64,
    format_ulp,
    format_ulp_on_device,
    host,
    minus,
    quiet,
    spread,
    sum_squares,
    torch_ops,
)
from kcgate.numerics.ops.base import BoundArgs, Tensors, upcast
from kcgate.vocab import dtypes
from kcgate.vocab.catalogue import has

# RMS of one rounding to nearest in units of u·|s|: 0.42 in theory (ulp/|s| ≈ 1.47·u, over √12); a
# sequential fp32 sum measures 0.31 (tests/engine/test_sensitivity.py: n = 4096 sums, K = 1024 dot products)
SEQ_ROUND = 0.31
SEQ_C = 0.37  # the same model from the bound (Σ|t| ≈ 0.8·√n·‖t‖ for normal terms) for the other families
SEQ_HINT = 1.5  # the failure names the sequential order when the kernel's rms z is within this
TAIL = 2.0  # the max statistic's floor: TAIL·√(2·ln 2N), room for heavier than Gaussian tails
# the rms statistic needs elements: noise at 2x torch's error sits 3.2 standard deviations above the 1.5
# threshold at 64 (docs/sensitivity.md); smaller outputs are pooled over trials, up to POOL_TRIALS of them
MIN_ELEMENTS = 64
POOL_TRIALS = 64


@dataclass(frozen=True)
class Excess:
    """The gate's measurements on one trial."""

    rms_ratio: float  # rms(z_kernel) / ref (the references' rms z, floored)
    max_ratio: float  # max(z_kernel) / max(max(z_ref), TAIL·√(2 ln 2N)·ref)
    factor: float
    kernel_rms: float  # rms |err| of the kernel (absolute)
    ref_rms: float  # rms |err| of the reference (absolute), nan when no reference ran
    worst_index: tuple[int, ...] = ()
    sequential_rms: float = math.nan  # rms(err / σ_seq): ≤ 1 is within a sequential accumulator's error
    reference: str = "composite"  # what the rms statistic compares with ("sequential": the model)
    limit: str = ""  # the alternative formulation whose error set the rms limit ("": the family's own)
    elements: int = 0  # the elements the statistics counted (pooled over ``trials`` trials)
    trials: int = 1
    tensor: str = "forward output"  # the tensor measured (the gate reads the forward output only)
    out_rms: float = math.nan  # rms |y| of the oracle's output over the counted elements (conditioning)

    @property
    def ratio(self) -> float:
        return max(self.rms_ratio, self.max_ratio) / self.factor

    def extra(self) -> dict[str, float]:
        return {
            "excess_ratio": self.ratio,
            "excess_rms_ratio": self.rms_ratio,
            "excess_max_ratio": self.max_ratio,
            "excess_elements": float(self.elements),
        }

    def summary(self) -> str:
        which = "rms" if self.rms_ratio >= self.max_ratio else "max"
        where = f", worst at {list(self.worst_index)}" if which == "max" and self.worst_index else ""
        counted = f" over {self.elements} elements" if self.elements else ""
        pooled = f" of {self.trials} trials" if self.trials > 1 else ""
        return (
            f"{self.tensor}: error {max(self.rms_ratio, self.max_ratio):.3g}x {self.against()} "
            f"({which} statistic{counted}{pooled}{where}; allowed {self.factor:g}x)" + self.order_hint()
        )

    def against(self) -> str:
        """What the ratio is against, as measured: never a reference that did not run."""
        if self.reference != "composite":
            return "a sequential accumulator's modelled error"
        if self.limit:
            return f"the least accurate correct formulation's ({self.limit})"
        return "a correct implementation's"

    def order_hint(self) -> str:
        """A failure within what a sequential accumulator makes: the kernel may be a correct one summing left
        to right over a long reduction (2-80x torch's error in fp32); say so, and how to declare it."""
        if self.reference != "composite" or not self.sequential_rms <= SEQ_HINT:
            return ""
        return (
            f"; within a sequential accumulator's error ({self.sequential_rms:.2g} of its rms): if the kernel "
            'sums left to right, declare tolerance.excess_reference = "sequential"'
        )


def applies(ctx: CaseContext) -> bool:
    """The gate runs beside the error-bound tolerance (the relative method is its own comparison with a
    reference), unless the contract sets excess = false."""
    c = ctx.contract
    return (
        c.tolerance.method == "error-bound"
        and c.tolerance.excess > 0
        and c.postcondition == "within-bound"
        and c.forward  # the forward output only (gradients have their own bounds)
    )


def reference_output(ctx: CaseContext, inputs: Tensors, *, upcast: bool = True) -> torch.Tensor | None:
    """The reference implementation on these inputs, or None when it cannot run. ``upcast``: on inputs
    upcast to the output dtype when that is wider (the contract's precision); else on the inputs' own dtype
    (the relative tolerance's "same low precision", FlashAttention's PyTorch-in-bf16 baseline)."""
    fn = reference_fn(ctx)
    if fn is None:
        return None
    x = _ref_inputs(ctx, inputs) if upcast else inputs
    try:
        with torch.no_grad():
            out = fn(*x)
    except Exception:  # noqa: BLE001 — a composite that cannot take these dtypes leaves only the model
        return None
    if isinstance(out, (tuple, list)):
        out = out[0]
    if not isinstance(out, torch.Tensor):
        return None
    return out.detach()  # where the inputs live: the host's drawn ones, or the kernel's own on its device


def reference_outputs(ctx: CaseContext, inputs: Tensors, *, upcast: bool = True) -> list[torch.Tensor]:
    """The reference as torch dispatches it and, on the CPU with oneDNN on, also with oneDNN off, when that
    differs. torch ships two correct CPU implementations of several ops, oneDNN's (JIT-compiled for the
    CPU's vector ISA) and ATen's own, and the gate is against a correct implementation, so against the less
    accurate of the two: otherwise a result depends on the runner's ISA. Measured: fp32 gelu's oneDNN
    AVX-512 kernel is 4x more accurate than ATen's for |x| < 1.5 (in ulps), and ATen's kernel, which
    inductor also emits, failed at 2.69x against it (docs/sensitivity.md)."""
    out = reference_output(ctx, inputs, upcast=upcast)
    if out is None or not _onednn_on(inputs):
        return [] if out is None else [out]
    with onednn_off():
        aten = reference_output(ctx, inputs, upcast=upcast)
    return [out] if aten is None or torch.equal(aten, out) else [out, aten]


@contextmanager
def onednn_off() -> Iterator[None]:
    """torch's CPU ops on ATen's own kernels inside, the previous setting restored after. Not
    mkldnn.flags(), which also sets (and warns about) TF32; torch._C's getter and setter are what the
    ``torch.backends.mkldnn.enabled`` property calls, without its descriptor."""
    was = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(was)


@functools.cache
def _onednn_built() -> bool:
    return bool(torch.backends.mkldnn.is_available())


def _onednn_on(inputs: Tensors) -> bool:
    return (
        _onednn_built()
        and torch._C._get_mkldnn_enabled()
        and bool(inputs)
        and all(t.device.type == "cpu" for t in inputs)
    )


def reference_fn(ctx: CaseContext) -> Any:
    """tolerance.baseline if declared, else the family's composite, else its oracle on low-precision inputs.
    The baseline is user code: the family carries it callable (``OpFamily.baseline``), run in the reference's
    sandbox child, never resolved or called in the judge (kcgate.engine.case.op_for resolves it only on the
    in-process path, ``--isolation none``)."""
    if ctx.contract.tolerance.baseline:
        if ctx.op.baseline is None:  # a family built without the contract's user code: a bug, named
            raise RuntimeError(
                f"contract {ctx.contract.id!r}: tolerance.baseline {ctx.contract.tolerance.baseline!r} is "
                "declared but the op family carries none (build it with kcgate.engine.case.op_for)"
            )
        return ctx.op.baseline
    return ctx.op.composite or (ctx.op.oracle if ctx.op.name != "custom" else None)


ACC_DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
BLOCK = 1024  # the emulated row reduction's block: a tree inside, a running sum across (Triton's tl.sum loop)


def blocked_sum(ctx: CaseContext, inputs: Tensors) -> torch.Tensor | None:
    """The sum families' emulated correct kernel: a pairwise tree within blocks of BLOCK terms and a running
    sum across blocks, in the declared accumulator, rounded to the output dtype. For long rows its error
    exceeds torch's cascade sum's (n = 1e5: up to 2.3x), and a correct kernel written that way must pass."""
    acc = ACC_DTYPES.get(dtypes.canonical(ctx.contract.accumulate))
    if ctx.op.name not in ("sum", "mean") or acc is None or not inputs or not inputs[0].is_floating_point():
        return None
    x = inputs[0].detach().to(acc)
    n = x.shape[-1]
    if n == 0:
        return None
    nb = -(-n // BLOCK)
    x = torch.nn.functional.pad(x, (0, nb * BLOCK - n)).reshape(*x.shape[:-1], nb, BLOCK)
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    total = x[..., 0, 0]
    for j in range(1, nb):
        total = total + x[..., j, 0]
    if ctx.op.name == "mean":
        total = total / n
    return total.to(ctx.out_dtype)


def _ref_inputs(ctx: CaseContext, inputs: Tensors) -> Tensors:
    out, inp = ctx.out_dtype, ctx.dtype
    if out.is_floating_point and inp.is_floating_point and out.itemsize > inp.itemsize:
        return tuple(t.to(out) if t.is_floating_point() else t for t in inputs)
    return inputs


def error_scale(
    ctx: CaseContext, inputs: Tensors, ref: torch.Tensor, n: int, up: Tensors = ()
) -> tuple[np.ndarray, np.ndarray]:
    """Per element, the RMS error of a correct kernel, s = √(σ_seq² + ulp_out²/12) (a sequential
    accumulator's plus the output rounding), and the rounding's part ulp_out/√12; float64 numpy arrays of
    ref's shape. ``up``: the inputs already upcast to float64."""
    up = up or upcast(inputs)
    r = f64(ref)
    u = dtypes.unit_roundoff(ctx.contract.accumulate)
    sigma = _sequential_sum(ctx.op.name, up, r, n, u)
    if sigma is None:
        acc = ctx.op.bound(up, ref, BoundArgs(u, 0.0, 1.0))
        sigma = SEQ_C * np.abs(f64(acc)) / math.sqrt(max(n, 1))
    ulp = format_ulp(r, ctx.out_dtype) if ctx.out_dtype.is_floating_point else np.zeros_like(r)
    scale = spread(np.sqrt(np.square(sigma) + np.square(ulp) / 12), r.shape)
    return scale, ulp / math.sqrt(12)


def _sequential_sum(name: str, x: Tensors, y: np.ndarray, n: int, u: float) -> np.ndarray | None:
    """The RMS error of a left-to-right sum of the n terms t behind each output, rounded to u after each
    add: ≈ SEQ_ROUND·u·√(Σₖ sₖ²) over the partial sums sₖ, whose expectation is n·(‖t‖²/2 + y²/3) (a random
    walk plus its drift; the drift is what large-mean inputs add). Exact families of sums only (one fp64
    product of squares); None for the others, which use the bound-derived model."""
    terms = _sum_terms(name, x, y, n)
    if terms is None:
        return None
    t2, total, scale = terms
    return SEQ_ROUND * u * scale * np.sqrt(n * (f64(t2) / 2 + np.square(total) / 3))


def _sum_terms(name: str, x: Tensors, y: Any, n: int) -> tuple[torch.Tensor, Any, float] | None:
    """(Σ t² behind each output, the output's exact total, its scale) for the exact families of sums; ``y``
    is a numpy array on the host path and a tensor on the device path (both take ``y * n``)."""
    if has(name, "plain_product"):
        t2, total, scale = x[0].square() @ x[1].square(), y, 1.0
    elif name == "linear":
        t2, total, scale = x[0].square() @ x[1].square().T + x[2].square(), y, 1.0
    elif name == "sum":
        t2, total, scale = x[0].square().sum(-1), y, 1.0
    elif name == "mean":
        t2, total, scale = x[0].square().sum(-1), y * n, 1.0 / n
    else:
        return None
    return t2, total, scale


def _freivalds(ctx: CaseContext, res: Any) -> Excess | None:
    """The same statistics from a Freivalds check's residuals (kcgate.numerics.oracles.freivalds), when it ran them."""
    if res.excess_ratio == 0.0 and res.rms_ratio == 0.0:
        return None
    return Excess(
        rms_ratio=res.rms_ratio,
        max_ratio=res.max_ratio,
        factor=ctx.contract.tolerance.excess,
        kernel_rms=math.nan,
        ref_rms=math.nan,
        worst_index=(res.excess_row,),
    )


Array = Any  # a numpy array on the CPU's fast path, a torch tensor where the comparison lives otherwise


@dataclass(frozen=True)
class Errors:
    """One trial's weighted errors on the elements the gate counts: the kernel's z = |err|/s and each
    reference's, with what the statistics need. Pooled by concatenation (``statistics``). Numpy arrays on the
    CPU's fast path; torch tensors where the comparison lives otherwise (only the statistics come back)."""

    z: Array  # the kernel's
    refs: tuple[tuple[str, Array], ...]  # (name, z) of each reference that ran
    primary: int  # the first ``primary`` refs are the family's own (composite, blocked sum): the tail floor's
    rounding: Array  # a correctly rounded output's z
    e: Array  # the kernel's |err|
    e_refs: tuple[Array, ...]
    flat: Array | None  # each counted element's flat index (None: every element, in order)
    shape: tuple[int, ...]
    out_sq: float = 0.0  # Σ y² of the oracle's output over the counted elements

    @property
    def n(self) -> int:
        return _size(self.z)


@quiet
def measure(ctx: CaseContext, trial: Trial) -> Excess | None:
    """The gate on one compared trial; None when there is nothing to measure (no finite elements) or
    nothing to measure against (no reference ran and the contract declared no model)."""
    if trial.freivalds is not None:
        return _freivalds(ctx, trial.freivalds)
    part = errors(ctx, trial)
    return None if part is None else statistics(ctx, [part])


@quiet
def errors(ctx: CaseContext, trial: Trial) -> Errors | None:
    """The weighted errors of one trial's forward output, or None when nothing can be measured."""
    cmp = trial.cmps.get("out", trial.cmp)  # the forward output's (trial.cmp may be a gradient's)
    if cmp is None or trial.out is None:
        return None
    if torch_ops(cmp.ref):
        return errors_on_device(ctx, trial, cmp)
    r, err = f64(cmp.ref), host(cmp.err)
    own, alts = _reference_errors(
        ctx, trial, trial.inputs, r, lambda out: _abs(minus(out.to(ctx.out_dtype), r))
    )
    if not own and ctx.contract.tolerance.excess_reference == "composite":
        return None  # no correct implementation ran (a custom op without a baseline): the bound judges
    allowed = np.broadcast_to(host(cmp.allowed), r.shape)
    refs = own + [(name, e) for name, e in alts if _within(e, allowed, r)]
    n = ctx.op.reduction_len(trial.shape)
    s, rounding = error_scale(ctx, trial.inputs, cmp.ref, n, up=trial.up)
    ok = _counted(cmp.finite, r, err, s, [x for _, x in refs])  # None: every element counts (usual)
    if ok is not None and not bool(ok.any()):
        return None
    pick = _flat if ok is None else (lambda t: t[ok])
    part = _weighed(
        pick, err, s, rounding, refs, len(own), None if ok is None else np.flatnonzero(ok), r.shape
    )
    return replace(part, out_sq=sum_squares(np.ascontiguousarray(pick(r))))


def _within(e: Array, allowed: Array, r: Array) -> bool:
    """An alternative formulation counts only where it is correct here: within the contract's bound wherever
    the oracle is finite (one computing another function, e.g. another rope layout or causal alignment,
    would otherwise raise the limit to its own error)."""
    if isinstance(e, torch.Tensor):
        return bool(((e <= allowed) | ~r.isfinite()).all())
    return bool(np.all((e <= allowed) | ~np.isfinite(r)))


def _weighed(
    pick: Callable[[Array], Array],
    err: Array,
    s: Array,
    rounding: Array,
    refs: list[tuple[str, Array]],
    primary: int,
    flat: Array | None,
    shape: tuple[int, ...],
) -> Errors:
    """The counted elements (``pick``) of the kernel's and each reference's |error|, and each weighted by the
    correct kernel's RMS error ``s``: the host and device paths' ``Errors`` alike."""
    scale = pick(s)
    return Errors(
        z=pick(err) / scale,
        refs=tuple((name, pick(x) / scale) for name, x in refs),
        primary=primary,
        rounding=pick(rounding) / scale,
        e=pick(err),
        e_refs=tuple(pick(x) for _, x in refs),
        flat=flat,
        shape=shape,
    )


def _reference_errors(
    ctx: CaseContext, trial: Trial, inputs: Tensors, r: Any, diff: Callable[[torch.Tensor], Any]
) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(the family's own correct implementations, the alternative formulations): each name with ``diff`` of
    its output, the |error| against the reference ``r`` (numpy on the host path, torch ops on the device's).
    Torch's composite is one reference, or oneDNN's and ATen's: both named every trial."""
    outs = reference_outputs(ctx, inputs)
    named = [
        *((f"torch's composite{' (ATen)' if i else ''}", outs[-i]) for i in range(2) if outs),
        ("a blocked sum", blocked_sum(ctx, inputs)),
    ]
    own = [(name, diff(out)) for name, out in named if out is not None and _fits(out, r)]
    kw = ctx.op.kwargs(trial.shape) if ctx.op.kwargs is not None else {}
    alts = [
        (name, diff(out)) for name, out in alternatives(ctx.op, _ref_inputs(ctx, inputs), kw) if _fits(out, r)
    ]
    return own, alts


def _fits(out: torch.Tensor, r: Array) -> bool:
    return tuple(out.shape) == tuple(r.shape)


def errors_on_device(ctx: CaseContext, trial: Trial, cmp: Any) -> Errors | None:
    """``errors`` as torch ops where the comparison lives: the references run on the inputs the kernel saw
    (on its device: there they are that device's correct implementations), and the weighted errors stay there;
    only ``statistics``' scalars come back. On the CPU bitwise the numpy path's arrays."""
    x = kernels_inputs(trial)
    if x and x[0].device != cmp.ref.device:  # the comparison ran elsewhere than the kernel: its inputs
        x = tuple(t.to(cmp.ref.device) for t in x)
    r, err = cmp.ref, cmp.err
    own, alts = _reference_errors(ctx, trial, x, r, lambda out: (out.to(ctx.out_dtype).double() - r).abs())
    if not own and ctx.contract.tolerance.excess_reference == "composite":
        return None
    allowed = cmp.allowed.to(r.device).expand(r.shape)
    refs = own + [(name, e) for name, e in alts if _within(e, allowed, r)]
    n = ctx.op.reduction_len(trial.shape)
    s, rounding = error_scale_on_device(ctx, trial.up or upcast(x), r, n)
    ok = _counted_on_device(cmp.finite, r, err, s, [e for _, e in refs])
    if ok is not None and not bool(ok.any()):
        return None
    pick = (lambda t: t.reshape(-1)) if ok is None else (lambda t: t[ok])
    flat = None if ok is None else ok.reshape(-1).nonzero().reshape(-1)
    part = _weighed(pick, err, s, rounding, refs, len(own), flat, tuple(r.shape))
    y = pick(r)
    return replace(part, out_sq=float(y.dot(y)))


def error_scale_on_device(
    ctx: CaseContext, up: Tensors, ref: torch.Tensor, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``error_scale`` as torch ops where ``ref`` (float64) lives, the same arithmetic in the same order."""
    u = dtypes.unit_roundoff(ctx.contract.accumulate)
    sigma = _sequential_sum_on_device(ctx.op.name, up, ref, n, u)
    if sigma is None:
        acc = ctx.op.bound(up, ref, BoundArgs(u, 0.0, 1.0))
        sigma = SEQ_C * acc.to(torch.float64).abs() / math.sqrt(max(n, 1))
    floating = ctx.out_dtype.is_floating_point
    ulp = format_ulp_on_device(ref, ctx.out_dtype) if floating else torch.zeros_like(ref)
    scale = (sigma.square() + ulp.square() / 12).sqrt().expand(ref.shape)
    return scale, ulp / math.sqrt(12)


def _sequential_sum_on_device(
    name: str, x: Tensors, y: torch.Tensor, n: int, u: float
) -> torch.Tensor | None:
    """``_sequential_sum`` as torch ops (the same products and the same order of operations)."""
    terms = _sum_terms(name, x, y, n)
    if terms is None:
        return None
    t2, total, scale = terms
    return SEQ_ROUND * u * scale * (n * (t2.to(torch.float64) / 2 + total.square() / 3)).sqrt()


def _counted_on_device(
    finite: bool, r: torch.Tensor, err: torch.Tensor, s: torch.Tensor, refs: list[torch.Tensor]
) -> torch.Tensor | None:
    """``_counted`` as torch ops: the few reductions that find every element counted come back together."""
    if finite and s.numel():
        low, *peaks = torch.stack([s.min(), *(x.max() for x in refs)]).tolist()
        if low > 0 and all(math.isfinite(p) for p in peaks):
            return None
    ok = (s > 0) if finite else r.isfinite() & err.isfinite() & (s > 0)
    for x in refs:
        ok = ok & x.isfinite()
    return None if bool(ok.all()) else ok


def statistics(ctx: CaseContext, parts: list[Errors]) -> Excess:
    """The two statistics over one trial's errors, or several trials' pooled (small outputs).

    The rms limit is a factor on the least accurate correct implementation: torch's composite, the blocked
    sum, or an alternative formulation (kcgate.engine.formulations). The max statistic's Gaussian-tail
    floor stays on the family's own references: an alternative raises it only through its own largest
    error, so torch's result plus Gaussian noise, whose tail no rounding reaches, still fails it."""
    z, names, z_refs, e_refs, is_own, z_round, e = _pool(parts)
    floor = _floor(ctx, any(is_own), z_round)
    rms_refs = [_rms(x) for x in z_refs]
    own = max([floor, *(r for r, o in zip(rms_refs, is_own) if o)])
    ref, limit = own, ""
    for name, r, o in zip(names, rms_refs, is_own):
        if not o and r > ref:
            ref, limit = r, name
    ref_max = max((float(x.max()) for x in z_refs), default=0.0)  # a scalar back from each, on a device
    k, worst = max(
        ((j, int(p.z.argmax())) for j, p in enumerate(parts)), key=lambda jw: float(parts[jw[0]].z[jw[1]])
    )
    flat = worst if parts[k].flat is None else int(parts[k].flat[worst])  # type: ignore[index]
    rms_k = _rms(z)
    return Excess(
        rms_ratio=rms_k / ref,
        max_ratio=float(parts[k].z[worst]) / max(ref_max, TAIL * math.sqrt(2 * math.log(2 * _size(z))) * own),
        factor=ctx.contract.tolerance.excess,
        kernel_rms=_rms(e),
        ref_rms=max(_rms(x) for x in e_refs) if e_refs else math.nan,
        worst_index=_unravel(flat, parts[k].shape),
        # a sequential accumulator explains nothing where nothing is summed (pointwise ops): no order hint
        sequential_rms=rms_k if ctx.op.reduction_len(tuple(ctx.case.shape)) > 1 else math.nan,
        reference=reference_name(ctx, any(is_own)),
        limit=limit,
        elements=_size(z),
        trials=len(parts),
        out_rms=math.sqrt(sum(p.out_sq for p in parts) / max(_size(z), 1)),
    )


def _pool(parts: list[Errors]) -> tuple[Array, list[str], list[Array], list[Array], list[bool], Array, Array]:
    """The parts' arrays concatenated: (kernel z, the reference names every part has, their z and |err|,
    whether each is the family's own, the rounding z, the kernel |err|); one part's arrays as they are."""
    first = parts[0]
    own_names = {name for name, _ in first.refs[: first.primary]}
    # the references every pooled trial has (each trial runs the same ones unless one could not run)
    names = [name for name, _ in first.refs if all(name in dict(p.refs) for p in parts)]
    z_refs = [_cat([dict(p.refs)[name] for p in parts]) for name in names]
    e_refs = [_cat([p.e_refs[[m for m, _ in p.refs].index(name)] for p in parts]) for name in names]
    return (
        _cat([p.z for p in parts]),
        names,
        z_refs,
        e_refs,
        [name in own_names for name in names],
        _cat([p.rounding for p in parts]),
        _cat([p.e for p in parts]),
    )


def _cat(xs: list[Array]) -> Array:
    if len(xs) == 1:
        return xs[0]
    return torch.cat(xs) if isinstance(xs[0], torch.Tensor) else np.concatenate(xs)


def _size(x: Array) -> int:
    return x.numel() if isinstance(x, torch.Tensor) else int(x.size)


def pooled(
    ctx: CaseContext, parts: list[Errors], more: Any, into: list[Errors] | None = None
) -> Excess | None:
    """Outputs of fewer than MIN_ELEMENTS elements (a scalar loss, a few rows), pooled over the trials,
    and over fresh trials from ``more(i)`` (a Trial or None) until the pool holds MIN_ELEMENTS or
    POOL_TRIALS trials: the rms statistic means nothing on a handful of numbers. None when the pool stays
    short: the bound alone judges."""
    pool, n = list(parts), sum(p.n for p in parts)
    i = 0
    while n < MIN_ELEMENTS and len(pool) < POOL_TRIALS:
        trial = more(i)
        i += 1
        part = None if trial is None else errors(ctx, trial)
        if part is None:
            if trial is None:
                break
            continue
        pool.append(part)
        n += part.n
    if n < MIN_ELEMENTS:
        return None
    if into is not None:
        into.extend(pool)  # the pooled parts, for the evidence over the case
    return statistics(ctx, pool)


def _counted(
    finite: bool, r: np.ndarray, err: np.ndarray, s: np.ndarray, refs: list[np.ndarray]
) -> np.ndarray | None:
    """The elements the gate counts (finite everywhere, s > 0), or None when that is every element, which
    is found with a few reductions instead of building the mask."""
    if finite and s.size and s.min() > 0 and all(math.isfinite(x.max()) for x in refs):
        return None  # min and max propagate NaN: each test fails where the mask would be False somewhere
    ok = (s > 0) if finite else np.isfinite(r) & np.isfinite(err) & (s > 0)
    for x in refs:
        ok &= np.isfinite(x)
    return None if bool(ok.all()) else ok


def _abs(a: np.ndarray) -> np.ndarray:
    """|a|, in place (``a`` is a fresh difference; a scalar loss's is a numpy scalar)."""
    return np.abs(a, out=a) if isinstance(a, np.ndarray) else np.abs(a)


def _flat(t: np.ndarray) -> np.ndarray:
    """``t[mask]`` for an all-true mask: the elements in the same order, without the gather."""
    return t.reshape(-1)


def _rms(z: Array) -> float:
    """√(mean z²) of a flat array (a tensor's sum of squares where it lives, one scalar back)."""
    if isinstance(z, torch.Tensor):
        return math.sqrt(float(z.dot(z)) / z.numel())
    return math.sqrt(sum_squares(z) / z.size)


def reference_name(ctx: CaseContext, composite_ran: bool) -> str:
    return (
        "composite"
        if composite_ran and ctx.contract.tolerance.excess_reference == "composite"
        else "sequential"
    )


def _floor(ctx: CaseContext, composite_ran: bool, z_round: Array) -> float:
    """The reference's rms z is at least a correctly rounded output's (the composite judges); with
    ``excess_reference = "sequential"``, or when no composite ran, at least the sequential model's, 1."""
    return _rms(z_round) if reference_name(ctx, composite_ran) == "composite" else 1.0


# ---- the relative tolerance (issue 16 item 7) --------------------------------------------------------


def relative(ctx: CaseContext, trial: Trial) -> dict[str, float]:
    """method = "relative": the kernel's max |error| against the baseline's on the same inputs (the larger of
    its two CPU implementations' where oneDNN is on: ``reference_outputs``).

    The baseline's error is floored at one rounding of the output's largest value (u_out·max|y|), so an
    exact or lucky baseline does not demand an exact kernel. ``relative_budget`` = ratio / factor; the
    case's budget is the larger of it and the bound's budget, so a garbage baseline cannot loosen the gate
    past the family's error bound.
    """
    assert trial.cmp is not None
    ref64, err = trial.cmp.ref, trial.cmp.err
    bases = [
        b for b in reference_outputs(ctx, trial.inputs, upcast=False) if tuple(b.shape) == tuple(ref64.shape)
    ]
    if not bases:
        _no_baseline(ctx, tuple(ref64.shape))
        return {"relative_ratio": math.inf, "relative_budget": math.inf, "relative_err": _max(err),
                "relative_allowed": math.inf}  # fmt: skip
    finite = ref64.isfinite()
    u_out = dtypes.unit_roundoff(str(ctx.out_dtype).removeprefix("torch."))
    floor = u_out * _max(ref64.abs().where(finite, 0.0))
    e_k = _max(err.where(finite, 0.0))
    e_b = max(_max((b.to(torch.float64) - ref64).abs().where(finite, 0.0)) for b in bases)
    ratio = e_k / max(e_b, floor) if max(e_b, floor) > 0 else (0.0 if e_k == 0 else math.inf)
    return {
        "relative_allowed": ctx.contract.tolerance.factor * max(e_b, floor),
        "relative_ratio": ratio,
        "relative_budget": ratio / ctx.contract.tolerance.factor,
        "relative_err": e_k,
        "baseline_err": e_b,
    }


def _no_baseline(ctx: CaseContext, shape: tuple[int, ...]) -> None:
    """A declared baseline that raised or returned no tensor of the output's shape cannot judge the kernel:
    the case is an error naming it (it was a bare ``KeyError``), never the kernel's failure."""
    c = ctx.contract
    if c.tolerance.baseline:
        raise ReferenceFault(
            f"contract {c.id!r} (line {c.line}) tolerance.baseline {c.tolerance.baseline!r} raised or returned no "
            f"tensor of the output's shape {list(shape)} on the case's inputs, so it cannot judge the kernel; fix: "
            "make the baseline take the kernel's inputs and return its output (the first tensor of a tuple counts)"
        )


def _max(t: torch.Tensor) -> float:
    return float(torch.nan_to_num(t, nan=math.inf).max()) if t.numel() else 0.0
