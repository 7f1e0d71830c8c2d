"""The backward half of a trial: run the kernel's backward on a seeded upstream gradient, then compare
every input gradient with fp64 autograd through the oracle under the family's ``grad_bound``.

Called by ``kcgate.engine.harness`` for contracts with ``direction = "backward"`` or ``"both"``.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import torch

from kcgate.engine.multi import is_output
from kcgate.engine.trial import CaseContext, Trial, issue, kernel_error, signal
from kcgate.errors import ContractsError
from kcgate.numerics.metrics import Comparison, compare, to_metrics
from kcgate.numerics.ops.base import Tensors, draw
from kcgate.numerics.outputs import differentiable, multiple, raw
from kcgate.results.model import GRAD_BUDGET, OUT_BUDGET
from kcgate.vocab.catalogue import CATALOGUE, has


def upstream(ctx: CaseContext, shape: tuple[int, ...], dtype: torch.dtype, salt: object) -> torch.Tensor:
    """The upstream gradient dY: standard normal in the output's dtype, fresh per trial, seeded."""
    return draw(shape, dtype, ctx.generator("dy", salt), "normal")


def differentiated(ctx: CaseContext, inputs: Tensors) -> list[int]:
    """The indices of the inputs whose gradients are asked for and compared: every floating-point input but
    those the contract declares ``no_grad`` (a loss's target, a mask); index tensors never are. A declared name
    the op has not (a custom op's inputs are its generator's) is the contract's mistake, named."""
    skip = getattr(getattr(ctx, "contract", None), "no_grad", ())
    names = [ctx.op.input_name(i) for i in range(len(inputs))]
    if unknown := [n for n in skip if n not in names]:
        raise ContractsError(
            f"no_grad names {', '.join(map(repr, unknown))}, not an input of this op (its inputs: "
            f"{', '.join(names)}); fix: name the inputs that take no gradient, as the input generator names them"
        )
    return [i for i, t in enumerate(inputs) if t.is_floating_point() and names[i] not in skip]


def run_backward(
    ctx: CaseContext, trial: Trial, out: torch.Tensor, leaves: list[tuple[int, torch.Tensor]]
) -> None:
    """Back-propagate a fresh dY through the kernel's own graph; findings go on the trial."""
    if not out.requires_grad:
        trial.error = (
            "the kernel's output does not require grad, so it has no backward to check "
            "(computed under no_grad, detached, or not an autograd op)"
        )
        issue(trial, "missing-gradient")
        return
    given = trial.dy  # a check that compares with another trial's gradients passes its dY (C-ORD-03)
    dy = given.to(out.dtype) if given is not None else upstream(ctx, tuple(out.shape), out.dtype, trial.salt)
    try:
        dy_on = dy.to(out.device)
        watch = ctx.stopwatch()
        watch.start()
        grads = torch.autograd.grad(out, [v for _, v in leaves], dy_on, allow_unused=True)
        took = watch.stop()
        trial.kernel_s += took
        ctx.kernel_s += took
    except Exception as exc:  # the kernel's backward failing is a finding
        trial.error = f"backward: {type(exc).__name__}: {exc}"[:2000]
        trial.issues.append("raised")
        return
    trial.dy = dy
    # the gradients stay where the kernel left them: compared there on a device with fast fp64, copied to the
    # host for the comparison elsewhere (compare_grads)
    trial.grads = {i: None if g is None else g.detach() for (i, _), g in zip(leaves, grads)}


def reference_grads(ctx: CaseContext, inputs: Tensors, dy: torch.Tensor) -> tuple[Tensors, Tensors]:
    """fp64 inputs and the fp64 autograd gradient of every differentiated input through the oracle (zeros where
    the oracle does not depend on an input)."""
    up, grads, _ = _reference_grads(ctx, inputs, dy)
    return up, grads


