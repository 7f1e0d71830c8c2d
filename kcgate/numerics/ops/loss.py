"""Cross-entropy over a vocabulary: per-row loss or the mean, ``ignore_index`` and label smoothing.

Shape form ``[rows, vocab]``; call ``kernel(logits, target, **kw)`` with logits (rows, vocab) and int64 target
(rows,), in the ``F.cross_entropy`` convention: ``reduction`` always passed ("none" or "mean"),
``ignore_index``, ``label_smoothing`` and ``softcap`` when they differ from torch's defaults. One row in eight
is ignored. ``softcap``: the loss of ``softcap·tanh(logits / softcap)`` (Gemma 2's final logits, Liger's
``softcap``).
Derivation of the bound: docs/ops.md#cross_entropy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from kcgate.numerics.ops.base import BoundArgs, GradBound, OpFamily, Tensors, draw, sqrt, underflow

F = torch.nn.functional


@dataclass(frozen=True)
class CrossEntropy:
    reduction: str = "mean"  # "none" (per-row loss) or "mean" over the rows not ignored
    ignore_index: int = -100
    label_smoothing: float = 0.0
    softcap: float = 0.0  # > 0: the logits are softcap·tanh(logits / softcap) first
    all_rows: bool = False  # not a param: the mistake of a mean over every row, ignored ones included
    # not params either, the mistakes the diagnosis tests: the smoothing term counted on ignored rows too
    # (Liger's early fused kernel); the softcap written another way (CAP_FORMS)
    smooth_ignored: bool = False
    cap_form: str = "c·tanh(x/c)"


# the softcap as written: the right one, and the shipped mistakes (the multiply by c lost, x for c, x/c for both)
CAP_FORMS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "c·tanh(x/c)": lambda x, c: c * torch.tanh(x / c),
    "x·tanh(x/c)": lambda x, c: x * torch.tanh(x / c),
    "tanh(x/c)": lambda x, c: torch.tanh(x / c),
    "t·tanh(t), t = x/c": lambda x, c: (x / c) * torch.tanh(x / c),
}


def _inputs(cfg: CrossEntropy) -> Callable[..., Tensors]:
    def make(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
        rows, vocab = shape
        target = torch.randint(0, vocab, (rows,), generator=gen)
        ignored = torch.rand(rows, generator=gen) < 0.125
        ignored[0] = False  # never every row: the mean would be 0/0
        return draw(shape, dtype, gen, dist), torch.where(ignored, cfg.ignore_index, target)

    return make


def _oracle(cfg: CrossEntropy) -> Callable[..., torch.Tensor]:
    def oracle(x: torch.Tensor, t: torch.Tensor, **_: Any) -> torch.Tensor:
        if cfg.all_rows:
            return _oracle(replace(cfg, reduction="none", all_rows=False))(x, t).sum() / x.shape[0]
        if cfg.smooth_ignored:
            return _smooth_ignored(capped(x, cfg), t, cfg)
        return F.cross_entropy(
            capped(x, cfg),
            t,
            ignore_index=cfg.ignore_index,
            label_smoothing=cfg.label_smoothing,
            reduction=cfg.reduction,
        )

    return oracle


def capped(x: torch.Tensor, cfg: CrossEntropy) -> torch.Tensor:
    """The logits the loss is taken of: softcap·tanh(x / softcap), or x without a softcap."""
    return CAP_FORMS[cfg.cap_form](x, cfg.softcap) if cfg.softcap else x


def _smooth_ignored(x: torch.Tensor, t: torch.Tensor, cfg: CrossEntropy) -> torch.Tensor:
    """The loss with ε·mean(−log p) added on the ignored rows as well (their nll still left out)."""
    keep = t != cfg.ignore_index
    logp = x.log_softmax(-1)
    nll = -logp.gather(1, t.clamp(0)[:, None])[:, 0]
    eps = cfg.label_smoothing
    loss = (1 - eps) * torch.where(keep, nll, 0.0) - eps * logp.mean(-1)
    return loss.sum() / keep.sum() if cfg.reduction == "mean" else loss


def cap_error(xc: torch.Tensor, t: torch.Tensor, cfg: CrossEntropy, ba: BoundArgs) -> torch.Tensor:
    """A row's loss error from the softcap's own roundings: x / cap, tanh and cap·(...) cost 4·u_c·|x̃| per
    capped logit x̃ (|t|·(1 − tanh² t) <= |tanh t|: the division's rounding stays relative), and the loss
    moves by at most the largest of them in the logsumexp plus the target's own."""
    if not cfg.softcap:
        return torch.zeros(xc.shape[0], dtype=xc.dtype)
    u_c = max(ba.u_acc, ba.u_in)
    n = xc.shape[-1]
    xt = xc.gather(1, t.clamp(0, n - 1)[:, None])[:, 0].abs()
    return 4 * u_c * (xc.abs().amax(-1) + xt)


def row_bound(x: torch.Tensor, t: torch.Tensor, cfg: CrossEntropy, ba: BoundArgs) -> torch.Tensor:
    """Allowed |error| of each row's loss before the output rounding (0 on ignored rows)."""
    n = x.shape[-1]
    keep = t != cfg.ignore_index
    xt = x.gather(1, t.clamp(0, n - 1)[:, None])[:, 0].abs()
    # lse = m + log Σ exp(x − m): the shifted sum has relative error (λ√n + 4)·u, i.e. an absolute one in the
    # log; adding m back and subtracting x_t cost u·|m| and u·|x_t| (FACTS.md's logsumexp bound)
    m = x.abs().amax(-1)
    # eager torch rounds log-softmax to the input dtype before picking x_t's entry: two roundings of
    # |m| + |x_t| + |loss| in the compute precision (the input dtype's at most)
    u_c = max(ba.u_acc, ba.u_in)
    loss = (torch.logsumexp(x, -1) - x.gather(1, t.clamp(0, n - 1)[:, None])[:, 0]).abs()
    err = (ba.lam * sqrt(n) + 4) * ba.u_acc * (1 + m) + 2 * u_c * (xt + m + loss)
    if cfg.label_smoothing:  # (ε/n)·Σ log p: n log-probabilities, each rounded twice, summed
        mean_abs = x.abs().mean(-1)
        err = err + cfg.label_smoothing * (ba.lam * sqrt(n) * ba.u_acc * mean_abs + 2 * u_c * (mean_abs + m))
    return torch.where(keep, err, torch.zeros_like(err))


def _bound(cfg: CrossEntropy) -> Callable[[Tensors, torch.Tensor, BoundArgs], torch.Tensor]:
    def bound(xs: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        x, t = xs
        x = capped(x, cfg)
        rows = row_bound(x, t, cfg, ba) + torch.where(t != cfg.ignore_index, cap_error(x, t, cfg, ba), 0.0)
        if cfg.reduction == "none":
            return rows + ba.u_out * y.abs()
        keep = (t != cfg.ignore_index).sum().clamp_min(1)
        losses = F.cross_entropy(
            x, t, ignore_index=cfg.ignore_index, label_smoothing=cfg.label_smoothing, reduction="none"
        )
        # the mean of the rows' errors, then the sum of ``keep`` losses (rounded per row to the input dtype and
        # summed in it by eager torch, so in the compute precision) and the division
        acc = (ba.lam * sqrt(int(keep)) + 1) * max(ba.u_acc, ba.u_in) * losses.abs().sum() / keep
        return rows.sum() / keep + acc + ba.u_out * y.abs()

    return bound


def _grad_bound(cfg: CrossEntropy) -> GradBound:
    def grad_bound(
        xs: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs
    ) -> tuple[torch.Tensor | None, ...]:
        """d logits = g_i·(p − t̃) with g_i = dy_i (per row) or dy / kept rows (mean), t̃ the smoothed one-hot.

        p = exp(log p) from the saved log-softmax: its relative error is the forward's absolute lse error
        plus the roundings of log p = x − lse (2·u_c·(|x| + |lse| + |log p|)); g_i, the scalings, the
        sum of the two gradients and p − t̃ are rounded (4·u_c·(p + t̃): the difference may cancel); the smoothing's Σ over the vocabulary adds ε·λ√V·u_c·p; the row's maximum may carry a max shift's gradient, the rounding
        of Σ_j (p − t̃)_j (λ√V + 1)·u_acc·Σ|p − t̃|. Ignored rows: 0."""
        raw, t = xs
        x = capped(raw, cfg)
        n = x.shape[-1]
        u_c = max(ba.u_acc, ba.u_in)
        keep = (t != cfg.ignore_index)[:, None]
        gi = (dy / keep.sum().clamp_min(1)).expand(x.shape[0]) if cfg.reduction == "mean" else dy
        lse = torch.logsumexp(x, -1, keepdim=True)
        logp = x - lse
        m = x.abs().amax(-1, keepdim=True)
        rel = (ba.lam * sqrt(n) + 4) * ba.u_acc * (1 + m) + 2 * u_c * (x.abs() + lse.abs() + logp.abs())
        rel = rel + cfg.label_smoothing * ba.lam * sqrt(n) * u_c
        p = logp.exp()
        onehot = torch.zeros_like(x).scatter_(1, t.clamp(0, n - 1)[:, None], 1.0)
        target = (1 - cfg.label_smoothing) * onehot + cfg.label_smoothing / n
        # g_i = dy / kept, the (1 − ε) and ε/V scalings, the nll and smoothing gradients added, then p − t̃
        # (which may cancel, so relative to p + t̃): 4 roundings; fp16 gradients g·p are often subnormal
        err = gi.abs()[:, None] * (rel * p + 4 * u_c * (p + target))
        # a max-shifted softmax differentiated by autograd (llm.c's forward written in torch): the shift's
        # gradient, −Σ_j of the row's n gradients (0 in exact arithmetic, which are p − t̃), lands on the row's
        # maximum (shared among ties) as that sum's rounding error, in the accumulator (u_c would make a 16-bit
        # row's maximum allow more than its gradient); measured 10·u·|g_i| at 63 x 16,383 (fp32)
        top = (x == x.amax(-1, keepdim=True)).to(x.dtype)
        err = err + gi.abs()[:, None] * top * (ba.lam * sqrt(n) + 1) * ba.u_acc * (p - target).abs().sum(
            -1, keepdim=True
        )
        if cfg.softcap:  # d logits = d x̃ · (1 − tanh²): the factor <= 1, its own error 4·u_c absolute
            # (1 − tanh² cancels where tanh saturates) plus the forward's 4·u_c·|x̃| in the log
            s = 1 - torch.tanh(raw / cfg.softcap) ** 2
            err = s * (err + gi.abs()[:, None] * 4 * u_c * x.abs().amax(-1, keepdim=True) * p)
            err = err + 4 * u_c * gi.abs()[:, None] * (p + target)
        err = err + 4 * underflow(ba.u_in) * (1 + gi.abs()[:, None])
        return torch.where(keep, err, torch.zeros_like(err)) + ba.u_out * g[0].abs(), None

    return grad_bound


def mistakes(cfg: CrossEntropy) -> tuple[tuple[str, OpFamily], ...]:
    out = [("label smoothing ignored", replace(cfg, label_smoothing=0.0))] if cfg.label_smoothing else []
    if cfg.label_smoothing:
        out.append(
            (
                f"the label-smoothing term counted on the ignored rows too (ε = {cfg.label_smoothing:g} times "
                "their mean −log p added: their loss is not 0)",
                replace(cfg, smooth_ignored=True),
            )
        )
    if cfg.softcap:
        out.append(("the softcap not applied", replace(cfg, softcap=0.0)))
        out += [
            (f"the softcap written {form} for c·tanh(x/c) (c = {cfg.softcap:g})", replace(cfg, cap_form=form))
            for form in CAP_FORMS
            if form != cfg.cap_form
        ]
    if cfg.reduction == "mean":
        out.append(("the mean over every row, ignored ones included", replace(cfg, all_rows=True)))
    return tuple((what, build(alt)) for what, alt in out)


def call_kwargs(cfg: CrossEntropy) -> dict[str, Any]:
    kw: dict[str, Any] = {"reduction": cfg.reduction}
    kw |= {"ignore_index": cfg.ignore_index} if cfg.ignore_index != -100 else {}
    kw |= {"label_smoothing": cfg.label_smoothing} if cfg.label_smoothing else {}
    return kw | ({"softcap": cfg.softcap} if cfg.softcap else {})


def configure(params: dict[str, Any]) -> OpFamily:
    return build(
        CrossEntropy(
            reduction=str(params.get("reduction", "mean")),
            ignore_index=int(params.get("ignore_index", -100)),
            label_smoothing=float(params.get("label_smoothing", 0.0)),
            softcap=abs(float(params.get("softcap", 0.0))),
        )
    )


def build(cfg: CrossEntropy) -> OpFamily:
    return replace(
        CROSS_ENTROPY,
        make_inputs=_inputs(cfg),
        oracle=_oracle(cfg),
        bound=_bound(cfg),
        grad_bound=_grad_bound(cfg),
        composite=_oracle(cfg),
        mistakes=lambda: mistakes(cfg),
        kwargs=lambda shape: call_kwargs(cfg),
        batch_inputs=(0, 1) if cfg.reduction == "none" else (),
    )


_DEFAULT = CrossEntropy()
CROSS_ENTROPY = OpFamily(
    name="cross_entropy",
    make_inputs=_inputs(_DEFAULT),
    oracle=_oracle(_DEFAULT),
    bound=_bound(_DEFAULT),
    grad_bound=_grad_bound(_DEFAULT),
    reduction_len=lambda s: s[-1],
    float_inputs=(0,),
    batch_inputs=(),
    composite=_oracle(_DEFAULT),
    mistakes=lambda: mistakes(_DEFAULT),
    configure=configure,
    kwargs=lambda shape: call_kwargs(_DEFAULT),
    input_names=("logits", "target"),
)
