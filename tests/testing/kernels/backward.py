"""Backward kernels for the tests: torch's own forward with a planted backward fault, as
``torch.autograd.Function`` subclasses a training library would ship.

``planted(fn, fault)`` wraps any torch function: its backward computes the right gradients in the
input dtype with torch's autograd, then commits ``fault``:
- ``zeros``: every gradient zero (a backward that was never written);
- ``stale``: the first call's gradients returned again (a stale gradient buffer);
- ``acc``: the weight gradient (the last float input with a reduction over rows) accumulated in bf16;
- ``atomic``: the bias gradient summed over rows in a random order on every call (atomic adds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kcgate.numerics.emulate import round_mantissa, sequential_sum

_STALE: dict[tuple[Any, ...], tuple[torch.Tensor | None, ...]] = {}


def _grads(fn: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...], dy: torch.Tensor) -> list[Any]:
    xs = [x.detach().requires_grad_() if x.is_floating_point() else x.detach() for x in inputs]
    with torch.enable_grad():
        y = fn(*xs)
        leaves = [x for x in xs if x.requires_grad]
        gs = iter(torch.autograd.grad(y, leaves, dy))
    return [next(gs) if x.requires_grad else None for x in xs]


def _rows_bf16(terms: torch.Tensor) -> torch.Tensor:
    """Σ over dim 0 of per-row fp32 terms, the running sum rounded to bf16 after every row."""
    parts = terms.to(torch.float32).reshape(terms.shape[0], -1).T  # (elements, rows)
    return sequential_sum(parts, torch.bfloat16).reshape(terms.shape[1:])


def _acc_weight_grad(
    fn: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...], dy: torch.Tensor
) -> Any:
    """The weight's gradient as a sum over rows of per-row fp32 gradients, accumulated in bf16."""
    x, w = inputs[0], inputs[1]
    rows = []
    for r in range(x.shape[0]):
        sub = (x[r : r + 1], *inputs[1:])
        rows.append(
            _grads(
                lambda *a: fn(*a).to(torch.float32),
                tuple(t.to(torch.float32) for t in sub),
                dy[r : r + 1].to(torch.float32),
            )[1]
        )
    return _rows_bf16(torch.stack(rows)).to(w.dtype)