def _reference_grads(
    ctx: CaseContext, inputs: Tensors, dy: torch.Tensor
) -> tuple[Tensors, Tensors, set[int]]:
    """:func:`reference_grads`, and the differentiated inputs the oracle's graph does not reach (a reference
    that detaches a loss's target)."""
    keep = set(differentiated(ctx, inputs))
    up = tuple(
        t.detach().to(torch.float64).requires_grad_(i in keep) if t.is_floating_point() else t
        for i, t in enumerate(inputs)
    )
    leaves = [t for i, t in enumerate(up) if i in keep]
    with torch.enable_grad():
        ref = ctx.op.oracle(*up)
        if multiple(ref):  # several outputs: each with its share of the flat dY (kcgate.numerics.outputs)
            outs, dys = differentiable(tuple(("", t) for _, t in raw(ref)), dy.to(torch.float64))
            gs = torch.autograd.grad(outs, leaves, dys, allow_unused=True)
        else:
            ref = ref[0] if isinstance(ref, (tuple, list)) else ref
            gs = torch.autograd.grad(ref, leaves, dy.to(torch.float64).expand_as(ref), allow_unused=True)
    it = iter(g if g is not None else torch.zeros_like(t) for g, t in zip(gs, leaves))
    grads = tuple(
        next(it).detach() if i in keep else torch.zeros((), device=t.device) for i, t in enumerate(up)
    )
    unreached = {i for i, g in zip(sorted(keep), gs) if g is None}
    return tuple(t.detach() for t in up), grads, unreached


def grad_allowance(
    ctx: CaseContext,
    up: Tensors,
    dy: torch.Tensor,
    refs: Tensors,
    got: tuple[torch.Tensor | None, ...] | None = None,
) -> tuple[torch.Tensor | None, ...]:
    """Per-element allowed error of each gradient: the family's derived bound, or the contract's
    atol + rtol·|g| for abs-rel (ULP and exact budgets do not carry over to gradients: a derivative's
    zeros make ULP counts meaningless, and a sum of upstream gradients is not exact)."""
    tol = ctx.contract.tolerance
    if tol.method == "abs-rel":
        return tuple(tol.atol + tol.rtol * g.abs() for g in refs)
    assert ctx.op.grad_bound is not None
    floor = subnormal_grad_floor(ctx.dtype, ctx.contract.tolerance.lam, up)
    ba = ctx.grad_bound_args()
    if got is not None and ctx.op.name == "custom":  # a derived bound stops sampling once the errors fit
        errs = tuple(kernel_error(g, r) for g, r, t in zip(got, refs, up) if t.is_floating_point())
        ba = replace(ba, errors=errs, floor=floor)
    bounds = ctx.op.grad_bound(up, dy.to(torch.float64), refs, ba)
    return tuple(None if b is None else b + floor for b in bounds)


def subnormal_grad_floor(dtype: torch.dtype, lam: float, up: Tensors) -> float:
    """Below the normal range every rounding errs by up to half the subnormal spacing, absolutely
    (C-EXC-01's subnormal trial): λ·√L of them in a sum, L at most the largest input's size."""
    eta = float(torch.finfo(dtype).smallest_normal) * float(torch.finfo(dtype).eps)
    return lam * max((t.numel() for t in up), default=1) ** 0.5 * eta


def dy_scale(ctx: CaseContext, trial: Trial) -> float:
    """The power of two to scale kcgate's dY by so that no gradient is lost under the subnormal floor; 1 when
    none is, or when the floor is not what makes it unmeasurable (its own bound is: that refusal stays).

    dY is kcgate's choice, and a gradient is linear in it: a scalar loss's dY drawn near zero (−0.0005), or
    a mean over many rows in fp16, puts the whole gradient below fp16's normal range, where the floor
    (λ·√L half subnormal spacings) exceeds it and the case would be refused as unmeasurable. fp16 training
    scales the loss for the same reason (loss scaling); the scale is exact, and the results record it."""
    if trial.dy is None or not trial.grads:
        return 1.0
    up = tuple(t.to(torch.float64) if t.is_floating_point() else t for t in trial.inputs)
    floor = subnormal_grad_floor(ctx.dtype, ctx.contract.tolerance.lam, up)
    need = 1.0
    for name, ratio in trial.signals.items():
        c = trial.cmps.get(name)
        if is_output(name) or ratio < 1.0 or c is None:
            continue
        ref = float(c.ref.norm())
        bound = float((torch.broadcast_to(c.allowed, c.ref.shape) - floor).clamp_min(0).norm())
        if not (0 < ref < math.inf and bound < math.inf) or bound / ref > 0.5:
            return 1.0  # the family's bound, not the floor, swamps this gradient
        need = max(need, 2.0 ** math.ceil(math.log2(8 * floor * math.sqrt(c.ref.numel()) / ref)))
    if need == 1.0:
        return 1.0
    top = max(float(c.ref.abs().max()) for n, c in trial.cmps.items() if not is_output(n)) * need
    limit = float(torch.finfo(trial.dy.dtype).max) / 16  # the scaled gradients stay far from overflow
    return need if top <= limit and float(trial.dy.abs().max()) * need <= limit else 1.0


