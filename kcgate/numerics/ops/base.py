"""The OpFamily record and the input distributions shared by all families."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kcgate.vocab import dtypes
from kcgate.vocab.catalogue import CATALOGUE

Tensors = tuple[torch.Tensor, ...]
# grad_bound(inputs_fp64, dy_fp64, grads_fp64, ba) -> each input's allowed |error| of its gradient
# (None for inputs that are not differentiated, e.g. index tensors).
Bound = Callable[[Tensors, torch.Tensor, "BoundArgs"], torch.Tensor]  # per-element allowed |error|
GradBound = Callable[[Tensors, torch.Tensor, Tensors, "BoundArgs"], tuple["torch.Tensor | None", ...]]


@dataclass(frozen=True)
class BoundArgs:
    """What an error bound needs besides the inputs: precisions and λ."""

    u_acc: float  # unit roundoff of the accumulator
    u_out: float  # unit roundoff of the output dtype
    lam: float  # λ of the probabilistic bound (Higham and Mary)
    u_in: float = 0.0  # unit roundoff of the input dtype (values a kernel may round back to it: P, q·scale)
    seed: int = (
        0  # the case's seed: a derived bound's perturbations are drawn from it (kcgate.numerics.derived)
    )
    # the kernel's |error| per output (a derived bound stops sampling once they fit: kcgate.numerics.derived),
    # and the floor the caller adds to the bound; None: the full bound
    errors: tuple[torch.Tensor | None, ...] | None = None
    floor: float = 0.0


@dataclass(frozen=True)
class OpFamily:
    """How to feed, call, check and slice one family of kernels."""

    name: str
    make_inputs: Callable[[Sequence[int], torch.dtype, torch.Generator, str], Tensors]
    oracle: Callable[..., torch.Tensor]  # fp64 inputs -> fp64 output
    bound: Bound
    reduction_len: Callable[[Sequence[int]], int]
    tolerance: str = "error-bound"  # the family's natural method when the class does not say
    float_inputs: tuple[int, ...] = (0,)  # which inputs take the case dtype (others: index tensors)
    batch_inputs: tuple[int, ...] = (0,)  # inputs whose dim 0 is the batch (rows) dimension
    # The family's torch implementation as a correct kernel computes it in low precision (e.g. torch.softmax,
    # F.scaled_dot_product_attention), called on the case's inputs in their own dtype. None: the oracle
    # applied to the low-precision inputs. Used by the sensitivity gate (excess-error) and as the default
    # baseline of the relative tolerance.
    composite: Callable[..., torch.Tensor] | None = None
    # the contract's ``tolerance.baseline``, callable where the family is used: resolved by
    # kcgate.engine.case.op_for in the in-process path, else called in the reference's sandbox child
    # (kcgate.sandbox.remote_op). Where it is set it replaces ``composite`` as the sensitivity gate's and the
    # relative tolerance's baseline. None: the contract declares none
    baseline: Callable[..., Any] | None = None
    # params -> the family for one contract's ``params`` (attention's causal, rope's layout, ...); None: the
    # family takes no op params
    configure: Callable[[dict[str, Any]], OpFamily] | None = None
    # case shape -> keyword arguments every kernel call receives besides the inputs (is_causal=True, ...)
    kwargs: Callable[[Sequence[int]], dict[str, Any]] | None = None
    # the kernel's result -> the one tensor compared with the oracle (rope's (q, k) pair); None: the result,
    # or its first tensor
    output: Callable[[Any], Any] | None = None
    # known wrong semantics: () -> (what, the family with that mistake); a failed output within the mistaken
    # family's bound of its oracle is diagnosed as that mistake (a dropped causal mask, the other rope layout)
    mistakes: Callable[[], tuple[tuple[str, OpFamily], ...]] | None = None
    # parameter mismatches and slips too small for the bound to see (another eps, eps outside the square
    # root): () -> (what, the family with it); only a within-the-bound failure that one of them explains
    # closely is named by it (kcgate.engine.mistakes.explain_excess), never a failure of the bound
    variants: Callable[[], tuple[tuple[str, OpFamily], ...]] | None = None
    # known mistakes whose whole effect is one rounding (a cast moved), within any bound: () -> (what, the
    # family with it); tried on passing cases too, named only where the kernel's output is that mistake's,
    # rounded to the output dtype, in nearly every element (kcgate.engine.mistakes.reproduced)
    rounding_mistakes: Callable[[], tuple[tuple[str, OpFamily], ...]] | None = None
    # known wrong backwards: () -> (what, the family whose forward is the op's own and whose fp64 autograd
    # gradient has the mistake, with that gradient's bound); only a failing gradient is held to them (a
    # forward failure cannot be one)
    grad_mistakes: Callable[[], tuple[tuple[str, OpFamily], ...]] | None = None
    grad_bound: GradBound | None = None  # None: the family has no backward contract
    input_names: tuple[str, ...] = ()  # placeholders of `call` and the names gradients are reported by
    # inputs -> the "{size}" placeholders of `call` ({"m": 64, ...}); None: read from the inputs' shapes
    # where the catalogue's dim_sources say (varlen attention's packed q has no batch or length axis)
    sizes: Callable[[Tensors], dict[str, int]] | None = None
    # dim index -> constraint that held-out and class shapes always respect ("even", "multiple_of(16)",
    # "range(1, 8192)", "multiple_of(1)" naming another dim...; grammar: kcgate.contracts.shape_class)
    shape_constraints: dict[int, str] = field(default_factory=dict)

    @property
    def default_shapes(self) -> tuple[tuple[int, ...], ...]:
        """What a contract without ``shapes`` runs on: the catalogue entry's (none for a custom op)."""
        op = CATALOGUE.get(self.name)
        return op.default_shapes if op is not None else ()

    def input_name(self, i: int) -> str:
        return self.input_names[i] if i < len(self.input_names) else f"input{i}"

    def slice_rows(self, inputs: Tensors, rows: torch.Tensor | slice) -> Tensors:
        """The same op on a subset of rows: batch inputs sliced on dim 0, the rest shared."""
        return tuple(t[rows] if i in self.batch_inputs else t for i, t in enumerate(inputs))

    def call(self, kernel: Callable[..., Any], inputs: Tensors) -> Any:
        return kernel(*inputs)


