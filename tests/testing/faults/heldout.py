"""Held-out semantic bugs (issue 33): written after the thresholds of the semantic fits were set (commit
"held-out ..."), committed before they were first run, and never tuned against. They vary the bug classes of
tests/testing/faults/semantic.py and misnamed.py on other ops and in other directions. Each lists the causes
that would name it right, decided before the first run; an empty set means no cause in the table is its
transformation, so the right answer is to say less.

``python -m tests.testing.faults.heldout`` diagnoses each on seeds 0-2 and prints, per bug, the cause named on
each seed and whether that is right, says less (``exceeds-bound`` or no signature) or is wrong. ``AMENDED``
holds the one right set changed after the first run, marked in the output.
"""

from __future__ import annotations

import math
import sys

import torch

from tests.testing.faults.semantic import Bug, diagnose

F = torch.nn.functional


def layernorm_weight_twice(x, w, b):  # type: ignore[no-untyped-def]
    """The scale applied twice (x̂·w·w + b): each column scaled by its own factor."""
    xf = x.float()
    y = F.layer_norm(xf, (x.shape[-1],), None, None, 1e-5)
    return (y * w.float() * w.float() + b.float()).to(x.dtype)


def attention_mask_hides_own_key(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    """A causal mask built with triu(0): each query misses its own key (the first query sees nothing)."""
    if k.shape[-3] != q.shape[-3]:  # grouped-query heads (this line was missing in the first run)
        k, v = (
            k.repeat_interleave(q.shape[-3] // k.shape[-3], -3),
            v.repeat_interleave(q.shape[-3] // k.shape[-3], -3),
        )
    s = (q.float() @ k.float().mT) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if is_causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(0), float("-inf"))
    return (s.softmax(-1) @ v.float()).to(q.dtype)


def layernorm_no_mean(x, w, b):  # type: ignore[no-untyped-def]
    """A layernorm without its mean subtraction: x/√(mean(x²) + eps)·w + b."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float() + b.float()).to(x.dtype)


class _SoftmaxNoYFactor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        y = torch.softmax(x.float(), -1).to(x.dtype)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        (y,) = ctx.saved_tensors
        return dy - (y * dy).sum(-1, keepdim=True)  # the bug: y·(...) without the y


def softmax_backward_no_y(x: torch.Tensor) -> torch.Tensor:
    return _SoftmaxNoYFactor.apply(x)  # type: ignore[no-any-return]


def matmul_drops_last_k_block(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A K loop over tiles of 64 whose range stops one tile early."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(0, a.shape[1] - 64, 64):
        acc = acc + a[:, k : k + 64].float() @ b[k : k + 64].float()
    return acc.to(a.dtype)


def mean_fp16_accumulator(x: torch.Tensor) -> torch.Tensor:
    """An fp32 mean whose running sum is fp16, added 64 terms at a time."""
    acc = torch.zeros(x.shape[:-1], dtype=torch.float16)
    for j in range(0, x.shape[-1], 64):
        acc = (acc.float() + x[..., j : j + 64].float().sum(-1)).half()
    return acc.float() / x.shape[-1]


def rope_sin_sign_flipped(q, k, cos, sin):  # type: ignore[no-untyped-def]
    """x·cos − rotate_half(x)·sin: the rotation by −θ."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def rotate_half(t):  # type: ignore[no-untyped-def]
        t1, t2 = t.chunk(2, dim=-1)
        return torch.cat((-t2, t1), dim=-1)

    return q * cos - rotate_half(q) * sin, k * cos - rotate_half(k) * sin


def l2norm_no_sqrt(x: torch.Tensor) -> torch.Tensor:
    """x / Σx² where x / √Σx² is meant."""
    xf = x.float()
    return (xf / xf.pow(2).sum(-1, keepdim=True).clamp_min(1e-12)).to(x.dtype)


def logsumexp_first_half(x: torch.Tensor) -> torch.Tensor:
    """A logsumexp whose sum of exp covers the first half of the row (one tile of BLOCK = n/2, no loop)."""
    xf = x.float()
    m = xf.amax(-1, keepdim=True)
    h = x.shape[-1] // 2
    return (m.squeeze(-1) + (xf[..., :h] - m).exp().sum(-1).log()).to(x.dtype)


def bmm_batch_off_by_one(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Batch i multiplies by batch i − 1's right operand."""
    return a @ b.roll(1, 0)


class _CESmoothingIgnoredInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index, eps):  # type: ignore[no-untyped-def]
        out = F.cross_entropy(logits.float(), target, ignore_index=ignore_index, label_smoothing=eps)
        ctx.save_for_backward(logits, target)
        ctx.ignore_index = ignore_index
        return out.to(logits.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        logits, target = ctx.saved_tensors
        keep = target != ctx.ignore_index
        p = logits.float().softmax(-1)
        g = p - F.one_hot(target.clamp(0), p.shape[-1]).float()  # the bug: no smoothing in the gradient
        g = torch.where(keep[:, None], g, 0.0) * dy / keep.sum()
        return g.to(logits.dtype), None, None, None


def ce_smoothing_ignored_in_backward(
    logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0
):  # type: ignore[no-untyped-def]
    return _CESmoothingIgnoredInBackward.apply(logits, target, ignore_index, label_smoothing)


def mean_divides_by_n_minus_1(x: torch.Tensor) -> torch.Tensor:
    """A row mean divided by n − 1."""
    return x.float().sum(-1) / (x.shape[-1] - 1)


def sum_skips_first_tile(x: torch.Tensor) -> torch.Tensor:
    """A row sum over tiles of 128 whose loop starts at the second tile."""
    return x[..., 128:].sum(-1)


# bug -> the causes that name it right (empty: no cause is its transformation; the right answer says less)
HELD_OUT: tuple[tuple[Bug, frozenset[str]], ...] = (
    (
        Bug("layernorm-weight-twice", "layernorm", "float32", (32, 1024), layernorm_weight_twice, "", ""),
        frozenset(),
    ),
    (
        Bug(
            "attention-mask-hides-own-key",
            "attention",
            "float32",
            (2, 4, 2, 128, 64),
            attention_mask_hides_own_key,
            "",
            "",
            params=(("causal", True),),
        ),
        frozenset({"wrong-semantics"}),
    ),
    (
        Bug("layernorm-no-mean", "layernorm", "float32", (32, 1024), layernorm_no_mean, "", ""),
        frozenset({"offset"}),
    ),
    (
        Bug(
            "softmax-backward-no-y",
            "softmax",
            "float32",
            (32, 256),
            softmax_backward_no_y,
            "",
            "",
            direction="backward",
        ),
        frozenset(),
    ),
    (
        Bug(
            "matmul-drops-last-k-block", "matmul", "float32", (64, 256, 32), matmul_drops_last_k_block, "", ""
        ),
        frozenset({"tail-pattern", "wrong-extent"}),
    ),
    (
        Bug("mean-fp16-accumulator", "mean", "float32", (16, 1024), mean_fp16_accumulator, "", ""),
        frozenset({"low-precision-accumulator"}),
    ),
    (
        Bug("rope-sin-sign-flipped", "rope", "float32", (2, 8, 2, 128, 64), rope_sin_sign_flipped, "", ""),
        frozenset({"wrong-semantics"}),
    ),
    (
        Bug("l2norm-no-sqrt", "l2norm", "float32", (32, 1024), l2norm_no_sqrt, "", ""),
        frozenset({"scaled-rows"}),
    ),
    (
        Bug("logsumexp-first-half", "logsumexp", "float32", (32, 1024), logsumexp_first_half, "", ""),
        frozenset({"wrong-extent"}),
    ),
    (
        Bug("bmm-batch-off-by-one", "bmm", "float32", (4, 64, 128, 32), bmm_batch_off_by_one, "", ""),
        frozenset({"garbage"}),
    ),
    (
        Bug(
            "ce-smoothing-ignored-in-backward",
            "cross_entropy",
            "float32",
            (64, 512),
            ce_smoothing_ignored_in_backward,
            "",
            "",
            params=(("label_smoothing", 0.1),),
            direction="backward",
        ),
        frozenset({"wrong-semantics"}),
    ),
    (
        Bug("mean-divides-by-n-minus-1", "mean", "float32", (16, 1024), mean_divides_by_n_minus_1, "", ""),
        frozenset({"scaled-output"}),
    ),
    (
        Bug("sum-skips-first-tile", "sum", "float32", (16, 1000), sum_skips_first_tile, "", ""),
        frozenset({"wrong-extent", "tail-pattern"}),
    ),
)

# Decided after the first run, not before: the softmax backward without y showed a mistake no cause named (it
# was `garbage`); the softmax family now lists that wrong backward as a known mistake (``grad_mistakes``), so
# naming it is right. Counted apart from the beforehand sets (docs/signatures.md#held-out-semantic-bugs).
AMENDED: dict[str, frozenset[str]] = {"softmax-backward-no-y": frozenset({"wrong-semantics"})}

SAYS_LESS = frozenset({"exceeds-bound", ""})
SEEDS = (0, 1, 2)


def verdict(cause: str, right: frozenset[str]) -> str:
    """right, less (no specific cause) or wrong; where no cause is right, saying less is the right answer."""
    if cause in right:
        return "right"
    return "less" if cause in SAYS_LESS else "wrong"


def measure(seeds: tuple[int, ...] = SEEDS) -> list[tuple[str, list[tuple[str, str, str]], str]]:
    """(bug id, [(status, cause, summary) per seed], the bug's verdict: its worst seed's)."""
    rank = {"right": 0, "less": 1, "wrong": 2}
    out = []
    for bug, right in HELD_OUT:
        right = right | AMENDED.get(bug.id, frozenset())
        got = []
        for s in seeds:
            f = diagnose(bug, s)
            sig = f.signature
            got.append((f.status, sig.cause if sig else "", sig.summary if sig else f.message))
        worst = max(
            (verdict(c, right) if st == "fail" else "wrong" for st, c, _ in got), key=rank.__getitem__
        )
        out.append((bug.id, got, worst))
    return out


def main() -> int:
    rows = measure()
    for bug_id, got, worst in rows:
        causes = sorted({c or "-" for _, c, _ in got})
        note = " (right set amended after the first run)" if bug_id in AMENDED else ""
        print(f"{worst:6s} {bug_id:34s} {', '.join(causes)}{note}")
        for st, _, summary in got:
            print(f"         {st:5s} {summary[:150]}")
    counts = {v: sum(1 for *_, w in rows if w == v) for v in ("right", "less", "wrong")}
    print(
        f"held-out: {len(rows)} bugs, {counts['right']} right, {counts['less']} say less, {counts['wrong']} wrong"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