def _atomic_bias_grad(dy: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Σ over rows of dY by atomic adds into the gradient's own buffer (fp32 or bf16, as GPUs do), in a
    new random order each call (the global RNG, as the atomics land)."""
    flat = dy.to(dtype).reshape(dy.shape[0], -1)
    total = torch.zeros(flat.shape[1], dtype=dtype)
    for r in torch.randperm(flat.shape[0]).tolist():
        total = total + flat[r]
    return total.reshape(dy.shape[1:]).to(dtype)


def planted(fn: Callable[..., torch.Tensor], fault: str) -> Callable[..., torch.Tensor]:
    class Planted(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *inputs: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(*inputs)
            return fn(*inputs)

        @staticmethod
        def backward(ctx: Any, dy: torch.Tensor) -> Any:
            inputs = ctx.saved_tensors
            gs = _grads(fn, inputs, dy)
            if fault == "zeros":
                gs = [None if g is None else torch.zeros_like(g) for g in gs]
            elif fault == "stale":
                key = tuple(tuple(x.shape) for x in inputs) + (fn,)
                gs = list(_STALE.setdefault(key, tuple(None if g is None else g.clone() for g in gs)))
            elif fault == "acc":
                gs[1] = _acc_weight_grad(fn, inputs, dy)
            elif fault == "atomic":
                gs[-1] = _atomic_bias_grad(dy, inputs[-1].dtype)
            elif fault == "skip-last":  # the last float input's gradient never computed
                last = max(i for i, g in enumerate(gs) if g is not None)
                gs[last] = torch.zeros_like(gs[last])
            elif fault == "nan-to-num":  # NaN/Inf in the gradients replaced by zeros
                gs = [None if g is None else g.nan_to_num(0.0, 0.0, 0.0) for g in gs]
            elif fault == "fp16-path":  # gradients through an 11-bit path (fp16 or TF32 intermediates)
                gs = [None if g is None else round_mantissa(g, 10, "nearest").to(g.dtype) for g in gs]
            return tuple(gs)

    def kernel(*inputs: torch.Tensor) -> torch.Tensor:
        return Planted.apply(*inputs)  # type: ignore[no-any-return]

    return kernel


def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(x, w, b)


matmul_acc = planted(torch.matmul, "acc")
linear_acc = planted(_linear, "acc")
linear_atomic = planted(_linear, "atomic")
matmul_nan_to_num = planted(torch.matmul, "nan-to-num")


def _f(name: str) -> Any:
    return getattr(torch.nn.functional, name)


# Each family's torch implementation in the family's calling convention (the planted faults wrap these).
FAMILY_FNS: dict[str, Callable[..., torch.Tensor]] = {
    "matmul": torch.matmul,
    "bmm": torch.bmm,
    "linear": _linear,
    "sdpa": lambda q, k, v: _f("scaled_dot_product_attention")(q, k, v),
    "sum": lambda x: x.sum(-1),
    "mean": lambda x: x.mean(-1),
    "softmax": lambda x: torch.softmax(x, -1),
    "logsumexp": lambda x: torch.logsumexp(x, -1),
    "layernorm": lambda x, w, b: _f("layer_norm")(x, (x.shape[-1],), w, b, 1e-5),
    "rmsnorm": lambda x, w: _f("rms_norm")(x, (x.shape[-1],), w, 1e-5),
    "gelu": lambda x: _f("gelu")(x),
    "silu": lambda x: _f("silu")(x),
    "gather": lambda x, i: torch.gather(x, 1, i),
    "index_select": lambda x, i: torch.index_select(x, 0, i),
    "embedding": lambda i, w: _f("embedding")(i, w),
}
for _op, _fn in FAMILY_FNS.items():
    for _fault in ("zeros", "stale", "skip-last", "fp16-path"):
        globals()[f"{_op}_{_fault.replace('-', '_')}"] = planted(_fn, _fault)
for _op in ("layernorm", "rmsnorm"):
    globals()[f"{_op}_acc"] = planted(FAMILY_FNS[_op], "acc")
layernorm_atomic = planted(FAMILY_FNS["layernorm"], "atomic")


class _BatchDx(torch.autograd.Function):
    """linear whose dX depends on the batch size: each row's gradient summed in an order set by the batch
    (a split-K over rows chosen from M, as a tuned backward might), so a row alone differs in its last bits."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w, b)
        return torch.nn.functional.linear(x, w, b)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        x, w, b = ctx.saved_tensors
        _, gw, gb = _grads(_linear, (x, w, b), dy)
        chunk = max(1, dy.shape[0] // 4)  # the split of N depends on the batch
        parts = [dy[:, k : k + chunk] @ w[k : k + chunk] for k in range(0, w.shape[0], chunk)]
        return torch.stack(parts).flip(0).sum(0) if dy.shape[0] > 1 else dy @ w, gw, gb


def linear_batch_dx(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _BatchDx.apply(x, w, b)  # type: ignore[no-any-return]


class _SoftmaxWrites(torch.autograd.Function):
    """A correct softmax and backward, except that one phase overwrites the input ``x``: the forward (as
    Liger's cross-entropy stores its gradient in the logits) or the backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, phase: str) -> torch.Tensor:
        y = torch.softmax(x, -1)
        ctx.save_for_backward(y, x)
        ctx.phase = phase
        if phase == "forward":
            x.data.copy_(y)
        return y.clone()

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        y, x = ctx.saved_tensors
        if ctx.phase == "backward":
            x.data.zero_()
        return y * (dy - (dy * y).sum(-1, keepdim=True)), None


def softmax_writes_x_in_forward(x: torch.Tensor) -> torch.Tensor:
    return _SoftmaxWrites.apply(x, "forward")  # type: ignore[no-any-return]


def softmax_writes_x_in_backward(x: torch.Tensor) -> torch.Tensor:
    return _SoftmaxWrites.apply(x, "backward")  # type: ignore[no-any-return]


class _SavedStatsLayerNorm(torch.autograd.Function):
    """layer_norm as torch's CPU kernel writes it for a 16-bit layer: the forward in fp32, 1/σ saved rounded
    to the input dtype, the backward's dx in fp32 from it. ``mean``: "input" saves μ rounded to the input
    dtype too (torch does), "fp32" keeps it; ``rows``: dγ/dβ summed over the rows in fp32, or ("bf16") into
    a buffer of the input dtype rounded after every row (torch's CPU kernel); ``dx_sums``: "bf16"
    accumulates dx's two row sums (Σg, Σg·x̂) in bf16 (a fault)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, modes: tuple[str, ...]) -> Any:
        xf = x.to(torch.float32)
        mu = xf.mean(-1, keepdim=True)
        rstd = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + 1e-5)
        y = ((xf - mu) * rstd * w.to(torch.float32) + b.to(torch.float32)).to(x.dtype)
        ctx.save_for_backward(x, w, mu.to(x.dtype) if modes[0] == "input" else mu, rstd.to(x.dtype))
        ctx.modes = modes
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        x, w, mu_s, rstd_s = ctx.saved_tensors
        _, rows, dx_sums = ctx.modes
        xf, dyf, wf = x.to(torch.float32), dy.to(torch.float32), w.to(torch.float32)
        xhat = (xf - mu_s.to(torch.float32)) * rstd_s.to(torch.float32)
        g = dyf * wf
        if dx_sums == "bf16":
            sg = sequential_sum(g, torch.bfloat16).to(torch.float32).unsqueeze(-1)
            sgx = sequential_sum(g * xhat, torch.bfloat16).to(torch.float32).unsqueeze(-1)
        else:
            sg, sgx = g.sum(-1, keepdim=True), (g * xhat).sum(-1, keepdim=True)
        n = x.shape[-1]
        dx = (rstd_s.to(torch.float32) * (g - sg / n - xhat * sgx / n)).to(x.dtype)
        terms = torch.stack([dyf * xhat, dyf], 1)  # (rows, 2, n)
        sums = _rows_bf16(terms) if rows == "bf16" else terms.sum(0)
        return dx, sums[0].to(w.dtype), sums[1].to(w.dtype), None


def _saved(*modes: str) -> Callable[..., torch.Tensor]:
    def kernel(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _SavedStatsLayerNorm.apply(x, w, b, modes)  # type: ignore[no-any-return]

    return kernel


layernorm_saved_rstd = _saved("fp32", "fp32", "fp32")  # correct under accumulate = "float32"
layernorm_saved_stats = _saved("input", "fp32", "fp32")  # μ rounded too: cancellation at large means
layernorm_torch_cpu = _saved("input", "bf16", "fp32")  # torch's CPU algorithm for a bf16 layer
layernorm_saved_rstd_rows_bf16 = _saved("fp32", "bf16", "fp32")
layernorm_saved_rstd_dx_sums_bf16 = _saved("fp32", "fp32", "bf16")


def matmul_overwrites_a(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A correct product that then zeroes its input ``a`` (a scratch buffer by design)."""
    out = a @ b
    a.data.zero_()
    return out


def matmul_overwrites_a_and_b(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same, zeroing ``b`` too."""
    out = matmul_overwrites_a(a, b)
    b.data.zero_()
    return out