def compare_grads(ctx: CaseContext, trial: Trial, inputs: Tensors | None = None) -> None:
    """Compare every differentiated input's gradient; the worst compared tensor decides the trial. The fp64
    references are computed from ``inputs`` where they live (the kernel's own inputs on its device, or the
    drawn ones on the host) and each gradient is compared there: on a device only summaries come back."""
    if trial.dy is None:
        return
    t0 = time.perf_counter()
    inputs = trial.inputs if inputs is None else inputs
    where = inputs[0].device if inputs else torch.device("cpu")
    dy = trial.dy if trial.dy.device == where else trial.dy.to(where)
    up, refs, unreached = _reference_grads(ctx, inputs, dy)
    _refuse_detached(ctx, trial, unreached)
    # the bound of the finite inputs (C-EXC-01 plants NaN/Inf: a NaN bound would excuse anything; NaN
    # where the fp64 gradient is finite is then an infinite error, a category change)
    got = tuple(trial.grads.get(i) for i in range(len(up)))
    allowed = grad_allowance(ctx, _finite(up), dy, _finite(refs), got)
    ctx.oracle_s += time.perf_counter() - t0
    trial.oracle_s += time.perf_counter() - t0
    scored = [(_score(trial), "", trial.cmp, trial.out)] if ctx.contract.forward else []
    peak = _peaks(refs)
    biggest = max((p for p, r in zip(peak, refs) if r.numel()), default=0.0)
    for i, g in trial.grads.items():
        name = ctx.op.input_name(i)
        if allowed[i] is None:
            continue
        if g is not None and g.device != where:  # fp64 too slow where the kernel ran: compared on the host
            g = g.to(where)
            trial.grads[i] = g
        if g is None:
            trial.error = trial.error or f"the backward returned no gradient for input {name!r}"
            issue(trial, "missing-gradient")
            trial.tensor_of.setdefault("missing-gradient", name)
            g = torch.zeros_like(refs[i])
        if tuple(g.shape) != tuple(refs[i].shape):
            trial.error = f"gradient of {name!r} has shape {tuple(g.shape)}, expected {tuple(refs[i].shape)}"
            issue(trial, "bad-output")
            trial.tensor_of.setdefault("bad-output", name)
            continue
        # zeros are a finding only where they break the bound: layer_norm's dx over n = 1 is zero up to
        # fp64 rounding, and a kernel that returns exact zeros there is right
        if not bool(g.any()) and bool((refs[i].abs() > allowed[i]).any()):  # type: ignore[operator]
            trial.error = trial.error or f"the gradient of {name!r} is all zeros; the fp64 gradient is not"
            issue(trial, "zero-gradient")
            trial.tensor_of.setdefault("zero-gradient", name)
        cmp = compare(g, refs[i], allowed[i], "error-bound")  # type: ignore[arg-type]
        trial.tensors[name], trial.cmps[name] = g, cmp
        if peak[i] > 2.0**-40 * biggest:  # a numerically zero gradient (layer_norm's dγ
            trial.signals[name] = signal(cmp)  # over n = 1) has no signal to lose; the others still do
        m = to_metrics(cmp)
        scored.append((m.budget_used if m.budget_used is not None else float("inf"), name, cmp, g))
    if not ctx.contract.forward:
        for key in [k for k in trial.signals if is_output(k)]:
            trial.signals.pop(key)
    _decide(ctx, trial, scored)


def _refuse_detached(ctx: CaseContext, trial: Trial, unreached: set[int]) -> None:
    """An input the contract differentiates, for which neither the kernel nor the reference gives a gradient
    (a loss whose reference detaches its target), is the contract's mistake, not the kernel's missing gradient."""
    both = [ctx.op.input_name(i) for i in sorted(unreached) if i in trial.grads and trial.grads[i] is None]
    if both:
        it, s = ("them", "s") if len(both) > 1 else ("it", "")
        declare = ", ".join(f'"{n}"' for n in (*getattr(ctx.contract, "no_grad", ()), *both))
        raise ContractsError(
            f"the contract differentiates input{s} {', '.join(map(repr, both))}, but neither the kernel nor the "
            f"reference gives {it} a gradient (the reference detaches {it} or does not depend on {it}); fix: "
            f"declare no_grad = [{declare}] in the contract where {it} take{'s' * (not s)} no gradient (a loss's "
            f"target, labels, a mask), or make the reference differentiate {it}"
        )


