"""A custom op's reference with its traced reductions accumulated at a narrow width: the emulation the custom
op's accumulator fit (kcgate.engine.accumulator.traced_accumulator_signature) compares a kernel's error with.

The reference runs in fp64 as its oracle does (kcgate.numerics.derived.Perturb: its own casts kept in fp64,
composites as their decompositions), except each sum over a dimension (``sum``, ``mean``, and ``var`` as a
mean and a sum of squared deviations, the way torch's decompositions reach them: layer_norm, group_norm,
rms_norm's ``pow(2).mean``, ``var_mean``, ``linalg.vector_norm``) is computed as a running sum held in the
accumulator's format: its terms rounded to it, and the sum rounded after every ``block`` terms (the partial
sum of a block exact), the model the family path's K sweep fits (kcgate.engine.accumulator.fit_blocked).

It runs the user's reference, so it runs where the reference runs: in the reference's sandbox child
(kcgate.sandbox.reference, ``accumulated``), never in the judge's process.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kcgate.numerics.derived import Perturb, Precision, _f64, tensors
from kcgate.numerics.outputs import multiple, reference_parts

aten, prims = torch.ops.aten, torch.ops.prims

# the accumulator formats emulated (the judge's fit compares the kernel's error with each)
WIDTHS: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}

BLOCKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # rounding intervals emulated (as the K sweep fits)

MIN_K = 16  # a reduction shorter than this gives no accumulator evidence (a few terms round like one op)

MAX_ELEMENTS = (
    1 << 22
)  # the inputs' elements, four times over (their intermediates), past which it is not tried


def _dims(t: torch.Tensor, dim: Any) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return list(range(t.dim()))
    ds = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % max(t.dim(), 1) for d in ds})


def running_sum(t: torch.Tensor, dims: Sequence[int], dtype: torch.dtype, block: int) -> torch.Tensor:
    """The sum of fp64 ``t`` over ``dims`` (dropped) as a running sum in ``dtype``: the terms rounded to it,
    the sum rounded after each block of ``block`` terms (a block's partial sum exact), in fp64."""
    keep = [d for d in range(t.dim()) if d not in dims]
    moved = t.permute(*keep, *dims) if t.dim() else t.reshape(1)
    terms = moved.reshape(*[t.shape[d] for d in keep], -1).to(dtype).to(torch.float64)
    k = terms.shape[-1]
    if block >= k:
        return terms.sum(-1).to(dtype).to(torch.float64)
    nb = math.ceil(k / block)
    padded = torch.nn.functional.pad(terms, (0, nb * block - k))
    parts = padded.reshape(*terms.shape[:-1], nb, block).sum(-1)
    s = torch.zeros(terms.shape[:-1], dtype=torch.float64)
    for j in range(nb):
        s = (s + parts[..., j]).to(dtype).to(torch.float64)
    return s


class Accumulate(Perturb):
    """The reference in fp64 with each traced sum over a dimension a running sum in ``dtype`` rounded every
    ``block`` terms; ``ks`` records each such reduction's length."""

    def __init__(self, inputs: Sequence[torch.Tensor], dtype: torch.dtype, block: int) -> None:
        super().__init__(Precision(0.0, 0.0, 0.0), inputs)
        self.acc, self.block = dtype, block
        self.ks: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        got = self._reduction(func, _f64(args), {k: _f64(v) for k, v in kwargs.items()})
        if got is None:
            return super().__torch_dispatch__(func, types, args, kwargs)
        self._record(func, "sum", got)
        return got

    def _reduction(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if x is None or not x.is_floating_point():
            return None
        packet = func.overloadpacket
        if packet in (aten.sum, aten.mean) and func._overloadname in ("dim_IntList", "dim", "default"):
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
            mean = packet is aten.mean
        elif func is prims.sum.default or func is prims.var.default:
            dim, keepdim, mean = args[1], False, False
        else:
            return None
        dims = _dims(x, dim)
        n = math.prod(x.shape[d] for d in dims) if dims else 1
        if n < MIN_K:
            return None
        self.ks.append(n)
        if func is prims.var.default:  # a mean, then the sum of squared deviations from it
            correction = float(args[2] if len(args) > 2 else kwargs.get("correction", 0))
            mu = running_sum(x, dims, self.acc, self.block) / n
            dev = x - mu.reshape([1 if d in dims else s for d, s in enumerate(x.shape)])
            return running_sum(dev * dev, dims, self.acc, self.block) / max(n - correction, 1)
        out = running_sum(x, dims, self.acc, self.block)
        if mean:
            out = out / n
        if keepdim:
            out = out.reshape([1 if d in dims else s for d, s in enumerate(x.shape)])
        return out


def _flat(result: Any, pick: Callable[[Any], Any]) -> torch.Tensor | None:
    got = pick(result)
    ts = tensors(got)
    if len(ts) != 1 or not ts[0].is_floating_point():
        return None
    return ts[0].detach().to(torch.float64)


def accumulated(
    reference: Callable[..., Any],
    up: Sequence[torch.Tensor],
    pick: Callable[[Any], Any] = lambda r: r,
    dy: torch.Tensor | None = None,
    index: int | None = None,
) -> dict[str, Any] | None:
    """The reference's deciding output (``pick`` of its result), or with ``dy`` and ``index`` the gradient of
    input ``index`` under the upstream gradient ``dy`` (one output only: its backward's reductions, the sums
    over broadcast dimensions, emulated too), with its traced reductions emulated at each width of WIDTHS and
    each interval of BLOCKS up to the longest reduction: {"k": the longest reduction's length, "runs":
    [[width, block, tensor], ...]}; None where it traces no reduction of MIN_K terms or more (nothing to fit),
    or a run raises."""
    total = sum(t.numel() for t in up if isinstance(t, torch.Tensor))
    if total * 4 > MAX_ELEMENTS:
        return None
    runs: list[list[Any]] = []
    k = 0
    try:
        for name, dtype in WIDTHS.items():
            for block in BLOCKS:
                if runs and block >= k * 2:
                    break  # every longer interval rounds each reduction once, as this one did
                mode = Accumulate(up, dtype, block)
                out = _run(reference, up, pick, mode) if dy is None else _grad(reference, up, dy, index, mode)
                if out is None or not mode.ks:
                    return None
                k = max(mode.ks)
                runs.append([name, block, out])
    except Exception:  # noqa: BLE001 — a reference that cannot run this way gives no evidence
        return None
    return {"k": k, "runs": runs}


def _run(
    reference: Callable[..., Any], up: Sequence[torch.Tensor], pick: Callable[[Any], Any], mode: Accumulate
) -> torch.Tensor | None:
    with torch.no_grad(), mode:
        return _flat(reference(*up), pick)


def _grad(
    reference: Callable[..., Any],
    up: Sequence[torch.Tensor],
    dy: torch.Tensor,
    index: int | None,
    mode: Accumulate,
) -> torch.Tensor | None:
    if index is None or not 0 <= index < len(up) or not up[index].is_floating_point():
        return None
    leaves = [t.detach().requires_grad_() if t.is_floating_point() else t for t in up]
    with torch.enable_grad(), mode:
        out = reference(*leaves)
        if multiple(out):
            return None
        out = out[0] if isinstance(out, (tuple, list)) else out
        (g,) = torch.autograd.grad(
            out, [leaves[index]], dy.to(torch.float64).expand_as(out), allow_unused=True
        )
    return None if g is None else g.detach().to(torch.float64)


def picker(name: str, outputs: Sequence[str]) -> Callable[[Any], Any]:
    """The deciding output of a reference's result: ``name`` of several (named as the contract's ``outputs``),
    else the result itself."""
    return (lambda r: dict(reference_parts(r, tuple(outputs)))[name]) if name else (lambda r: r)
