"""A custom op's several outputs in a trial: the kernel's result matched to the reference's by name, each
output compared under its own share of the bound, and the worst one deciding the trial (``Trial.output``).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from kcgate.engine.reference_checks import mismatch_detail
from kcgate.engine.trial import CaseContext, Trial, issue, signal
from kcgate.numerics.metrics import compare, to_metrics
from kcgate.numerics.outputs import Parts, flat, kernel_parts, multiple, raw, reference_parts, split
from kcgate.results.model import OUT_BUDGET

OUTPUT = "out."  # Trial.tensors/cmps/signals key prefix of a named output ("out" alone: the only output)


def is_output(key: str) -> bool:
    """Whether a compared tensor's key is a forward output's (the rest are input gradients)."""
    return key == "out" or key.startswith(OUTPUT)


def failed_tensor(trial: Any) -> str:
    """The tensor a failure is in, for messages: a gradient, a named output of several, or the output."""
    if trial.grad:
        return f"the gradient of {trial.grad}"
    return f"output {trial.output!r}" if getattr(trial, "output", "") else "the output"


def kernel_output(ctx: CaseContext, trial: Trial, result: Any) -> torch.Tensor | None:
    """A custom op's result: several outputs are kept on the trial (named once the reference has run) and
    joined into one vector, the tensor the backward draws its cotangent for; one tensor is itself."""
    if not multiple(result):
        result = result[0] if isinstance(result, (tuple, list)) and result else result
        if isinstance(result, torch.Tensor):
            return result
        trial.error = f"kernel returned {type(result).__name__}, expected a tensor"
        issue(trial, "bad-output")
        return None
    trial.result = result
    items = raw(result)
    odd = [n or str(i) for i, (n, v) in enumerate(items) if not isinstance(v, torch.Tensor)]
    if odd:
        trial.error = f"kernel returned a non-tensor output ({', '.join(odd)}), expected tensors"
        issue(trial, "bad-output")
        return None
    return flat(tuple(("", v) for _, v in items))


def compare_outputs(
    ctx: CaseContext, trial: Trial, ref_parts: Parts, allowed: torch.Tensor, extra: dict[str, float]
) -> bool:
    """Compare each named output with its reference under its share of ``allowed``; the worst decides the
    trial's out, ref, cmp and metrics, and every output's budget is in the extras. False when the kernel's
    outputs do not match the reference's (bad-output, with what differs)."""
    names = [n for n, _ in ref_parts]
    got, why = kernel_parts(trial.result if trial.result is not None else trial.out, names)
    if why:
        several = len(ref_parts) == 1 and trial.result is not None  # the kernel several, the reference one
        trial.error = (several and mismatch_detail(ctx, trial.result, ref_parts[0][1])) or why
        issue(trial, "bad-output")
        return False
    kernel = dict(got)
    dtypes = _reference_dtypes(ctx, trial, names)
    shares = split(ref_parts, allowed.expand(trial.ref.shape)) if allowed.dim() else None  # type: ignore[union-attr]
    scored = []
    for i, (name, ref) in enumerate(ref_parts):
        k = kernel[name].detach().to(ref.device)
        if tuple(k.shape) != tuple(ref.shape):
            trial.error = f"kernel's output {name!r} has shape {tuple(k.shape)}, expected {tuple(ref.shape)}"
            issue(trial, "bad-output")
            return False
        _dtype(trial, name, k, {ctx.out_dtype, dtypes.get(name, ctx.out_dtype)})
        cmp = compare(k, ref, shares[i][1] if shares else allowed, ctx.contract.tolerance.method)
        trial.parts[name] = k
        trial.tensors[OUTPUT + name], trial.cmps[OUTPUT + name] = k, cmp
        trial.signals[OUTPUT + name] = signal(cmp)
        b = to_metrics(cmp).budget_used
        scored.append((float("inf") if b is None else b, name, cmp))
    _, trial.output, trial.cmp = max(scored, key=lambda s: s[0])
    trial.out, trial.ref = trial.parts[trial.output], trial.cmp.ref
    extra.update({OUT_BUDGET + n: min(b, 1e308) for b, n, _ in scored})
    trial.metrics = to_metrics(trial.cmp, extra)
    return True


def reference_gives(ctx: CaseContext, trial: Trial, dtype: torch.dtype) -> bool:
    """Whether a custom op with no declared out dtype returns ``dtype`` because its reference does (a top-p
    filter's fp32 probabilities from bf16 logits), as each of several outputs may: read on meta tensors, only
    when the kernel's dtype differs from the input's."""
    if ctx.op.name != "custom" or ctx.contract.out_dtype:
        return False
    parts = _meta_parts(ctx, trial)
    return parts is not None and len(parts) == 1 and parts[0][1].dtype == dtype


def _reference_dtypes(ctx: CaseContext, trial: Trial, names: list[str]) -> dict[str, torch.dtype]:
    """Each output's dtype as the reference gives it on the case's inputs, e.g. a scan's fp32 last state
    beside its bf16 output; {} where that cannot be read (every output then held to the contract's out dtype)."""
    parts = _meta_parts(ctx, trial)
    return {n: t.dtype for n, t in parts} if parts is not None and [n for n, _ in parts] == names else {}


def _meta_parts(ctx: CaseContext, trial: Trial) -> Parts | None:
    """The reference's named outputs on meta tensors (no arithmetic); None where it cannot run on them."""
    reference = inspect.unwrap(ctx.op.oracle)
    try:
        with torch.no_grad():
            got = reference(*(t.detach().to("meta") for t in trial.inputs))
        return reference_parts(got, ctx.contract.outputs)
    except Exception:  # noqa: BLE001 — a reference that cannot run on meta tensors: the declared dtype
        return None


def _dtype(trial: Trial, name: str, t: torch.Tensor, want: set[torch.dtype]) -> None:
    """A float output in neither the contract's out dtype nor the dtype the reference gives it (an integer
    output, indices, is compared as it is)."""
    if t.is_floating_point() and t.dtype not in want:
        names = " or ".join(sorted(str(d).removeprefix("torch.") for d in want))
        trial.error = trial.error or (
            f"kernel's output {name!r} is {str(t.dtype).removeprefix('torch.')}, expected {names} (the "
            "contract's out dtype, or the reference's for that output)"
        )
        issue(trial, "wrong-dtype")