def _peaks(refs: Tensors) -> list[float]:
    """max |g| of each reference gradient (NaN where it has one; -inf where it is empty), in one transfer."""
    if not refs:
        return []
    empty = torch.tensor(-math.inf, dtype=torch.float64, device=refs[0].device)
    return torch.stack([r.abs().max().to(torch.float64) if r.numel() else empty for r in refs]).tolist()


def _finite_budget(b: float) -> float:
    return b if b < 1e308 else 1e308  # NaN compares False: kept as 1e308 too


def _finite(ts: Tensors) -> Tensors:
    return tuple(t.nan_to_num(0.0, 0.0, 0.0) if t.is_floating_point() else t for t in ts)


def _score(trial: Trial) -> float:
    b = trial.metrics.budget_used
    return float("inf") if b is None else b


def _decide(
    ctx: CaseContext, trial: Trial, scored: list[tuple[float, str, Comparison | None, torch.Tensor | None]]
) -> None:
    """The trial's out/ref/cmp/metrics become those of its worst tensor (signatures read them)."""
    if not scored:
        return
    budget, name, cmp, tensor = max(scored, key=lambda s: s[0])
    extra = {"reduction_len": float(ctx.op.reduction_len(trial.shape))}
    extra.update((k, v) for k, v in trial.metrics.extra if k.startswith(OUT_BUDGET))  # several outputs'
    # non-finite budgets (NaN where the oracle is finite) are kept as 1e308: results files drop infinities
    alias = getattr(ctx.kernel, "param_names", {})  # a module kernel's parameter names
    extra.update(
        {(GRAD_BUDGET + alias.get(n, n) if n else "out_budget"): _finite_budget(b) for b, n, _, _ in scored}
    )
    if name:
        assert cmp is not None
        trial.grad, trial.cmp, trial.ref, trial.out = name, cmp, cmp.ref, tensor
        trial.metrics = to_metrics(cmp, extra)
    else:
        trial.metrics = replace(
            trial.metrics, extra=tuple(sorted({**dict(trial.metrics.extra), **extra}.items()))
        )


# The reduction length of each gradient of a dot-product family, from the case shape (for the
# accumulator fit of a failed backward: "dW behaves like a bf16 accumulator"): the catalogue's.
GRAD_REDUCTION: dict[str, dict[str, int]] = {
    n: op.grad_reduction for n, op in CATALOGUE.items() if op.grad_reduction
}


def _norm_row_scale(op: str, trial: Trial) -> torch.Tensor:
    """‖terms‖₂ of dγ (dY·x̂ per row) or dβ (dY per row)."""
    x = trial.inputs[0].to(torch.float64)
    dy = trial.dy.to(torch.float64)  # type: ignore[union-attr]
    if trial.grad == "b":
        return (dy**2).sum(0).sqrt()
    if op == "layernorm":
        xhat = (x - x.mean(-1, keepdim=True)) / (x.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    else:
        xhat = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    return ((dy * xhat) ** 2).sum(0).sqrt()


def grad_dot_scale(ctx: CaseContext, trial: Trial) -> tuple[int, torch.Tensor] | None:
    """(reduction length, ‖a∘b‖₂ per element) of the trial's deciding gradient: the same bilinear
    gradient evaluated on squared inputs and a squared dY, square-rooted."""
    dims = GRAD_REDUCTION.get(ctx.op.name, {})
    if trial.grad not in dims or trial.dy is None:
        return None
    if has(ctx.op.name, "normalizes"):
        return trial.shape[0], _norm_row_scale(ctx.op.name, trial)
    sq = tuple(t.to(torch.float64) ** 2 if t.is_floating_point() else t for t in trial.inputs)
    _, g = reference_grads(ctx, sq, trial.dy.to(torch.float64) ** 2)
    return trial.shape[dims[trial.grad]], g[ctx.op.input_names.index(trial.grad)].sqrt()
