"""One case's context and one trial's record: what the harness fills in and every check, the backward
pass, the sensitivity gate and the diagnosis read. Also the fp64 oracle call, the allowance, the signal
ratio and the cancellation probe's offset, which they all share.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from kcgate.contracts.records import Contract
from kcgate.devices.base import HostStopwatch, Stopwatch, is_out_of_memory
from kcgate.engine.reference_checks import reference_tensors
from kcgate.numerics.metrics import Comparison, f64, host, quiet, spread, sum_squares, torch_ops
from kcgate.numerics.ops.base import BoundArgs, OpFamily, Tensors, draw, underflow, upcast
from kcgate.numerics.outputs import Parts, flat, multiple, reference_parts
from kcgate.plan import Case
from kcgate.results.model import Metrics
from kcgate.vocab import dtypes
from kcgate.vocab.classes import CLASSES


@dataclass
class CaseContext:
    """Everything a class check needs for one case."""

    contract: Contract
    case: Case
    kernel: Callable[..., Any]
    op: OpFamily
    device: str = "cpu"
    synchronize: Callable[[], None] = lambda: None
    # a timer of the kernel's device work: CUDA/HIP events on those backends, else wall time after a sync
    stopwatch: Callable[[], Stopwatch] = HostStopwatch
    fp64_on_device: bool = False  # the device runs fp64 at a useful rate (Backend.fast_fp64)
    # earlier trials' compared tensors with their oracle values and allowances (None: not compared)
    previous_outputs: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]] = field(
        default_factory=list
    )
    kernel_s: float = 0.0  # seconds of the kernel's device work, all calls of this case (``stopwatch``)
    oracle_s: float = 0.0  # seconds in the fp64 oracle or the Freivalds check, all calls of this case

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.case.dtype)

    @property
    def out_dtype(self) -> torch.dtype:
        return getattr(torch, self.contract.out_dtype) if self.contract.out_dtype else self.dtype

    def generator(self, *salt: Any) -> torch.Generator:
        """A CPU generator derived from the case seed and a salt (trial index, purpose)."""
        h = hashlib.sha256(f"{self.case.seed}:{salt}".encode()).digest()
        return torch.Generator().manual_seed(int.from_bytes(h[:8], "little") >> 1)

    def bound_args(self) -> BoundArgs:
        out = self.contract.out_dtype or self.case.dtype
        return BoundArgs(
            dtypes.unit_roundoff(self.contract.accumulate),
            dtypes.unit_roundoff(out),
            self.contract.tolerance.lam,
            dtypes.unit_roundoff(self.case.dtype),
            self.case.seed,
        )

    def grad_bound_args(self) -> BoundArgs:
        """Gradients come out in their input's dtype: that is their final rounding."""
        return BoundArgs(
            dtypes.unit_roundoff(self.contract.accumulate),
            dtypes.unit_roundoff(self.case.dtype),
            self.contract.tolerance.lam,
            dtypes.unit_roundoff(self.case.dtype),
            self.case.seed,
        )

    def inputs(self, shape: Sequence[int], salt: Any) -> Tensors:
        """Fresh inputs for one trial: new values every call, reproducible from the recorded seed."""
        offset = float(self.contract.param("offset")) if "offset" in _class_params(self) else 1e4
        gen = self.generator("inputs", salt)
        if self.contract.distribution == "large-mean":
            offset = probe_offset(self.dtype, offset)  # representable: bf16 inputs must not collapse

            xs = self.op.make_inputs(shape, self.dtype, gen, "normal")
            return (draw(xs[0].shape, self.dtype, gen, "large-mean", offset), *xs[1:])
        return self.op.make_inputs(shape, self.dtype, gen, self.contract.distribution)


def _class_params(ctx: CaseContext) -> dict[str, Any]:
    return CLASSES[ctx.contract.klass].params


@dataclass
class Trial:
    """One call of the kernel on fresh inputs, compared with the oracle."""

    shape: tuple[int, ...]
    inputs: Tensors
    out: torch.Tensor | None = None
    ref: torch.Tensor | None = None
    cmp: Comparison | None = None
    metrics: Metrics = field(default_factory=Metrics)
    error: str = ""  # the kernel raised: type and message
    issues: list[str] = field(default_factory=list)  # integrity findings: input-mutation, out-of-bounds, ...
    found_in: dict[str, str] = field(
        default_factory=dict
    )  # issue -> the phase it was seen after: "forward"...
    # issue -> the tensor it was seen on: an input's name (its gradient) or "out" (the forward output)
    tensor_of: dict[str, str] = field(default_factory=dict)
    kernel_s: float = 0.0
    oracle_s: float = 0.0
    salt: Any = 0
    # the inputs as the kernel saw them: the guarded copies on the case's device (Freivalds reads them there)
    on_device: Tensors = ()
    up: Tensors = ()  # the inputs upcast to float64, once (kcgate's bound and sensitivity gate read them)
    freivalds: Any = None  # the FreivaldsResult of a Freivalds trial (its sensitivity statistics)
    # backward: the upstream gradient, the kernel's gradient of each differentiated input (by index;
    # None where its backward gave none), and every compared tensor by name ("out" and input names)
    dy: torch.Tensor | None = None
    grads: dict[int, torch.Tensor | None] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    cmps: dict[str, Comparison] = field(default_factory=dict)  # the comparison of each compared tensor
    signals: dict[str, float] = field(default_factory=dict)  # ‖allowed‖ / ‖reference‖ per deciding tensor
    grad: str = ""  # the tensor that decides the trial: "" the forward output, else an input's gradient
    # several outputs (kcgate.numerics.outputs): the kernel's result as returned, then its named outputs
    # as compared; ``output`` names the one that decides the forward ("" for a single output)
    result: Any = None
    parts: dict[str, torch.Tensor] = field(default_factory=dict)
    output: str = ""

    @property
    def ok(self) -> bool:
        return (
            not self.error
            and not self.issues
            and (self.metrics.budget_used or 0.0) <= 1.0
            and self.metrics.budget_used is not None
        )


