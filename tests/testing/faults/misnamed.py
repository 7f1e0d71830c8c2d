"""The misnamings issue 33 lists for real bugs, rebuilt as kernels under the contract a new user writes from the
docs (C-PRC-01, the class ``kcgate init`` writes): "sparse" for a tiny output wrong everywhere, "garbage" or a
precision name where each row is scaled by its own factor, "offset in blocks of 8" for one constant per row,
"noise" for a reduction over the wrong extent, "biased-rounding" for an fp16 accumulator, and cross-entropy's
"ignored rows counted" tried only on a failing forward. ``MISNAMED`` lists them with the cause and a fragment
of the summary each must now get (tests/engine/test_misnamed_signatures.py, five seeds each).

Written with the fixes (not held out); the held-out measurement is tests/testing/faults/heldout.py.
"""

from __future__ import annotations

import torch

from tests.testing.faults.semantic import Bug

F = torch.nn.functional


# ---- a tiny output, every element wrong ----------------------------------------------------------------


def ce_mean_forgets_max(logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0):  # type: ignore[no-untyped-def]
    """A mean cross-entropy whose logsumexp forgets to add the row max back: one number, wrong."""
    x = logits.float()
    m = x.amax(-1, keepdim=True)
    lse = (x - m).exp().sum(-1).log()  # the bug: + m missing
    keep = target != ignore_index
    nll = torch.where(keep, lse - x.gather(1, target.clamp(0)[:, None])[:, 0], 0.0)
    return (nll.sum() / keep.sum() if reduction == "mean" else nll).to(logits.dtype)


def sum_next_row(x: torch.Tensor) -> torch.Tensor:
    """A row sum whose row pointer is off by one row (row i reads row i + 1): four outputs, all wrong."""
    return x.roll(-1, 0).sum(-1)


# ---- each row scaled by its own factor ---------------------------------------------------------------


def rmsnorm_rstd_from_previous_row(x, w):  # type: ignore[no-untyped-def]
    """A two-pass rmsnorm whose second pass reads the saved 1/rms of the previous row."""
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
    return (xf * r.roll(1, 0) * w.float()).to(x.dtype)


def softmax_per_tile(x: torch.Tensor) -> torch.Tensor:
    """A softmax launched with BLOCK_SIZE = 256 < n and one program per tile: each tile normalised alone."""
    xf = x.float()
    return xf.reshape(*x.shape[:-1], -1, 256).softmax(-1).reshape(x.shape).to(x.dtype)


# ---- one constant per row ----------------------------------------------------------------------------


def log_softmax_forgets_max(x: torch.Tensor) -> torch.Tensor:
    """log_softmax as x − log Σ exp(x − m): the max subtracted inside the sum but never outside."""
    xf = x.float()
    m = xf.amax(-1, keepdim=True)
    return (xf - (xf - m).exp().sum(-1, keepdim=True).log()).to(x.dtype)


# ---- a reduction over the wrong extent ----------------------------------------------------------------


def sum_even_lanes(x: torch.Tensor) -> torch.Tensor:
    """A row sum whose lane stride is 2: it adds the 512 even-indexed terms of 1024."""
    return x[..., ::2].sum(-1)


def mean_even_lanes(x: torch.Tensor) -> torch.Tensor:
    """The same stride bug in a mean (still divided by n)."""
    return x[..., ::2].sum(-1) / x.shape[-1]


def rmsnorm_first_tile(x, w):  # type: ignore[no-untyped-def]
    """An rmsnorm whose mean of squares covers one tile of 512 of the 1024 columns (no loop over the rest)."""
    xf = x.float()
    ms = xf[..., :512].pow(2).mean(-1, keepdim=True)
    return (xf * torch.rsqrt(ms + 1e-5) * w.float()).to(x.dtype)


def layernorm_mean_first_tile(x, w, b):  # type: ignore[no-untyped-def]
    """A layernorm whose row mean covers the first tile of 512 columns; the variance is taken about it."""
    xf = x.float()
    mu = xf[..., :512].mean(-1, keepdim=True)
    var = ((xf - mu) ** 2).mean(-1, keepdim=True)
    return ((xf - mu) * torch.rsqrt(var + 1e-5) * w.float() + b.float()).to(x.dtype)


