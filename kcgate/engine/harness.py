"""Harness integrity for every protocol: fresh inputs per trial, guard bands, NaN-poisoned outputs,
input-mutation and stale-output detection, the signal check, and timing of kernel and oracle.

Backward contracts (``direction = "backward" | "both"``): the float inputs require grad, a seeded
upstream gradient is drawn per trial, and every input gradient is compared with fp64 autograd through
the oracle under the family's ``grad_bound``; the trial is decided by its worst tensor (``Trial.grad``).

A trial never raises for a kernel's sake: what the kernel did wrong is recorded on the ``Trial``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from kcgate.devices.base import is_out_of_memory
from kcgate.engine import sensitivity, torch_state
from kcgate.engine.backward import compare_grads, differentiated, dy_scale, run_backward
from kcgate.engine.multi import compare_outputs, is_output, kernel_output, reference_gives
from kcgate.engine.reference_checks import mismatch_detail, shape_detail
from kcgate.engine.trial import (
    CaseContext,
    Trial,
    allowance,
    issue,
    kernels_inputs,
    oracle,
    oracle_parts,
    signal,
)
from kcgate.numerics.metrics import NUMPY_DTYPES, compare, f64, host, to_metrics, torch_ops
from kcgate.numerics.ops.base import Tensors, upcast
from kcgate.numerics.oracles.freivalds import freivalds_check, freivalds_linear, row_errors, use_freivalds
from kcgate.numerics.outputs import flat
from kcgate.results.model import Metrics
from kcgate.vocab.catalogue import CATALOGUE

CANARY = 1234.5  # fills the guard bands around provided output buffers


def run_trial(
    ctx: CaseContext,
    shape: Sequence[int] | None = None,
    salt: Any = 0,
    inputs: Tensors | None = None,
    kernel: Callable[..., Any] | None = None,
    call_kwargs: dict[str, Any] | None = None,
    dy: torch.Tensor | None = None,
) -> Trial:
    """Run the kernel once on fresh (or given) inputs and compare it with the fp64 oracle."""
    shape = tuple(shape or ctx.case.shape)
    fresh = inputs is None
    inputs = ctx.inputs(shape, salt) if inputs is None else inputs
    trial = Trial(shape=shape, inputs=inputs, salt=salt, dy=dy)
    out = _call(ctx, trial, kernel or ctx.kernel, call_kwargs or {})
    if out is None:
        return trial
    trial.out = out
    if _wants_freivalds(ctx, shape) and not ctx.contract.backward:
        return _freivalds_trial(ctx, trial)
    t0 = time.perf_counter()
    x = kernels_inputs(trial) if on_device(ctx) else inputs  # where the oracle and the bound run
    trial.up = upcast(x)  # once per trial: the bound, the oracle and the sensitivity gate read it
    ref_parts = oracle_parts(ctx, x, trial.up if _builtin_oracle(ctx) else None)
    trial.ref = ref_parts[0][1] if len(ref_parts) == 1 else flat(ref_parts)
    single = len(ref_parts) == 1 and trial.result is None
    allowed = allowance(ctx, x, trial.ref, trial.up, out if single else None)
    trial.oracle_s = time.perf_counter() - t0
    extra = {"reduction_len": float(ctx.op.reduction_len(shape))}
    if len(ref_parts) > 1 or trial.result is not None:
        if not compare_outputs(ctx, trial, ref_parts, allowed, extra):
            return trial
    else:
        if not _shape_ok(ctx, trial, out, trial.ref):
            return trial
        # as torch ops where the output is, or through numpy on the CPU (bitwise the same; numerics/metrics.py)
        trial.cmp = compare(out, trial.ref, allowed, ctx.contract.tolerance.method)
        trial.tensors["out"], trial.cmps["out"] = out, trial.cmp
        trial.signals["out"] = signal(trial.cmp)
        trial.metrics = to_metrics(trial.cmp, extra)
    if ctx.contract.tolerance.method == "relative":
        _relative(ctx, trial)
    if ctx.contract.backward:
        compare_grads(ctx, trial, x)
        if dy is None and (scale := dy_scale(ctx, trial)) > 1.0:
            trial = _rescaled(ctx, trial, scale, kernel, call_kwargs)
    if fresh:
        _stale_check(ctx, trial)
    return trial


def _rescaled(
    ctx: CaseContext,
    trial: Trial,
    scale: float,
    kernel: Callable[..., Any] | None,
    call_kwargs: dict[str, Any] | None,
) -> Trial:
    """The trial again on the same inputs with kcgate's dY scaled by a power of two (exact), so that its
    gradients clear the subnormal floor (kcgate.engine.backward.dy_scale); ``dy_scale`` in the metrics."""
    assert trial.dy is not None  # dy_scale is 1 without one
    t = run_trial(ctx, trial.shape, trial.salt, trial.inputs, kernel, call_kwargs, dy=trial.dy * scale)
    t.metrics = replace(t.metrics, extra=tuple(sorted({**dict(t.metrics.extra), "dy_scale": scale}.items())))
    return t


def _relative(ctx: CaseContext, trial: Trial) -> None:
    """The relative tolerance: the budget is the worse of the bound's and (error / baseline's) / factor."""
    rel = sensitivity.relative(ctx, trial)
    m = trial.metrics
    bound = m.budget_used if m.budget_used is not None else float("inf")
    extra = {**dict(m.extra), **rel, "bound_budget": bound}
    trial.metrics = replace(
        m, budget_used=max(bound, rel["relative_budget"]), extra=tuple(sorted(extra.items()))
    )
    assert trial.cmp is not None
    trial.signals["out"] = signal(trial.cmp, rel["relative_allowed"])


def on_device(ctx: CaseContext) -> bool:
    """Whether a trial's oracle, bound, comparison, gradients' references and sensitivity gate run where the
    kernel ran, on the guarded inputs it saw (its output and gradients never copied to the host): on a device
    with fast fp64 (``Backend.fast_fp64``: data-centre GPUs, and the CPU itself), except for method
    ``relative``, whose baseline runs on the host inputs. Elsewhere (MPS, consumer GPUs: fp64 at 1/64 rate
    or none) the output is copied back and all of it runs on the host (docs/runners.md)."""
    return ctx.fp64_on_device and ctx.contract.tolerance.method != "relative"


def _wants_freivalds(ctx: CaseContext, shape: tuple[int, ...]) -> bool:
    """oracle = "freivalds", or "auto" above FREIVALDS_AUTO_MIN_FLOPS, on a matmul-like op."""
    op = CATALOGUE.get(ctx.op.name)
    if ctx.contract.oracle not in ("freivalds", "auto") or op is None or not op.matmul_like:
        return False
    return use_freivalds(*op.matmul_mkn(shape), ctx.contract.oracle)


def _freivalds_trial(ctx: CaseContext, trial: Trial) -> Trial:
    """O(n²) verification of a large product: random vectors drawn after the output exists. Rows the check
    flags (up to 8) are recomputed in fp64, so the metrics count elements, not trials."""
    assert trial.out is not None
    t0 = time.perf_counter()
    x = kernels_inputs(trial)
    c = trial.out.to(ctx.out_dtype)
    x = tuple(t.detach() if t.device == c.device else t.to(c.device) for t in x)
    kw = {
        "accumulate": ctx.contract.accumulate,
        "lam": ctx.contract.tolerance.lam,
        "k": ctx.contract.protocol.freivalds_vectors,
        "excess": ctx.contract.tolerance.excess if sensitivity.applies(ctx) else 0.0,
    }
    if ctx.op.name == "linear":
        res = freivalds_linear(x[0], x[1], c, x[2], **kw)  # type: ignore[arg-type]
        a, b, bias = x[0], x[1].mT, x[2]
    else:
        res = freivalds_check(x[0], x[1], c, **kw)  # type: ignore[arg-type]
        a, b, bias = x[0], x[1], None
    trial.oracle_s = time.perf_counter() - t0
    ctx.oracle_s += trial.oracle_s
    trial.freivalds = res
    count = _recheck_rows(ctx, a, b, bias, c, res.flagged)
    trial.metrics = Metrics(
        budget_used=res.budget_used,
        elements=count["elements"],
        mismatches=count["over"],
        worst_index=count["worst"] if count["worst"] else (res.worst_row,),
        extra=(
            ("freivalds_excess_elements", float(count["excess"])),
            ("freivalds_false_alarm", res.false_alarm_prob),
            ("freivalds_k", float(res.k)),
            ("freivalds_rows", float(c.numel() // max(c.shape[-1], 1))),
            ("freivalds_rows_over", float(res.rows_over)),
            ("freivalds_rows_rechecked", float(len(res.flagged))),
            ("reduction_len", float(ctx.op.reduction_len(trial.shape))),
        ),
    )
    return trial


def _recheck_rows(
    ctx: CaseContext,
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    c: torch.Tensor,
    rows: tuple[int, ...],
) -> dict[str, Any]:
    """Recompute flagged rows (flat over (*batch, M)) in fp64: elements over the contract's bound, elements
    over the sensitivity level, and the worst element's index (batch..., row, column)."""
    out: dict[str, Any] = {"elements": 0, "over": 0, "excess": 0, "worst": ()}
    worst = -1.0
    for r in rows:
        e = row_errors(
            a,
            b,
            c,
            r,
            bias=bias,
            accumulate=ctx.contract.accumulate,
            lam=ctx.contract.tolerance.lam,
            factor=ctx.contract.tolerance.excess or 1.5,
        )
        out["elements"] += e.elements
        out["over"] += e.over
        out["excess"] += e.excess
        if e.worst_ratio > worst:
            worst, out["worst"] = e.worst_ratio, e.index
    return out