def kernels_inputs(trial: Trial) -> Tensors:
    """The inputs as the kernel saw them, on its device (bitwise the drawn ones; detached: a backward made
    them leaves), or the drawn ones where the kernel wrote its inputs or none were recorded. Where the oracle,
    the bound, the gradients' references and the sensitivity gate's references run on a fast-fp64 device."""
    if not trial.on_device or "input-mutation" in trial.issues:
        return trial.inputs
    return tuple(t.detach() for t in trial.on_device)


def probe_offset(dtype: torch.dtype, requested: float) -> float:
    """The cancellation offset: the requested one, at most 2^(p-4) for a p-bit significand so that inputs of
    unit spread keep ~16 distinct values per unit (bf16: 16, fp16: 128, fp32: 2^20)."""
    p = 1 - round(math.log2(torch.finfo(dtype).eps)) if dtype.is_floating_point else 24
    return float(min(requested, 2.0 ** (p - 4)))


def oracle(ctx: CaseContext, inputs: Tensors, up: Tensors | None = None) -> torch.Tensor:
    """The fp64 reference: the op's oracle on inputs upcast exactly to float64 (``up``: already upcast); a
    reference of several outputs as their flat vector (``oracle_parts`` names them)."""
    parts = oracle_parts(ctx, inputs, up)
    return parts[0][1] if len(parts) == 1 else flat(parts)


def oracle_parts(ctx: CaseContext, inputs: Tensors, up: Tensors | None = None) -> Parts:
    """The fp64 reference's named outputs (kcgate.numerics.outputs): ``(("out", y),)`` for one tensor."""
    t0 = time.perf_counter()
    up = up or upcast(inputs)
    try:
        with torch.no_grad():
            result = ctx.op.oracle(*up)
            if ctx.contract.reference:  # a user reference's None, float or integer is its own fault
                reference_tensors(ctx.contract.reference, result)
            if multiple(result) or len(ctx.contract.outputs) > 1:  # a count mismatch raises, naming the key
                parts = reference_parts(result, ctx.contract.outputs)
            else:
                parts = (("out", result[0] if isinstance(result, (tuple, list)) else result),)
    except Exception as exc:
        if is_out_of_memory(exc):  # the case is lost, with what to change; the run goes on
            raise OracleOutOfMemory(
                f"out of memory in the fp64 oracle at shape {tuple(ctx.case.shape)} ({type(exc).__name__}: "
                f'{str(exc)[:300]}); fix: oracle = "freivalds" for a matmul, a smaller shape, or a larger '
                "--memory-limit-gb"
            ) from exc
        raise
    ctx.oracle_s += time.perf_counter() - t0
    return tuple((n, t.to(torch.float64)) for n, t in parts)


class OracleOutOfMemory(MemoryError):
    """The fp64 oracle could not allocate: the case is an error naming the shape and the fix."""