def matmul_skips_odd_tiles(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A K loop over tiles of 32 whose pointers advance by two tiles: tiles 0, 2, 4, 6 of 8 counted."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(0, a.shape[1], 64):
        acc = acc + a[:, k : k + 32].float() @ b[k : k + 32].float()
    return acc.to(a.dtype)


# ---- an fp16 accumulator ----------------------------------------------------------------------------


def _fp16_running(v: torch.Tensor, block: int) -> torch.Tensor:
    acc = torch.zeros(v.shape[:-1], dtype=torch.float16)
    for j in range(0, v.shape[-1], block):
        acc = (acc.float() + v[..., j : j + block].float().sum(-1)).half()
    return acc


def sum_fp16_accumulator(x: torch.Tensor) -> torch.Tensor:
    """An fp32 row sum whose running sum is an fp16 register, added one tile of 32 at a time."""
    return _fp16_running(x, 32).float()


def matmul_fp16_accumulator(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An fp32 matmul whose accumulator is fp16 (tl.dot(..., out_dtype=tl.float16)), K-tiles of 16."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float16)
    for k in range(0, a.shape[1], 16):
        acc = (acc.float() + a[:, k : k + 16].float() @ b[k : k + 16].float()).half()
    return acc.float()


# ---- cross-entropy's ignored rows, on the gradient --------------------------------------------------------


class _CEMeanOverAllRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index):  # type: ignore[no-untyped-def]
        keep = target != ignore_index
        logp = logits.float().log_softmax(-1)
        nll = -logp.gather(1, target.clamp(0)[:, None])[:, 0]
        ctx.save_for_backward(logp, target, keep)
        return (torch.where(keep, nll, 0.0).sum() / logits.shape[0]).to(logits.dtype)  # the bug: every row

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        logp, target, keep = ctx.saved_tensors
        g = logp.exp() - F.one_hot(target.clamp(0), logp.shape[-1]).float()
        g = torch.where(keep[:, None], g, 0.0) * dy / logp.shape[0]
        return g.to(dy.dtype), None, None


def ce_mean_over_all_rows(logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0):  # type: ignore[no-untyped-def]
    """A mean cross-entropy that divides by every row, the ignored ones included (forward and backward)."""
    return _CEMeanOverAllRows.apply(logits, target, ignore_index)


TINY = "every element of a tiny output"

MISNAMED: tuple[Bug, ...] = (
    Bug(
        "ce-mean-forgets-max",
        "cross_entropy",
        "float32",
        (64, 512),
        ce_mean_forgets_max,
        "exceeds-bound",
        TINY,
    ),
    Bug("sum-next-row", "sum", "float32", (4, 1024), sum_next_row, "exceeds-bound", TINY),
    Bug(
        "rmsnorm-rstd-previous-row",
        "rmsnorm",
        "float32",
        (32, 256),
        rmsnorm_rstd_from_previous_row,
        "scaled-rows",
        "each row scaled by its own factor",
    ),
    Bug(
        "softmax-per-tile",
        "softmax",
        "float32",
        (32, 1024),
        softmax_per_tile,
        "scaled-rows",
        "each tile of 256 columns scaled by its own factor",
    ),
    Bug(
        "log-softmax-forgets-max",
        "log_softmax",
        "float32",
        (32, 1024),
        log_softmax_forgets_max,
        "offset",
        "one constant per row",
    ),
    Bug("sum-even-lanes", "sum", "float32", (16, 1024), sum_even_lanes, "wrong-extent", "sums 512 of 1024"),
    Bug(
        "mean-even-lanes", "mean", "float32", (16, 1024), mean_even_lanes, "wrong-extent", "sums 512 of 1024"
    ),
    Bug(
        "rmsnorm-first-tile",
        "rmsnorm",
        "float32",
        (32, 1024),
        rmsnorm_first_tile,
        "wrong-extent",
        "mean of squares taken over the first 512 of 1024",
    ),
    Bug(
        "layernorm-mean-first-tile",
        "layernorm",
        "float32",
        (32, 1024),
        layernorm_mean_first_tile,
        "wrong-extent",
        "mean taken over the first 512 of 1024",
    ),
    Bug(
        "matmul-skips-odd-tiles",
        "matmul",
        "float32",
        (64, 256, 32),
        matmul_skips_odd_tiles,
        "wrong-extent",
        "sums 128 of 256 terms (tiles of 32",
    ),
    Bug(
        "sum-fp16-accumulator",
        "sum",
        "float32",
        (16, 1024),
        sum_fp16_accumulator,
        "low-precision-accumulator",
        "running sum in fp16",
        distribution="positive",
    ),
    Bug(
        "matmul-fp16-accumulator",
        "matmul",
        "float32",
        (64, 1024, 64),
        matmul_fp16_accumulator,
        "low-precision-accumulator",
        "fp16",
        distribution="positive",
    ),
    Bug(
        "ce-mean-over-all-rows",
        "cross_entropy",
        "float32",
        (64, 512),
        ce_mean_over_all_rows,
        "wrong-semantics",
        "the gradient of logits matches the op with the mean over every row, ignored ones included",
        direction="backward",
    ),
)