def draw(
    shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str, offset: float = 1e4
) -> torch.Tensor:
    """Random values from a named distribution, generated in fp64 on the CPU then cast (reproducible)."""
    shape = tuple(shape)
    if dist == "uniform":
        x = torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1
    elif dist == "positive":
        x = torch.rand(shape, generator=gen, dtype=torch.float64)
    elif dist == "integers":
        x = torch.randint(-4, 5, shape, generator=gen).to(torch.float64)
    elif dist == "large-mean":
        x = torch.randn(shape, generator=gen, dtype=torch.float64) + offset
    else:
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
    return x.to(dtype)


def upcast(inputs: Tensors) -> Tensors:
    """The inputs upcast exactly to float64 (index tensors as they are)."""
    return tuple(t.to(torch.float64) if t.is_floating_point() else t for t in inputs)


ERF_CANCEL = 12.0
"""gelu's 1 + erf(x/√2) cancels for x < −3, an absolute error of about c·u·|x| that no ULP budget on the tiny
result honours. Over every fp32 in ±[1e-3, 16] (torch 2.13): c ≤ 1.5 for ATen's gelu and oneDNN's AVX2 one,
c ≤ 5.71 for oneDNN's AVX-512 gelu, which eager fp32 F.gelu runs on AVX-512 CPUs. 12 leaves torch half the
budget; 8 left it 0.55-0.71 on an Intel Xeon (docs/ops.md#swiglu-and-geglu)."""


@functools.cache
def underflow(u: float) -> float:
    """Half the subnormal spacing of the float format whose unit roundoff is ``u`` (fp16: 2^-25): the absolute
    error of a rounding below the normal range, which no relative term covers."""
    fmts = [f for f in dtypes.FORMATS.values() if f.kind == "float" and f.u == u and f.name != "tfloat32"]
    if not fmts:
        return 0.0
    f = fmts[0]
    emin = {"float64": -1022, "float32": -126, "float16": -14, "bfloat16": -126}.get(f.name, -6)
    return 2.0 ** (emin - f.p)


def sqrt(n: int) -> float:
    return math.sqrt(max(n, 1))
