"""C-EXC-01 check: NaN and ±Inf planted in fresh inputs must be handled per the declared policy (the peer
ashiba-verify's IEEE_PROPAGATE / RAISE / MASK): ``propagate`` as IEEE arithmetic (the fp64 oracle) says,
``raise`` an exception for each of NaN, +Inf and −Inf, ``mask`` the declared ``mask_value`` wherever IEEE
gives NaN/Inf (the rest within bound); a subnormal-scaled trial checks ``subnormals = keep``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from kcgate.engine.checks import Finding, trials, verdict
from kcgate.engine.diagnosis import sig
from kcgate.engine.harness import run_trial
from kcgate.engine.trial import CaseContext, Trial, allowance
from kcgate.numerics.metrics import compare, to_metrics
from kcgate.results.model import Status


def check(ctx: CaseContext) -> Finding:
    clean = trials(ctx, 1)
    ts = list(clean)
    policy = str(ctx.contract.param("nan"))
    if policy == "propagate":
        ts.append(_finite_bound(ctx, run_trial(ctx, inputs=poisoned(ctx, ctx.inputs(ctx.case.shape, "nan")))))
    if policy in ("raise", "mask"):
        first = verdict(ctx, clean)
        if first.status != Status.PASS:
            return first
        found = _raise(ctx) if policy == "raise" else _mask(ctx, ts)
        if found is not None:
            return found
    sub = None
    if str(ctx.contract.param("subnormals")) == "keep" and ctx.dtype in (torch.float32, torch.float64):
        sub = run_trial(ctx, inputs=subnormal(ctx, ctx.inputs(ctx.case.shape, "sub")), salt="sub")
        ts.append(sub)
    finding = verdict(ctx, ts)
    if (
        finding.status == Status.FAIL
        and sub is not None
        and not sub.ok
        and all(t.ok for t in ts if t is not sub)
    ):
        return replace(
            finding,
            signature=sig(
                "subnormal-flush",
                "subnormal inputs flushed to zero (declared: keep)",
                budget_used=sub.metrics.budget_used or "inf",
            ),
        )
    return finding


def _finite_bound(ctx: CaseContext, t: Trial) -> Trial:
    """Re-measure with the bound of the finite inputs: an Inf input would make the bound Inf (or NaN),
    and a category change (NaN swallowed) must count as an infinite error, not as inf/inf."""
    if t.cmp is None or t.out is None:
        return t
    finite = tuple(
        torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0) if x.is_floating_point() else x for x in t.inputs
    )
    fwd = t.cmps.get("out", t.cmp)
    out = t.tensors.get("out", t.out)
    fwd = compare(
        out, fwd.ref, allowance(ctx, finite, fwd.ref.nan_to_num(0.0, 0.0, 0.0)), ctx.contract.tolerance.method
    )
    m = to_metrics(fwd, dict(t.metrics.extra))
    # backward: the gradients were already measured under the finite inputs' bound (kcgate.engine.backward);
    # the re-measured forward decides only where it is counted and worse
    if not t.grad or (ctx.contract.forward and _worse(m, t.metrics)):
        t.cmp, t.out, t.ref, t.grad, t.metrics = fwd, out, fwd.ref, "", m
    return t


def _worse(a: Any, b: Any) -> bool:
    inf = float("inf")
    return (inf if a.budget_used is None else a.budget_used) > (
        inf if b.budget_used is None else b.budget_used
    )


def _first_float(xs: tuple[torch.Tensor, ...]) -> int | None:
    """The position of the first floating-point input (embedding's weight, after its indices), if any."""
    return next((i for i, x in enumerate(xs) if x.is_floating_point()), None)


def _put(xs: tuple[torch.Tensor, ...], i: int, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (*xs[:i], x, *xs[i + 1 :])


def poisoned(ctx: CaseContext, xs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Plant one NaN, one +Inf, and a +Inf/−Inf pair in separate rows of the first float input."""
    i = _first_float(xs)
    if i is None or xs[i].dim() < 2 or xs[i].shape[0] < 4:
        return xs
    x = xs[i].clone()
    gen = ctx.generator("nan-rows")
    rows = torch.randperm(x.shape[0], generator=gen)[:3].tolist()
    col = lambda: int(torch.randint(0, x.shape[-1], (1,), generator=gen))  # noqa: E731
    x[rows[0], ..., col()] = float("nan")
    x[rows[1], ..., col()] = float("inf")
    x[rows[2], ..., 0] = float("inf")
    x[rows[2], ..., -1] = float("-inf")
    return _put(xs, i, x)


def subnormal(ctx: CaseContext, xs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The first float input scaled into the subnormal range (its values stay distinct and non-zero); an
    op without one (no float input) is left as it is."""
    i = _first_float(xs)
    if i is None:
        return xs
    x = xs[i]
    scale = torch.finfo(x.dtype).tiny * 2.0**-8
    return _put(xs, i, (x.to(torch.float64) * scale).to(x.dtype))


# ---- nan = "raise" and nan = "mask" ---------------------------------------------------------------------

INJECTIONS = {"NaN": float("nan"), "+Inf": float("inf"), "-Inf": float("-inf")}


def injected(ctx: CaseContext, value: float, salt: str) -> tuple[torch.Tensor, ...]:
    """Fresh inputs with ``value`` at a few random positions of the first float input (as the peer injects)."""
    xs = ctx.inputs(ctx.case.shape, salt)
    i = _first_float(xs)
    if i is None or xs[i].numel() == 0:
        return xs
    x = xs[i].clone()
    gen = ctx.generator("inject", salt)
    idx = torch.randperm(x.numel(), generator=gen)[: max(1, min(10, x.numel() // 64))]
    x.view(-1)[idx] = value
    return _put(xs, i, x)


def _raise(ctx: CaseContext) -> Finding | None:
    """Declared raise: the kernel must raise on NaN, on +Inf and on −Inf input (each tried alone)."""
    quiet = []
    for name, value in INJECTIONS.items():
        t = run_trial(ctx, inputs=injected(ctx, value, f"raise-{name}"), salt=f"raise-{name}")
        if "raised" not in t.issues:
            quiet.append((name, t))
    if not quiet:
        return None
    names = ", ".join(n for n, _ in quiet)
    t = quiet[0][1]
    non_finite = int((~t.out.isfinite()).sum()) if t.out is not None else 0
    return Finding(
        Status.FAIL,
        t.metrics,
        sig(
            "nan-pattern",
            f"declared nan = raise, but the kernel returned a result on input with {names} "
            f"({non_finite} non-finite output element(s)) instead of raising",
            returned_on=names,
            non_finite_outputs=float(non_finite),
        ),
        f'declared nan = "raise": no exception on input with {names}',
    )


def _mask(ctx: CaseContext, clean: list[Trial]) -> Finding | None:
    """Declared mask: where IEEE (the fp64 oracle) gives NaN/Inf the output is ``mask_value``; elsewhere the
    output is within the bound of the finite inputs."""
    value = float(ctx.contract.param("mask_value"))
    t = run_trial(ctx, inputs=poisoned_or_injected(ctx), salt="mask")
    if t.cmp is None or t.out is None:
        return verdict(ctx, [*clean, t])
    ref = t.cmp.ref
    masked = ~ref.isfinite()
    out = t.out.to(torch.float64)
    want = torch.full_like(out, value)
    held = (out.isnan() & want.isnan()) | (out == want)
    wrong = masked & ~held
    if bool(wrong.any()):
        i = tuple(int(v) for v in wrong.nonzero()[0])
        return Finding(
            Status.FAIL,
            t.metrics,
            sig(
                "nan-pattern",
                f"declared nan = mask ({value:g}), but {int(wrong.sum())} of {int(masked.sum())} output(s) IEEE "
                f"makes NaN/Inf are not {value:g} (e.g. {float(out[i]):g} at {list(i)})",
                wrong_masked=float(wrong.sum()),
                masked=float(masked.sum()),
                mask_value=value,
            ),
            f"masked outputs are not the declared mask_value {value:g}",
        )
    finite = tuple(
        torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0) if x.is_floating_point() else x for x in t.inputs
    )
    zero = torch.zeros_like(out)
    t.cmp = compare(
        torch.where(masked, zero, out).to(t.out.dtype),
        torch.where(masked, zero, ref),
        allowance(ctx, finite, torch.where(masked, zero, ref)),
        ctx.contract.tolerance.method,
    )
    t.metrics = to_metrics(t.cmp, dict(t.metrics.extra))
    found = verdict(ctx, [*clean, t], excess=False)
    return found if found.status != Status.PASS else None


def poisoned_or_injected(ctx: CaseContext) -> tuple[torch.Tensor, ...]:
    """The propagate probe's rows (NaN, +Inf, a +Inf/−Inf pair) where the input has rows, else injections."""
    xs = ctx.inputs(ctx.case.shape, "mask")
    planted = poisoned(ctx, xs)
    return planted if planted is not xs else injected(ctx, float("nan"), "mask")