def _builtin_oracle(ctx: CaseContext) -> bool:
    """kcgate's own oracle, which never writes its inputs (a user reference gets its own copy)."""
    return not ctx.contract.reference and ctx.op.name != "custom"


# ---- calling the kernel under guard -------------------------------------------------------------


def call_guarded(ctx: CaseContext, inputs: Tensors) -> Trial:
    """Call the kernel once under the guard bands and integrity checks, without an oracle (for inputs whose
    result is undefined, e.g. out-of-range indices); ``trial.out`` is None when the kernel raised."""
    trial = Trial(shape=tuple(ctx.case.shape), inputs=inputs)
    trial.out = _call(ctx, trial, ctx.kernel, {})
    return trial


def _call(
    ctx: CaseContext, trial: Trial, kernel: Callable[..., Any], kwargs: dict[str, Any]
) -> torch.Tensor | None:
    guard = ctx.contract.protocol.guard if ctx.contract.protocol.poison else 0
    bufs = [_guarded(t, guard, ctx.device) for t in trial.inputs]
    views = tuple(b[1] for b in bufs)
    # what each input must still hold afterwards: the drawn tensor itself (the kernel only sees the copy
    # in the guarded buffer), or a copy of the view where the buffer lives on another device
    snapshots = [t if t.device == v.device else v.detach().clone() for t, v in zip(trial.inputs, views)]
    out_buf = _out_buffer(ctx, trial, guard) if ctx.contract.call == "out" else None
    backward = ctx.contract.backward
    leaves = _grad_leaves(ctx, views) if backward else []
    watch = ctx.stopwatch()
    try:
        with torch.set_grad_enabled(backward):
            extra = ctx.op.kwargs(trial.shape) if ctx.op.kwargs else {}
            watch.start()  # after the arguments are built: the device's time in the kernel's own work
            result = kernel(*views, **extra, **kwargs, **({"out": out_buf[1]} if out_buf else {}))
            result = plain(result)
            result = ctx.op.output(result) if ctx.op.output else result
        trial.kernel_s = watch.stop()  # waits for the device (an event, or a synchronize)
        ctx.kernel_s += trial.kernel_s
    except Exception as exc:  # the kernel's failure is a finding, not ours
        trial.error = _kernel_error(ctx, trial, exc)
        trial.issues.append("raised")
        _global_state(ctx, trial)
        return None
    _global_state(ctx, trial)  # before the oracle runs: it must use the operators captured at start
    if out_buf is not None:
        result = (
            _check_out_buffer(trial, out_buf, guard) if result is None or result is out_buf[1] else result
        )
    # a custom op's result may be several outputs (kcgate.engine.multi); a family's compares its first tensor
    out = kernel_output(ctx, trial, result) if ctx.op.name == "custom" else _first_tensor(trial, result)
    if out is not None and backward:
        # a forward that overwrites an input (Liger's cross-entropy writes its gradient into the logits) is
        # named on the forward, before the backward's gradients are measured on what it left
        _mutated(ctx, trial, views, snapshots, "forward")
        run_backward(ctx, trial, out, leaves)
        _global_state(ctx, trial)
    _mutated(ctx, trial, views, snapshots, "backward" if out is not None and backward else "forward")
    _out_of_bounds(trial, bufs, guard)  # after the backward too: it must not write outside its buffers
    # where the verification reads the kernel's inputs; an input it overwrites by design (``mutates``) as drawn
    declared = ctx.contract.mutates
    trial.on_device = (
        tuple(s if ctx.op.input_name(i) in declared else v for i, (v, s) in enumerate(zip(views, snapshots)))
        if declared
        else views
    )
    return _as_output(ctx, trial, out)


