"""A per-element error bound derived from a user's reference: its operations traced (a dispatch mode), run in
fp64, each result perturbed by the rounding a correct kernel in the contract's dtypes may make there; the bound
is a confidence-scaled spread over seeded samples. docs/derived-bound.md says what it models and why.
"""

from __future__ import annotations

import functools
import hashlib
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch._decomp import decomposition_table
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from kcgate.vocab.causes import SLOW_REFERENCE

aten = torch.ops.aten

SAMPLES = 24
"""Seeded perturbed runs per bound (each one fp64 run of the reference)."""
ALPHA = 1e-6
"""Per element, the chance that the sampled spread underestimates the modelled one by more than the
chi-square factor (the stated confidence is 1 - ALPHA)."""
Z = 5.0
"""The margin in modelled standard deviations: a Gaussian exceeds it with probability 6e-7."""

# ops whose result a correct kernel computes exactly from its operands (selection, layout, sign, constants)
_EXACT = {
    "abs", "neg", "where", "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "relu", "masked_fill",
    "sign", "fill", "copy", "floor", "ceil", "round", "trunc", "amax", "amin", "max", "min", "topk", "sort",
    "zeros_like", "ones_like", "full_like", "empty_like", "zeros", "ones", "full", "empty", "new_zeros",
    "new_ones", "new_full", "new_empty", "scalar_tensor", "arange", "tril", "triu", "hardtanh", "signbit",
    "logical_not", "heaviside", "isnan", "isinf", "isfinite", "fmax", "fmin", "nan_to_num",
}  # fmt: skip
# a correctly rounded result (at most half an ulp); every other pointwise op is allowed two
_BASIC = {"add", "sub", "rsub", "mul", "div", "sqrt", "reciprocal", "addcmul", "addcdiv", "lerp", "square"}
_MATMUL = {"mm", "bmm", "addmm", "baddbmm", "mv", "dot", "addmv", "addbmm", "matmul"}
_SUMS = {"sum", "mean", "nansum", "cumsum"}
_CONV = {"convolution", "_convolution", "convolution_backward"}
_CASTS = {"_to_copy", "to", "convert_element_type", "type_as", "_autocast_to_reduced_precision"}


@dataclass(frozen=True)
class Precision:
    """The unit roundoffs of a correct implementation: tensor-core operands in the input dtype, reductions
    and intermediates in the accumulator, the result in the output dtype."""

    u_in: float
    u_acc: float
    u_out: float


@dataclass(frozen=True)
class TracedOp:
    """One operation of the reference as kcgate saw it, and how it was modelled."""

    name: str  # the aten overload, e.g. "aten.mm.default"
    kind: str  # exact, cast, pointwise, sum, matmul, fallback, decomposed
    shape: tuple[int, ...]  # its (first) result's shape


@functools.cache
def op_kind(func: Any) -> str:
    """How a correct kernel may round at this aten op (kcgate's rounding model, one rule per kind)."""
    base = func.overloadpacket.__name__.rstrip("_")
    if func.namespace == "prims":  # a decomposition's primitive: rounds as its aten namesake does
        twin = getattr(aten, base, None)
        return (
            "basic"
            if base in _BASIC
            else "pointwise"
            if twin is not None and _pointwise(twin)
            else op_kind_prim(base)
        )
    if base in _CASTS:
        return "cast"
    if base in _EXACT:
        return "exact"
    if base in _MATMUL:
        return "matmul"
    if base in _CONV:
        return "conv"
    if base in _SUMS:
        return "sum"
    if torch.Tag.pointwise in func.tags and base in _BASIC:
        return "basic"
    if func in decomposition_table:  # composites (gelu, silu, softmax, layer_norm) as their parts round
        return "decomposed"
    if torch.Tag.pointwise in func.tags:
        return "pointwise"
    if func in decomposition_table:
        return "decomposed"
    if torch.Tag.reduction in func.tags:
        return "fallback"
    return "exact"  # views, indexing, concatenation, gathers: values moved, not computed


@functools.cache
def _name(func: Any) -> str:
    return str(func)


