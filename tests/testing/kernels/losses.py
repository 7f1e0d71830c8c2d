"""Distribution losses as Liger-Kernel ships them (KL divergence with a log-probability input and a probability
target): an ``autograd.Function`` that gives no gradient for its target, the references that detach the target
or do not, and kernels with one fault planted in one tensor (a gradient, or the forward) for issue 56's naming
tests. Torch re-implementations; Triton is not installed here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch


def kl_gen(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """y_pred: log-probabilities (a log_softmax of normal logits); y_true: probabilities (a softmax)."""
    y_pred = torch.log_softmax(torch.randn(shape, generator=g, dtype=torch.float64), -1).to(dtype)
    y_true = torch.softmax(torch.randn(shape, generator=g, dtype=torch.float64), -1).to(dtype)
    return y_pred, y_true


def kl_ref(y_pred: torch.Tensor, y_true: torch.Tensor) -> torch.Tensor:
    """Liger's test reference: batchmean KL(y_true ‖ exp(y_pred)), the target detached."""
    t = y_true.detach()
    return (t * (t.log() - y_pred)).sum() / y_pred.shape[0]


def kl_ref_both(y_pred: torch.Tensor, y_true: torch.Tensor) -> torch.Tensor:
    """The same loss, differentiated in both inputs."""
    return (y_true * (y_true.log() - y_pred)).sum() / y_pred.shape[0]


class _KL(torch.autograd.Function):
    """Forward in fp32, returned in the input dtype; backward d y_pred = -dy·y_true / rows, and, like Liger's,
    no gradient for the target. ``fault`` plants one mistake."""

    @staticmethod
    def forward(ctx: Any, y_pred: torch.Tensor, y_true: torch.Tensor, fault: str) -> torch.Tensor:
        p, t = y_pred.float(), y_true.float()
        loss = (t * (t.log() - p)).sum() / p.shape[0]
        ctx.save_for_backward(y_pred, y_true)
        ctx.fault, ctx.rows = fault, p.shape[0]
        if fault == "fp32-out":  # the loss returned in fp32 whatever the input dtype
            return loss
        if fault == "nan-forward":
            return torch.full_like(loss, float("nan")).to(y_pred.dtype)
        return loss.to(y_pred.dtype)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        y_pred, y_true = ctx.saved_tensors
        d_pred = (-dy.float() * y_true.float() / ctx.rows).to(y_true.dtype)
        d_true = None
        if "pred" in ctx.fault:
            d_pred = d_pred * 1.25
        if "true" in ctx.fault or "both" in ctx.fault:  # the target's gradient, right or 25% off
            scale = 1.25 if "true" in ctx.fault else 1.0
            d_true = scale * dy.float() * (y_true.float().log() + 1 - y_pred.float()) / ctx.rows
            d_true = d_true.to(y_true.dtype)
        return d_pred, d_true, None


def kl(y_pred: torch.Tensor, y_true: torch.Tensor) -> torch.Tensor:
    """Correct, no gradient for the target (Liger's LigerKLDivLossFunction)."""
    return _KL.apply(y_pred, y_true, "")  # type: ignore[no-any-return]


def kl_both(y_pred: torch.Tensor, y_true: torch.Tensor) -> torch.Tensor:
    """Correct, differentiated in both inputs."""
    return _KL.apply(y_pred, y_true, "both")  # type: ignore[no-any-return]


def kl_grad_pred(y_pred: torch.Tensor, y_true: torch.Tensor) -> torch.Tensor:
    """d y_pred 25% too large; d y_true right."""
    return _KL.apply(y_pred, y_true, "both pred")  # type: ignore[no-any-return]


def kl_grad_true(y_pred: torch.Tensor, y_true: torch.Tensor) -> torch.Tensor:
    """d y_true 25% too large; d y_pred right."""
    return _KL.apply(y_pred, y_true, "both true")  # type: ignore[no-any-return]


def kl_fp32_out(y_pred: torch.Tensor, y_true: torch.Tensor) -> torch.Tensor:
    """The forward loss returned in fp32 for a 16-bit input."""
    return _KL.apply(y_pred, y_true, "fp32-out")  # type: ignore[no-any-return]


def kl_nan_forward(y_pred: torch.Tensor, y_true: torch.Tensor) -> torch.Tensor:
    """The forward loss NaN; the gradients right."""
    return _KL.apply(y_pred, y_true, "nan-forward")  # type: ignore[no-any-return]


# ---- one fault planted in one input's gradient, for any function in a family's calling convention --------