def _kernel_error(ctx: CaseContext, trial: Trial, exc: Exception) -> str:
    """What the kernel raised, in one line; an allocation failure says so and what to do, since at
    production shapes it is the device's memory, not the kernel's arithmetic, that gave out."""
    text = f"{type(exc).__name__}: {exc}"
    if is_out_of_memory(exc):
        shapes = ", ".join(str(tuple(t.shape)) for t in trial.inputs)
        text = (
            f"out of memory on {ctx.device} with inputs {shapes} ({text}); fix: a smaller shape in the "
            "contract, or free the device's memory (another process, or fewer --workers on it)"
        )
    return text[:2000]


def _grad_leaves(ctx: CaseContext, views: Tensors) -> list[tuple[int, torch.Tensor]]:
    """The differentiated inputs (kcgate.engine.backward.differentiated), made to require grad."""
    return [(i, views[i].requires_grad_()) for i in differentiated(ctx, views)]


def _guarded(t: torch.Tensor, guard: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Place a copy of a tensor inside a larger buffer whose margins are poisoned (NaN, or -1 for indices)."""
    p = _poison(t.dtype, device, guard)
    buf = torch.cat((p, t.reshape(-1).to(device), p))
    return buf, buf[guard : guard + t.numel()].view(t.shape)


@functools.cache
def _poison(dtype: torch.dtype, device: Any, guard: int) -> torch.Tensor:
    """One guard band's contents (shared, never written: buffers copy it)."""
    return torch.full((guard,), float("nan") if dtype.is_floating_point else -1, dtype=dtype, device=device)


def _mutated(ctx: CaseContext, trial: Trial, views: Tensors, snaps: list[torch.Tensor], phase: str) -> None:
    """Name the inputs the kernel overwrote, and in which phase: its forward call or its backward. Checked
    after each phase, so the first phase that wrote is the one reported."""
    if "input-mutation" in trial.issues:
        return
    declared = ctx.contract.mutates  # overwritten by design: not a finding
    changed = [
        name
        for i, (v, s) in enumerate(zip(views, snaps))
        if (name := ctx.op.input_name(i)) not in declared and _changed(v, s)
    ]
    if changed:
        issue(trial, "input-mutation")
        trial.found_in["input-mutation"] = phase
        what = ", ".join(map(repr, changed))
        declare = ", ".join(f'"{name}"' for name in (*declared, *changed))
        trial.error = trial.error or (
            f"the {phase} wrote into input{'s' * (len(changed) > 1)} {what}; if the kernel does so by "
            f"design, declare mutates = [{declare}] in its contract"
        )


def _changed(view: torch.Tensor, snap: torch.Tensor) -> bool:
    """Any bit differs: a NaN written over 0.5, -0.0 over 0.0, another NaN payload are all writes (comparing
    values with NaN mapped to a number made a NaN written over that number invisible)."""
    return view.shape != snap.shape or not torch.equal(bit_pattern(view), bit_pattern(snap))


_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bit_pattern(t: torch.Tensor) -> torch.Tensor:
    """The same storage read as integers of the element's width (a view, no copy): equal exactly when every
    bit is; complex as its (real, imaginary) pairs."""
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(_INT_OF_WIDTH[t.element_size()]) if t.dtype != torch.bool else t


def _out_of_bounds(trial: Trial, bufs: list[tuple[torch.Tensor, torch.Tensor]], guard: int) -> None:
    if guard and not all(_margins_intact(buf, guard) for buf, _view in bufs):
        issue(trial, "out-of-bounds")


def _margins_intact(buf: torch.Tensor, guard: int) -> bool:
    """Both guard bands still hold the poison: NaN (any NaN), or -1 for indices."""
    # numpy where it can read the buffer: 6 µs against torch's 9.5 on 40 elements
    if buf.device.type == "cpu" and buf.dtype in NUMPY_DTYPES:
        a = buf.numpy()
        return bool(np.isnan(a[:guard]).all()) and bool(np.isnan(a[-guard:]).all())
    margins = buf.as_strided((2, guard), (buf.numel() - guard, 1))  # the two bands as one view, no copy
    return bool(margins.isnan().all()) if buf.is_floating_point() else bool((margins == -1).all())


def _out_shape(ctx: CaseContext, inputs: Tensors) -> tuple[int, ...]:
    """The output's shape from the oracle run on meta tensors (no arithmetic); a user reference that
    cannot run on meta tensors is evaluated for real."""
    try:
        meta = tuple(
            t.to(device="meta", dtype=torch.float64) if t.is_floating_point() else t.to("meta")
            for t in inputs
        )
        with torch.no_grad():
            return tuple(ctx.op.oracle(*meta).shape)
    except Exception:  # noqa: BLE001 — any failure just means "compute it"
        return tuple(oracle(ctx, inputs).shape)


def _out_buffer(ctx: CaseContext, trial: Trial, guard: int) -> tuple[torch.Tensor, torch.Tensor]:
    shape = _out_shape(ctx, trial.inputs)
    n = int(torch.tensor(shape).prod().item()) if shape else 1
    buf = torch.full((n + 2 * guard,), float("nan"), dtype=ctx.out_dtype, device=ctx.device)
    if guard:
        buf[:guard] = CANARY
        buf[-guard:] = CANARY
    return buf, buf[guard : guard + n].view(shape)


def _check_out_buffer(trial: Trial, out_buf: tuple[torch.Tensor, torch.Tensor], guard: int) -> torch.Tensor:
    buf, view = out_buf
    if guard and not bool(torch.cat([buf[:guard], buf[-guard:]]).eq(CANARY).all()):
        issue(trial, "out-of-bounds")
    return view


def plain(result: Any) -> Any:
    """The kernel's tensors as plain ``torch.Tensor`` views of their own data: a subclass's
    ``__torch_function__`` would otherwise answer every read the checks make (a wrong output that turns into
    the right one when compared, #44). Tuples (named ones too), lists and dicts of outputs are walked."""
    if isinstance(result, (tuple, list)):
        items = [plain(r) for r in result]
        if hasattr(result, "_fields"):  # a namedtuple takes its fields one by one
            return type(result)(*items)
        return type(result)(items)  # a tuple, a list or torch's structseq (torch.return_types.*)
    if isinstance(result, dict):
        return {k: plain(v) for k, v in result.items()}
    if not isinstance(result, torch.Tensor) or type(result) is torch.Tensor:
        return result
    with torch._C.DisableTorchFunctionSubclass():
        return result.as_subclass(torch.Tensor)


def _first_tensor(trial: Trial, result: Any) -> torch.Tensor | None:
    if isinstance(result, (tuple, list)) and result and isinstance(result[0], torch.Tensor):
        result = result[0]
    if not isinstance(result, torch.Tensor):
        trial.error = f"kernel returned {type(result).__name__}, expected a tensor"
        issue(trial, "bad-output")
        return None
    return result


def _as_output(ctx: CaseContext, trial: Trial, out: torch.Tensor | None) -> torch.Tensor | None:
    """The output on the CPU, or where it is when the trial is verified there (``on_device``, or a Freivalds
    trial: only the summary comes back); its dtype is part of every postcondition (the declared out_dtype)."""
    if out is None:
        return None
    if trial.result is not None:  # several outputs: each one's dtype is checked as it is named
        return out.detach()
    if out.dtype != ctx.out_dtype and not reference_gives(ctx, trial, out.dtype):
        trial.error = trial.error or (
            f"kernel returned {_name(out.dtype)}, the contract declares {_name(ctx.out_dtype)}"
        )
        issue(trial, "wrong-dtype")
    if on_device(ctx) or (not ctx.contract.backward and _wants_freivalds(ctx, trial.shape)):
        return out.detach()
    return out.detach().cpu()  # itself when already there (half the cost of .to("cpu"))


def _shape_ok(ctx: CaseContext, trial: Trial, out: torch.Tensor, ref: torch.Tensor) -> bool:
    if tuple(out.shape) == tuple(ref.shape):
        return True
    trial.error = (
        mismatch_detail(ctx, trial.result, ref)
        or shape_detail(ctx, out, ref)
        or f"kernel returned shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    )
    issue(trial, "bad-output")
    return False


def _stale_check(ctx: CaseContext, trial: Trial) -> None:
    """An output (or gradient) bitwise equal to an earlier trial's, on different fresh inputs and upstream
    gradients, was not computed from them, provided a correct kernel could not have returned that: it lies
    outside this trial's bound, or the two oracle values differ somewhere by more than both allowances. A small output (a bf16 mean loss,
    one scalar) equals an earlier one by chance when its oracle moved less than its rounding: no evidence."""
    assert trial.out is not None
    stale, constant = False, False
    earlier = list(ctx.previous_outputs)  # an earlier call's: this call's gradients of x and of a residual
    for name, t in (trial.tensors or {"out": trial.out}).items():  # added to it are the same bits, rightly
        if not is_output(name) and not bool(t.any()):
            continue  # an all-zero gradient is named zero-gradient, not stale
        c = trial.cmps.get(name)
        if (c is None or not c.finite) and t.is_floating_point() and not bool(t.isfinite().any()):
            continue  # all NaN/Inf (an exp overflow, say) matches any other such output: not evidence of staleness
        ref, allowed = (c.ref, c.allowed) if c is not None else (None, None)
        # a repeat outside this trial's own bound is no value a correct kernel returns: stale, as before
        within = c is not None and _within(c.err, c.allowed)
        bits = bit_pattern(t)  # the same bits, NaN included (NaN read as 0.25 matched an earlier 0.25)
        repeat = any(
            p.shape == bits.shape
            and p.dtype == bits.dtype
            and torch.equal(p, bits)
            and (not within or _distinguishable(ref, allowed, pr, pa))
            for p, pr, pa in earlier
        )
        stale |= repeat
        if repeat:
            trial.tensor_of.setdefault("stale-output", name)
        # one value everywhere repeats whatever buffer it is written to (a loop that never ran left zeros)
        constant |= repeat and bits.numel() > 1 and bool((bits == bits.flatten()[0]).all())
        ctx.previous_outputs.append((bits.clone(), ref, allowed))
    if stale:
        issue(trial, "constant-output" if constant else "stale-output")
        trial.tensor_of.setdefault("constant-output", trial.tensor_of.get("stale-output", "out"))


def _within(err: torch.Tensor, allowed: torch.Tensor) -> bool:
    """Every error within its allowance: as torch ops where the tensors live (one bool back), through numpy on
    the CPU's fast path (the same comparisons)."""
    if torch_ops(err):
        return bool((err <= allowed.to(device=err.device, dtype=torch.float64)).all())
    return bool((host(err) <= f64(allowed)).all())


def _distinguishable(
    ref: torch.Tensor | None,
    allowed: torch.Tensor | None,
    pref: torch.Tensor | None,
    pallowed: torch.Tensor | None,
) -> bool:
    """Whether no output lies within both allowances of both oracle values (unknown: assume it does not)."""
    if ref is None or allowed is None or pref is None or pallowed is None or ref.shape != pref.shape:
        return True
    gap = (ref - pref).abs().nan_to_num(0.0, posinf=float("inf"))
    return bool((gap > allowed + pallowed).any())


def _global_state(ctx: CaseContext, trial: Trial) -> None:
    """Restore torch's global state if the kernel changed it, and record that as an integrity issue; a kernel in
    a sandbox reports its own process's changes with each call (kcgate.sandbox.client)."""
    changed = torch_state.after_kernel() + getattr(ctx.kernel, "take_changes", list)()
    if changed:
        issue(trial, "global-state")
        trial.error = trial.error or f"changed {', '.join(changed[:8])}"


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