def _pointwise(packet: Any) -> bool:
    return any(torch.Tag.pointwise in getattr(packet, o).tags for o in packet.overloads())


def op_kind_prim(base: str) -> str:
    return "cast" if base in _CASTS else "exact" if base in _EXACT or base in _MOVES else "fallback"


_MOVES = {
    "view_of",
    "broadcast_in_dim",
    "reshape",
    "transpose",
    "squeeze",
    "collapse_view",
    "slice",
    "cat",
    "iota",
}


def _f64(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64:
        return x.to(torch.float64)
    if isinstance(x, torch.dtype) and x.is_floating_point:
        return torch.float64
    if isinstance(x, (list, tuple)):
        return type(x)(_f64(v) for v in x)
    return x


def _u(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).eps) / 2


class Perturb(TorchDispatchMode):
    """Runs every operation in fp64 and records the trace (``ops``). With ``terms`` (a list to fill) it is the
    plan run: unperturbed, it records each perturbation a correct kernel may make, as a scale from the fp64
    values (the linearised model: a rounding's size from the unperturbed value, the second-order term
    dropped). With ``rng`` it is a sample run: each recorded scale times a fresh draw from ``rng``."""

    def __init__(
        self,
        prec: Precision,
        exact: Sequence[torch.Tensor],
        terms: list[Term] | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        self.prec = prec
        self.sampling = terms is not None
        self.rng, self.terms, self.cursor = rng, terms if terms is not None else [], 0
        self.ops: list[TracedOp] = []
        # storages holding values exactly representable in the input dtype (the inputs, and data moved from
        # them): a kernel's operand rounding changes nothing there. Results are kept alive so that no freed
        # storage's address is taken for an input's.
        self.exact = {_key(t) for t in exact}
        self.keep: list[torch.Tensor] = []
        # the dtype the reference chose for each storage by a cast or a factory's dtype (the inputs' and
        # what follows from them alone are the kernel's choice: None): an op runs at the coarser of that and
        # the accumulator, so a reference's casts count and its fp64 does not
        self.dtypes: dict[int, torch.dtype | None] = {_key(t): None for t in exact}
        self.inside = 0  # depth inside composites' decompositions: their parts round at the accumulator only
        self.cast_down: set[int] = set()  # results of a cast to a dtype coarser than the accumulator
        self.result: Any = None  # what the plan run returned

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        kind = op_kind(func)
        if kind == "decomposed":
            return self._composite(func, args, kwargs)
        requested = _cast_dtype(args, kwargs) if kind == "cast" else None
        nominal = requested or self._nominal(args, kwargs)
        args, kwargs = _f64(args), {k: _f64(v) for k, v in kwargs.items()}
        if kind == "cast":
            return self._cast(func, args, kwargs, requested)
        if kind in ("matmul", "conv") and self.sampling:
            args = tuple(self._operand(i, a) for i, a in enumerate(args))
        out = func(*args, **kwargs)
        self._record(func, kind, out)
        for t in tensors(out):
            if t.is_floating_point():
                self.dtypes[_key(t)] = nominal
        if self.sampling and kind not in ("exact",):
            self._round(kind, func, args, out, nominal)
        elif kind == "exact" and all(_key(t) in self.exact for t in tensors(args)):
            self.exact.update(_key(t) for t in tensors(out))
        return out

    def _composite(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A composite op (gelu, silu, softmax, ...) as its decomposition's parts, which run at the accumulator
        (torch's eager kernels and a fused one compute a composite in fp32 whatever the input dtype); its result
        rounds once to the dtype the reference computes it in. Rounding every part to bf16 instead made gelu's
        1 + erf(x/√2) cancel a bf16 rounding's worth of error on its negative tail: a bound 1e5x the value there,
        blind to the tanh approximation (docs/derived-bound.md)."""
        self._record(func, "decomposed", None)
        nominal = self._nominal(args, kwargs)
        start = len(self.ops)
        self.inside += 1
        try:
            with self:
                out = decomposition_table[func](*args, **kwargs)
        finally:
            self.inside -= 1
        computed = any(op.kind not in ("exact", "cast", "decomposed") for op in self.ops[start:])
        u_ref = _u(nominal) if nominal is not None else self.prec.u_in
        if not self.sampling or self.inside or not computed or u_ref <= self.prec.u_acc:
            return out
        for i, t in enumerate(tensors(out)):
            if _key(t) in self.cast_down:  # a decomposition that casts its result down rounded it already
                continue
            if t.is_floating_point() and _key(t) not in self.exact:
                self._perturb(t, i, functools.partial(_scaled, u_ref * _UNIFORM, t))
        return out

    def _nominal(self, args: Any, kwargs: dict[str, Any]) -> torch.dtype | None:
        """The dtype the reference chose for this op's result, by torch's promotion over the operands it
        chose one for (a 0-dim tensor does not promote a dimensioned one); None: the kernel's choice."""
        given = kwargs.get("dtype")
        if isinstance(given, torch.dtype) and given.is_floating_point:
            return given
        ts = [t for t in tensors(args) if t.is_floating_point()]
        ts = [t for t in ts if t.dim()] or ts
        got = [
            d for t in ts if (d := self.dtypes.get(_key(t), None if t.dtype == torch.float64 else t.dtype))
        ]
        if not got:
            return None
        out = got[0]
        for d in got[1:]:
            out = torch.promote_types(out, d)
        return out

    def _record(self, func: Any, kind: str, out: Any) -> None:
        ts = tensors(out)
        self.ops.append(TracedOp(_name(func), kind, tuple(ts[0].shape) if ts else ()))
        self.keep.extend(ts)

    def _cast(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], orig: torch.dtype | None
    ) -> Any:
        """The reference's own casts: kept in fp64 (a reference's fp64 angles must not make a bf16 kernel's
        error zero, nor its fp32 softmax forgive a bf16 one); a cast down to a type coarser than the
        accumulator is a rounding the reference declares, so a correct kernel may make it too."""
        src = args[0] if args and isinstance(args[0], torch.Tensor) else None
        out = func(*args, **kwargs)
        self._record(func, "cast", out)
        if src is None or not out.is_floating_point():
            return out
        u = _u(orig) if orig is not None and orig.is_floating_point else 0.0
        if u:
            self.dtypes[_key(out)] = orig
        if u > self.prec.u_acc:
            self.cast_down.add(_key(out))
        exact = _key(src) in self.exact and u >= self.prec.u_in
        if self.sampling and u > self.prec.u_acc and not exact and out is not src:
            assert orig is not None  # u > 0
            tiny = float(torch.finfo(orig).smallest_normal)
            self._perturb(out, 0, lambda: (u * _UNIFORM) * _mag(out))
            # below the smallest normal the spacing is fixed: a correct fp8 e4m3 cast errs up to 2^-10 there
            # whatever |y| (vLLM's static fp8 quantiser failed 2 of 8 cells on u·|y| alone)
            self._perturb(out, 1, lambda: tiny * u * _UNIFORM if bool((out.abs() < tiny).any()) else 0.0)
        if exact or (_key(src) in self.exact and u == 0.0):
            self.exact.add(_key(out))
        return out

    def _operand(self, i: int, a: Any) -> Any:
        """A computed matmul operand may be rounded to the input dtype (tensor-core operands: attention's P)."""
        if not isinstance(a, torch.Tensor) or not a.is_floating_point() or _key(a) in self.exact:
            return a
        u = max(self.prec.u_in, self.prec.u_acc)
        a = a.clone() if self.rng is not None else a  # the plan run records; a sample perturbs a copy
        self._perturb(a, -1 - i, lambda: (u * _UNIFORM) * _mag(a))
        return a

    def _round(
        self, kind: str, func: Any, args: tuple[Any, ...], out: Any, nominal: torch.dtype | None
    ) -> None:
        acc = self.prec.u_acc
        # a backward stores its intermediates in the input dtype, as autograd does; inside a composite's backward
        # too: torch's CPU glu backward in bf16 errs 35x a bound with its parts at the accumulator
        if kind in ("basic", "pointwise") and torch._C._current_autograd_node() is not None:
            acc = max(acc, self.prec.u_in)
        # the result rounded to the dtype the reference computes it in, where that is coarser (its upcasts
        # count: a reference in bf16 allows a bf16 eager kernel its roundings, one in fp32 or fp64 does not)
        # a path the reference never cast runs, as written, in the inputs' own dtype (eager bf16 code): a kernel
        # written the same way rounds there too
        u_ref = _u(nominal) if nominal is not None else self.prec.u_in
        rnd = u_ref if u_ref > acc and not self.inside else 0.0
        for i, t in enumerate(tensors(out)):
            if t.is_floating_point():
                self._perturb(t, i, functools.partial(_sigma, kind, func, args, out, i, acc, rnd))

    def _perturb(self, t: torch.Tensor, slot: int, sigma: Callable[[], Any]) -> None:
        """Add to ``t`` (in place) a perturbation of standard deviation ``sigma()`` (a tensor of t's shape or
        a number): sigma times a random sign. The plan run records ``sigma()`` from its unperturbed values
        and adds nothing; a sample run adds the recorded sigma times fresh signs, or ``sigma()`` of its own
        values where it has left the plan's path (data-dependent control flow)."""
        key = (len(self.ops), slot, tuple(t.shape))
        if self.rng is None:
            self.terms.append(Term(key, sigma()))
            return
        term = self.terms[self.cursor] if self.cursor < len(self.terms) else None
        if term is not None and term.key == key:
            self.cursor += 1
            got = term.sigma
        else:
            got = sigma()
        if isinstance(got, float) and got == 0.0:
            return
        signs = self._signs(t)
        if isinstance(got, torch.Tensor):
            t.addcmul_(got, signs)
        else:
            t.add_(signs, alpha=got)

    def _signs(self, t: torch.Tensor) -> torch.Tensor:
        """Random signs (±1) of t's shape from the sample's host generator (the same bound on every runner):
        one random bit each, element i's the i-th bit of the drawn bytes (most significant first). Only each
        rounding's variance enters the bound (σ̂), so a sign times σ stands for a uniform or Gaussian rounding
        of that σ, and a sum of them varies less than a Gaussian's (the chi-square factor stays conservative).
        On the host they come as fp64 from a byte-to-8-signs table (a multiply-add of fp64 by int8 signs took
        twice one of fp64 by fp64); to a device they go as a byte each. torch's CPU generator drawing fp64
        uniforms took 60% of a custom case."""
        assert self.rng is not None
        n = t.numel()
        drawn = np.frombuffer(self.rng.bytes((n + 7) // 8), dtype=np.uint8)
        if t.device.type == "cpu":
            return torch.from_numpy(np.take(_SIGN_TABLE, drawn, axis=0).reshape(-1)[:n]).reshape(t.shape)
        signs = np.unpackbits(drawn, count=n).view(np.int8)
        signs *= 2
        signs -= 1
        return torch.from_numpy(signs).reshape(t.shape).to(t.device)


# a byte's 8 bits as signs, most significant first (np.unpackbits' order): bit 1 is +1, bit 0 is −1
_SIGN_TABLE = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float64) * 2 - 1
_UNIFORM = 1 / math.sqrt(3)  # the standard deviation of a uniform rounding on (−1, 1) ulp-units


@dataclass(frozen=True)
class Term:
    """One perturbation the plan run recorded: where (op count, slot, shape) and its standard deviation."""

    key: tuple[int, int, tuple[int, ...]]
    sigma: torch.Tensor | float


def _scaled(c: float, t: torch.Tensor) -> torch.Tensor:
    return _mag(t).mul_(c)


def _mag(t: torch.Tensor) -> torch.Tensor:
    """|t| with NaN and infinities as 0: an infinite element (a −inf mask, a softcap's masked scores) has no
    rounding (perturbed, −inf plus ±inf·δ is NaN, and a NaN row's samples were dropped, leaving its bound one
    final rounding)."""
    return t.abs().nan_to_num_(nan=0.0, posinf=0.0)


def _sigma(
    kind: str, func: Any, args: tuple[Any, ...], out: Any, i: int, acc: float, rnd: float
) -> torch.Tensor:
    """The standard deviation of the rounding of output ``i`` of an op of this kind: basic arithmetic
    uniform within u·|y|; another pointwise op within 2u·|y| at the accumulator's (a correct transcendental is
    within an ulp); sums, dot products and convolutions the summation model's Gaussian σ = u·√(K/3)·(the op
    on the operands' magnitudes); an unmodelled reduction √K roundings of the result's size; plus a uniform
    ``rnd``·|y| where the result rounds to a coarser dtype the reference computes it in (variances add)."""
    t = tensors(out)[i]
    y = _mag(t)
    if kind == "basic":  # y is a fresh tensor (_mag): scaled in place
        return y.mul_(max(acc, rnd) * _UNIFORM)
    if kind == "pointwise":
        return y.mul_(math.sqrt((2 * acc) ** 2 + rnd**2) * _UNIFORM)
    if kind in ("sum", "matmul", "conv"):
        k, mag = _magnitudes(kind, func, args, out)[i]
        sigma = _mag(mag).mul_(acc * math.sqrt(max(k, 1) / 3))
    else:  # an unmodelled reduction: √K roundings of the result's size
        sigma = acc * math.sqrt(max(_numel(args) // max(t.numel(), 1), 1)) * y
    return (sigma.square() + (rnd**2 / 3) * y.square()).sqrt() if rnd else sigma


def _cast_dtype(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.dtype | None:
    """The dtype a cast asks for, before kcgate keeps it in fp64 (None: a cast that keeps the dtype)."""
    got = kwargs.get("dtype") or next((a for a in args[1:] if isinstance(a, torch.dtype)), None)
    if got is None and len(args) > 1 and isinstance(args[1], torch.Tensor):  # type_as
        got = args[1].dtype
    return got if isinstance(got, torch.dtype) else None


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr() if t.numel() else -1


def tensors(x: Any) -> list[torch.Tensor]:
    """Every tensor in a nest of tuples, lists and dicts (torch's pytree leaves), in order."""
    if isinstance(x, torch.Tensor):  # the common cases without pytree's walk (a third of a small case's time)
        return [x]
    if isinstance(x, (tuple, list)) and not any(isinstance(v, (tuple, list, dict)) for v in x):
        return [t for t in x if isinstance(t, torch.Tensor)]
    leaves, _ = tree_flatten(x)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def _numel(args: tuple[Any, ...]) -> int:
    return max((t.numel() for t in tensors(args)), default=1)


def _magnitudes(kind: str, func: Any, args: tuple[Any, ...], out: Any) -> list[tuple[int, torch.Tensor]]:
    """Per result: (K, Σ|terms|) of a sum, dot product or convolution, the magnitudes from the same op on
    the operands' absolute values (a sum of K terms each rounded at most K times)."""
    outs = tensors(out)
    absargs = tuple(a.abs() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
    ks = [max(_numel(args) // max(t.numel(), 1), 1) for t in outs]
    name = func.overloadpacket.__name__
    if kind == "matmul":
        b = args[-1] if name in ("mm", "bmm", "mv", "dot", "matmul") else args[-1]
        ks = [int(b.shape[-2]) if b.dim() >= 2 else int(b.shape[-1])] * len(outs)
    elif name == "convolution_backward":  # (grad_output, input, weight, ...): dX sums over C_out·taps, dW and
        go, w = args[0], args[2]  # db over the batch and positions
        ks = [max(w.shape[0] * int(math.prod(w.shape[2:])), 1)] + [max(go.numel() // go.shape[1], 1)] * 2
    elif kind == "conv":
        ks = [max(int(args[1][0].numel()), 1)] * len(outs)
    try:
        with torch.no_grad():
            mags = tensors(func(*absargs))
        return [(k, m.abs().reshape(t.shape)) for k, m, t in zip(ks, mags, outs)]
    except Exception:  # an overload whose operands' magnitudes do not fit (scalars in the way): the result's
        return [(k, t.abs() * k) for k, t in zip(ks, outs)]


def chi2_lower(n: int, alpha: float) -> float:
    """The lower ``alpha`` quantile of chi-square with ``n`` degrees of freedom (Wilson-Hilferty)."""
    z = statistics.NormalDist().inv_cdf(alpha)
    return n * max(1 - 2 / (9 * n) + z * math.sqrt(2 / (9 * n)), 1e-3) ** 3


def sample_seed(seed: int, sample: int) -> int:
    h = hashlib.sha256(f"derived:{seed}:{sample}".encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1


@dataclass(frozen=True)
class Derived:
    """The fp64 reference's outputs (flattened), each one's allowed |error|, and the trace it came from."""

    refs: tuple[torch.Tensor, ...]
    bounds: tuple[torch.Tensor, ...]
    trace: tuple[TracedOp, ...]
    # per element, the samples' rms error (σ̂): the error a rounding-model implementation makes there
    spread: tuple[torch.Tensor, ...] = ()
    samples: int = SAMPLES  # the samples drawn: fewer where the kernel's errors fit early (``derive``)


def trace(reference: Callable[..., Any], inputs: Sequence[torch.Tensor]) -> tuple[TracedOp, ...]:
    """The reference's operations on these inputs, each with its rounding kind (for reuse: mutation,
    explanation)."""
    mode = Perturb(Precision(0.0, 0.0, 0.0), inputs)
    with torch.no_grad(), mode:
        reference(*inputs)
    return tuple(mode.ops)


def as_drawn(up: Sequence[torch.Tensor], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """fp64 inputs back in the narrowest of ``dtype``, fp32 and fp64 that holds each exactly: the reference is
    traced on them, so that code taking a dtype from its inputs (``x.to(w.dtype)``, ``dtype_in = x.dtype``)
    sees the one it runs with; the mode computes in fp64 all the same."""
    out = []
    for t in up:
        if t.is_floating_point():
            t = next((c for d in (dtype, torch.float32) if torch.equal((c := t.to(d)).to(t.dtype), t)), t)
        out.append(t)
    return tuple(out)


def in_fp64(reference: Callable[..., Any], inputs: Sequence[torch.Tensor]) -> Any:
    """The reference on fp64 inputs with its own casts kept in fp64: the oracle a custom op is compared with
    (a reference that computes in fp32 must not put fp32 rounding into kcgate's reference value)."""
    with Perturb(Precision(0.0, 0.0, 0.0), inputs):
        return reference(*inputs)


EARLIEST = 4
"""The fewest samples a bound rests on where the kernel's errors fit early: the bound returned is their
estimate of the full one (its size is read by the signal check and the upstream gradient's scaling)."""


def derive(
    run: Callable[[], Any],
    inputs: Sequence[torch.Tensor],
    prec: Precision,
    out_u: Sequence[float],
    *,
    seed: int = 0,
    samples: int = SAMPLES,
    errors: Sequence[torch.Tensor | None] | None = None,
    floor: float = 0.0,
) -> Derived:
    """``run()`` (the reference on ``inputs``, or its gradients) exactly in fp64, then ``samples`` times
    perturbed; each output's bound is Z·σ̂·√(N/χ²_α(N)) plus its final rounding ``out_u[i]``·|y|, twice where
    the output is coarser than the accumulator (an eager kernel rounds its last intermediate to it too: HF's
    RMSNorm rounds h before the weight multiplies it).

    ``errors`` (the kernel's |error| per output, NaN where not comparable) stops the sampling once the verdict
    is decided: after n samples the bound of all N is at least Z·√(Σ dev² / χ²_α(N)) (the samples still to
    come add to the sum, never take from it); where every error fits under that plus ``floor`` (n at least
    ``EARLIEST``), the kernel passes the full bound whatever the rest draw, and the bound returned is the n samples' estimate of it
    (never below that floor). A kernel that does not fit draws all N: the same verdict and the same bound.
    The one function that runs the reference (a sandbox's remote call can wrap it)."""
    plan = _plan(run, inputs, prec)
    refs = [t.detach() for t in tensors(plan.result)]
    sq = [torch.zeros_like(r) for r in refs]
    scale = Z * math.sqrt(samples / chi2_lower(samples, ALPHA))
    # an output that is the inputs' values moved (a gather, a copy) has no rounding to allow
    moved = [_key(t) in plan.exact for t in tensors(plan.result)]
    final = [
        (0.0 if m else (2 + 2 * u) * u if u > prec.u_acc else u) * r.abs()
        for r, u, m in zip(refs, (*out_u, *[out_u[-1]] * len(refs)), moved)
    ]
    # where the kernel's errors fit the bound of all N samples once Σ dev² reaches need (None: never)
    need = _needed(errors, final, floor, scale**2 / samples) if errors is not None else None
    n = 0
    for n in range(1, samples + 1):
        t0 = time.perf_counter()
        for acc, g, r in zip(sq, _sample(run, inputs, prec, plan.terms, sample_seed(seed, n - 1)), refs):
            dev = (g - r).nan_to_num_(posinf=0.0, neginf=0.0, nan=0.0)
            acc.addcmul_(dev, dev)
        if n == 1:  # timed on a sample, not the plan run: a worker's first plan run pays torch's first use of
            _announce_slow(
                time.perf_counter() - t0, samples, inputs
            )  # the decompositions (9-11 s under load)
        if need is not None and n >= EARLIEST and all(bool((m <= acc).all()) for m, acc in zip(need, sq)):
            break
    bounds = tuple(scale * (acc / n).sqrt() + f for acc, f in zip(sq, final))
    spread = tuple((acc / n).sqrt() for acc in sq)
    return Derived(tuple(refs), bounds, tuple(plan.ops), spread, n)


SLOW_S = 60.0
"""Where one trial's samples would take longer than this (the first sample run's seconds times the samples),
the worker says so on stderr before it draws the rest: a case that then times out names its slow reference."""


def _announce_slow(took: float, samples: int, inputs: Sequence[torch.Tensor]) -> None:
    """One stderr line naming a slow reference and what its derived bound will cost (SLOW_REFERENCE)."""
    if took * samples < SLOW_S:
        return
    shapes = ", ".join(str(list(t.shape)) for t in inputs)
    print(
        f"{SLOW_REFERENCE}one fp64 run of the reference took {took:.3g} s on inputs of shape {shapes}; the "
        f"derived bound runs it up to {samples} more times a trial, about {took * samples:.0f} s (fewer where "
        "the kernel's errors fit early; again with gradients, and for the fp64 oracle); fix: a vectorised "
        "reference (no Python loop over elements or time steps), a smaller shape, a written tolerance, or a "
        "larger protocol.timeout_s",
        file=sys.stderr,
        flush=True,
    )


def _plan(run: Callable[[], Any], inputs: Sequence[torch.Tensor], prec: Precision) -> Perturb:
    """The unperturbed fp64 run: its result (``.result``), trace and recorded perturbation scales."""
    plan = Perturb(prec, inputs, terms=[])
    with plan:
        plan.result = run()
    return plan


def _sample(
    run: Callable[[], Any], inputs: Sequence[torch.Tensor], prec: Precision, terms: list[Term], seed: int
) -> list[torch.Tensor]:
    """One perturbed run: the plan's perturbations drawn from a host generator seeded by ``seed``."""
    rng = np.random.Generator(np.random.PCG64(seed))
    with Perturb(prec, inputs, terms=terms, rng=rng):
        return [t.detach() for t in tensors(run())]


def _needed(
    errors: Sequence[torch.Tensor | None], final: Sequence[torch.Tensor], floor: float, per: float
) -> list[torch.Tensor] | None:
    """Per output, the Σ dev² at which its errors fit Z·√(Σ dev²·χ-factor²/N) + the final rounding + floor:
    (e − final − floor)²/per where e exceeds final + floor, else 0 (None: an output not given, of another
    shape, or with a NaN error, which fits nowhere)."""
    if len(errors) != len(final):
        return None
    out = []
    for e, f in zip(errors, final):
        if e is None or e.shape != f.shape:
            return None
        over = (e - f.to(e.device)).sub_(floor).clamp_min_(0.0)
        if math.isnan(float(over.sum())):  # every term is at least 0: a NaN anywhere, and only then
            return None
        out.append(over.square_().div_(per).to(f.device))
    return out