def grad_fault(fn: Callable[..., Any], index: int, how: str) -> Callable[..., Any]:
    """``fn`` with its own autograd gradients, except input ``index``'s: 25% too large (``how = "scale"``)
    or not given (``"none"``); or with every gradient right and the forward output 25% too large
    (``"forward"``). Several outputs (rope's q and k) take their upstream gradients in order."""

    class Planted(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, kw: dict[str, Any], *inputs: torch.Tensor) -> Any:
            ctx.save_for_backward(*inputs)
            ctx.kw = kw
            out = fn(*inputs, **kw)
            if how != "forward":
                return out
            return tuple(o * 1.25 for o in out) if isinstance(out, tuple) else out * 1.25

        @staticmethod
        def backward(ctx: Any, *dys: torch.Tensor) -> Any:
            xs = [x.detach().requires_grad_(x.is_floating_point()) for x in ctx.saved_tensors]
            with torch.enable_grad():
                out = fn(*xs, **ctx.kw)
                outs = out if isinstance(out, tuple) else (out,)
                leaves = [x for x in xs if x.requires_grad]
                gs = iter(torch.autograd.grad(outs, leaves, dys, allow_unused=True))
            grads = [next(gs) if x.requires_grad else None for x in xs]
            if how != "forward":
                grads[index] = None if how == "none" else grads[index] * 1.25
            return (None, *grads)

    def kernel(*inputs: torch.Tensor, **kw: Any) -> Any:
        return Planted.apply(kw, *inputs)

    return kernel


# ---- Liger's JSD and TVD, as shipped with their bugs and as fixed (torch re-implementations) -----------------


def log_probs_gen(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Two rows of log-probabilities (a student's and a teacher's log_softmax of normal logits)."""
    return tuple(
        torch.log_softmax(torch.randn(shape, generator=g, dtype=torch.float64), -1).to(dtype)
        for _ in range(2)
    )


def probs_gen(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Two rows of probabilities (softmax of normal logits)."""
    return tuple(
        torch.softmax(torch.randn(shape, generator=g, dtype=torch.float64), -1).to(dtype) for _ in range(2)
    )


BETA = 0.5


def jsd_ref(log_q: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
    """Liger's test reference: the generalised JSD of the student log_q against the teacher log_p (detached),
    summed and divided by the rows."""
    q, p = log_q.exp(), log_p.detach().exp()
    m = BETA * p + (1 - BETA) * q
    log_m = m.log()
    return (BETA * p * (log_p.detach() - log_m) + (1 - BETA) * q * (log_q - log_m)).sum() / log_q.shape[0]


def _jsd_terms(x: torch.Tensor, y: torch.Tensor, fixed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss terms, d loss / d x) in fp32: log M as log(M) (the shipped kernel: M underflows to 0 where both
    distributions are tiny, and 0·log 0 is NaN), or in log space (the fix)."""
    q, p = x.exp(), y.exp()
    if fixed:
        log_m = torch.logaddexp(y + math.log(BETA), x + math.log(1 - BETA))
        m = log_m.exp()
    else:
        m = BETA * p + (1 - BETA) * q
        log_m = m.log()
    return BETA * p * y + (1 - BETA) * q * x - m * log_m, (1 - BETA) * q * (x - log_m)


class _JSD(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, log_q: torch.Tensor, log_p: torch.Tensor, fixed: bool) -> torch.Tensor:
        loss, dx = _jsd_terms(log_q.float(), log_p.float(), fixed)
        ctx.save_for_backward(dx)
        ctx.rows, ctx.dtype = log_q.shape[0], log_q.dtype
        return (loss.sum() / ctx.rows).to(log_q.dtype)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        (dx,) = ctx.saved_tensors
        return (dy.float() * dx / ctx.rows).to(ctx.dtype), None, None


def jsd_shipped(log_q: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
    return _JSD.apply(log_q, log_p, False)  # type: ignore[no-any-return]


def jsd_fixed(log_q: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
    return _JSD.apply(log_q, log_p, True)  # type: ignore[no-any-return]


def tvd_ref(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Liger's test reference: total variation distance 0.5·|p − q|, summed and divided by the rows."""
    return (0.5 * (p - q.detach()).abs()).sum() / p.shape[0]


class _TVD(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, p: torch.Tensor, q: torch.Tensor, fixed: bool) -> torch.Tensor:
        d = p.float() - q.float()
        # the shipped kernel's gradient: where(p > q, 0.5, -0.5), -0.5 at ties where |x|'s gradient is 0
        grad = torch.where(d > 0, 0.5, -0.5)
        if fixed:
            grad = torch.where(d == 0, 0.0, grad)
        ctx.save_for_backward(grad)
        ctx.rows, ctx.dtype = p.shape[0], p.dtype
        return ((0.5 * d.abs()).sum() / ctx.rows).to(p.dtype)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        (grad,) = ctx.saved_tensors
        return (dy.float() * grad / ctx.rows).to(ctx.dtype), None, None


def tvd_shipped(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return _TVD.apply(p, q, False)  # type: ignore[no-any-return]


def tvd_fixed(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return _TVD.apply(p, q, True)  # type: ignore[no-any-return]