def allowance(
    ctx: CaseContext,
    inputs: Tensors,
    ref: torch.Tensor,
    up: Tensors | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-element allowed error (or ULPs for the ulp and exact methods), from the contract's tolerance.
    ``out``, the kernel's output: a bound derived from a reference stops sampling once it fits."""
    tol = ctx.contract.tolerance
    if tol.method == "exact":
        return torch.zeros(())
    if tol.method == "ulp":
        return torch.full((), tol.ulp, dtype=torch.float64)
    if tol.method == "abs-rel":
        return tol.atol + tol.rtol * ref.abs()
    # error-bound, and relative (which is also held to the family's bound)
    ba = ctx.bound_args()
    floor = subnormal_floor(ba)
    if out is not None and tol.method == "error-bound" and ctx.op.name == "custom":  # a derived bound
        ba = replace(ba, errors=(kernel_error(out, ref),), floor=floor)
    return ctx.op.bound(up or upcast(inputs), ref, ba) + floor


def kernel_error(got: torch.Tensor | None, ref: torch.Tensor) -> torch.Tensor | None:
    """|got − ref| in fp64 where got is (NaN where either is not finite), None where it cannot be compared."""
    if got is None or tuple(got.shape) != tuple(ref.shape) or not got.is_floating_point():
        return None
    return (got.to(torch.float64) - ref.to(device=got.device, dtype=torch.float64)).abs()


def subnormal_floor(ba: BoundArgs) -> float:
    """Below the normal range a rounding errs by up to half the subnormal spacing, absolutely, which no
    multiple of u·|y| covers (torch's fp16 gelu, silu, rms_norm and softmax round tiny results there): two
    such roundings in the input dtype (a value a kernel stores, such as HF's normalised h) and two in the
    output dtype's. docs/ops.md#subnormal-floor."""
    return 2 * (underflow(ba.u_in) + underflow(ba.u_out))


def severity(trial: Trial) -> float:
    """A trial's budget used for picking the worst: an unmeasured one (None: it raised, or NaN where none is
    allowed) as infinite, an exact one (0.0) as the least of all."""
    b = trial.metrics.budget_used
    return math.inf if b is None else b


def signal_ratio(trial: Trial) -> float:
    """‖allowed‖ / ‖reference‖: at 1 or more the tolerance is as large as the output and proves nothing.
    With gradients, the worst over every compared tensor (a zero backward must never pass)."""
    if trial.signals or trial.grads:  # a backward whose gradients are all zero has nothing to lose
        return max(trial.signals.values(), default=0.0)
    return signal(trial.cmp) if trial.cmp is not None else 0.0


def signal(cmp: Comparison, cap: float | None = None) -> float:
    """‖allowed‖ / ‖reference‖ over the elements where the reference is finite (``cap``: method "relative",
    the tighter of the bound and factor x the baseline's error). Where the reference is NaN or ±Inf (C-EXC-01's
    planted inputs; a mean loss over a NaN logit) the comparison is of categories, which a zero output fails:
    those elements have no magnitude to lose, and a reference with none finite has nothing to refuse. As torch
    ops where the comparison lives (two sums of squares come back), or through numpy on the CPU's fast path;
    the two may differ in the last bit (sums in another order)."""
    return (_signal_on_device if torch_ops(cmp.ref) else _signal_on_host)(cmp, cap)


def _signal_on_device(cmp: Comparison, cap: float | None) -> float:
    allowed = cmp.allowed.to(device=cmp.ref.device, dtype=torch.float64).expand(cmp.ref.shape).reshape(-1)
    if cap is not None:
        allowed = torch.clamp(allowed, max=cap)  # NaN stays NaN, as np.minimum
    ref = cmp.ref.reshape(-1)
    if not cmp.finite:
        finite = ref.isfinite()
        ref, allowed = ref[finite], allowed[finite]  # the masked size is a scalar read, not a tensor copy
        if not ref.numel():
            return 0.0
    allowed_ss, ref_ss = torch.stack([allowed.dot(allowed), ref.dot(ref)]).tolist()
    ref_norm = math.sqrt(ref_ss)
    return math.sqrt(allowed_ss) / ref_norm if ref_norm > 0 else float("inf")


@quiet
def _signal_on_host(cmp: Comparison, cap: float | None) -> float:
    allowed = spread(f64(cmp.allowed), cmp.ref.shape)
    if cap is not None:  # method "relative": the tighter of the bound and factor x the baseline's error
        allowed = np.minimum(allowed, cap)
    ref = host(cmp.ref)
    if not cmp.finite:
        finite = np.isfinite(ref)
        if not finite.any():
            return 0.0
        ref, allowed = ref[finite], np.asarray(allowed)[finite]
    ref_norm = math.sqrt(sum_squares(ref))
    return math.sqrt(sum_squares(allowed)) / ref_norm if ref_norm > 0 else float("inf")


def issue(trial: Trial, name: str) -> None:
    if name not in trial.issues:
        trial.issues.append(name)


def reference_rejects(ctx: CaseContext, shape: Sequence[int]) -> str:
    """Why the contract's own input generator or its fp64 reference cannot take a shape kcgate chose (a
    boundary or held-out shape), as a note naming the constraint to declare; "" when both take it. Only for
    a user reference: the families' generators and oracles take every shape their constraints allow."""
    if ctx.op.name != "custom" and not ctx.contract.reference:
        return ""
    try:
        with torch.no_grad():
            ctx.op.oracle(*upcast(ctx.inputs(shape, "shape-probe")))
    except Exception as exc:  # the user's code rejecting kcgate's shape: a note, never the kernel's failure
        declared = tuple(ctx.contract.shapes[0]) if ctx.contract.shapes else ()
        dims = [i for i, d in enumerate(shape) if i >= len(declared) or declared[i] != d]
        hint = ", ".join(f'{i} = "multiple_of({declared[i]})"' for i in dims if i < len(declared))
        hint = hint or '0 = "range(1, 8192)"'
        return (
            f"skipped kcgate's shape {list(shape)}: the input generator or the reference rejects it "
            f"({type(exc).__name__}: {str(exc)[:200]}); declare what it needs, e.g. "
            f"shape_constraints = {{ {hint} }}, or protocol.boundary = false"
        )
    return ""
