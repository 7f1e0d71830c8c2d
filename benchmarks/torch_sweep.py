"""Sweep: torch's own implementation of every op family through kcgate's bounds, forward and backward.

A false positive on torch's own kernel is a bug in a bound. For each family (default params, plus the
variants tests/numerics/ops/test_families.py covers) x fp32/bf16/fp16 x forward/backward, over seeds 0..N-1, this runs
the trial the way the harness measures it (tests/numerics/ops/test_families.budget and grad_budgets: fresh inputs, the
family's call, fp64 oracle, the family's bound at the contract defaults: fp32 accumulator, λ = 8) and prints
the worst budget over the seeds; rows over 0.5 are flagged. Also two eager composites people ship: an HF
Llama RMSNorm module (fp32 compute, cast to the input dtype, then weight * h) and SiLU written as
x * sigmoid(x).

    python -m benchmarks.torch_sweep [--seeds 20] [--only rmsnorm,silu]

Takes ~2-4 minutes on one thread; not part of the test suite (tests/numerics/ops/test_families.py pins 12 seeds).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

from kcgate.numerics.ops import OPS
from kcgate.numerics.ops.base import OpFamily

F = torch.nn.functional
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def hf_rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """transformers' LlamaRMSNorm.forward, as it ships."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
    return w * h.to(x.dtype)


def silu_eager(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


# (family, params, shape, kernel or None for the family's composite)
CASES: list[tuple[str, dict[str, Any], tuple[int, ...], Any]] = [
    ("matmul", {}, (48, 96, 40), None),
    ("bmm", {}, (3, 16, 64, 24), None),
    ("linear", {}, (48, 96, 40), None),
    ("sdpa", {}, (1, 4, 48, 32), F.scaled_dot_product_attention),
    ("attention", {"causal": True}, (2, 4, 2, 48, 32), F.scaled_dot_product_attention),
    ("rope", {}, (2, 4, 2, 32, 32), None),
    ("swiglu", {}, (32, 512), None),
    ("geglu", {}, (32, 512), None),
    ("cross_entropy", {}, (16, 2048), None),
    ("cross_entropy", {"label_smoothing": 0.1}, (16, 2048), None),
    ("scaled_mm", {}, (32, 256, 32), None),
    ("quant_gemm", {}, (16, 512, 32), None),
    ("sum", {}, (32, 512), None),
    ("mean", {}, (32, 512), None),
    ("softmax", {}, (32, 256), None),
    ("logsumexp", {}, (32, 256), None),
    ("layernorm", {}, (32, 256), None),
    ("rmsnorm", {}, (32, 256), None),
    ("rmsnorm", {"kernel": "hf"}, (32, 256), hf_rmsnorm),
    ("gelu", {}, (32, 256), None),
    ("silu", {}, (32, 256), None),
    ("silu", {"kernel": "x*sigmoid(x)"}, (32, 256), silu_eager),
    ("gather", {}, (32, 64, 96), None),
    ("index_select", {}, (32, 64, 96), None),
    ("embedding", {}, (64, 32, 256), None),
]
SKIP = {
    ("cross_entropy", "label_smoothing", torch.float16)
}  # documented: torch's fp16 smoothing sum overflows


def family(name: str, params: dict[str, Any]) -> OpFamily:
    f = OPS[name]
    p = {k: v for k, v in params.items() if k != "kernel"}
    return f.configure(p) if f.configure else f


def grad_budgets(
    op: OpFamily, kernel: Any, shape: tuple[int, ...], dtype: torch.dtype, seed: int, floor: bool = True
) -> dict[str, float]:
    """Each differentiated input's budget, as kcgate.engine.backward measures it (seeded dY in the output dtype);
    ``floor`` adds the subnormal floor kcgate.engine.backward.grad_allowance adds (tests/numerics/ops/test_families leaves it
    out, a stricter check)."""
    from kcgate.engine.backward import subnormal_grad_floor
    from kcgate.numerics.metrics import compare
    from kcgate.numerics.ops.base import BoundArgs
    from kcgate.vocab import dtypes

    gen = torch.Generator().manual_seed(seed)
    x = op.make_inputs(shape, dtype, gen, "normal")
    leaves = [t.clone().requires_grad_() if t.is_floating_point() else t for t in x]
    y = kernel(*leaves, **(op.kwargs(shape) if op.kwargs else {}))
    y = op.output(y) if op.output else y
    dy = torch.randn(y.shape, generator=gen, dtype=torch.float64).to(y.dtype)
    floats = [i for i, t in enumerate(x) if t.is_floating_point()]
    got = torch.autograd.grad(y, [leaves[i] for i in floats], dy, allow_unused=True)
    up = [t.double().requires_grad_() if t.is_floating_point() else t for t in x]
    ref = torch.autograd.grad(op.oracle(*up), [up[i] for i in floats], dy.double(), allow_unused=True)
    refs = [torch.zeros(())] * len(x)
    for i, r in zip(floats, ref):
        refs[i] = r if r is not None else torch.zeros_like(up[i])
    u = dtypes.unit_roundoff(str(dtype).removeprefix("torch."))
    assert op.grad_bound is not None
    allowed = op.grad_bound(
        tuple(t.detach() for t in up), dy.double(), tuple(refs), BoundArgs(2.0**-24, u, 8.0, u)
    )
    extra = subnormal_grad_floor(dtype, 8.0, tuple(up)) if floor else 0.0
    out = {}
    for i, g in zip(floats, got):
        if allowed[i] is not None:
            g = g if g is not None else torch.zeros_like(refs[i])
            r = compare(g, refs[i], allowed[i] + extra, "error-bound").ratio.max()
            out[op.input_name(i)] = float(r)
    return out


def budget(
    op: OpFamily,
    kernel: Any,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    seed: int,
    floor: bool = True,
    dist: str = "normal",
) -> float:
    """One trial as the harness runs it: fresh inputs, the family's call, fp64 oracle, the family's bound;
    ``floor`` adds the subnormal floor kcgate.engine.harness.allowance adds (tests/numerics/ops/test_families leaves
    it out, a stricter check)."""
    from kcgate.engine.trial import subnormal_floor
    from kcgate.numerics.metrics import compare
    from kcgate.numerics.ops.base import BoundArgs
    from kcgate.vocab import dtypes

    x = op.make_inputs(shape, dtype, torch.Generator().manual_seed(seed), dist)
    with torch.no_grad():
        y = kernel(*x, **(op.kwargs(shape) if op.kwargs else {}))
    y = op.output(y) if op.output else y
    up = tuple(t.double() if t.is_floating_point() else t for t in x)
    ref = op.oracle(*up)
    u = dtypes.unit_roundoff(str(dtype).removeprefix("torch."))
    ba = BoundArgs(2.0**-24, u, 8.0, u)
    allowed = op.bound(up, ref, ba) + (subnormal_floor(ba) if floor else 0.0)
    return float(compare(y, ref, allowed, "error-bound").ratio.max())


def main(argv: list[str] | None = None) -> int:

    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--only", default="")
    a = ap.parse_args(argv)
    only = set(filter(None, a.only.split(",")))
    torch.set_num_threads(1)
    print(f"{'family':<14} {'params':<28} {'dtype':<9} {'dir':<4} {'worst':>8}  tensor")
    flagged = 0
    for name, params, shape, kernel in CASES:
        if only and name not in only:
            continue
        op = family(name, params)
        k = kernel or op.composite or op.oracle
        for dt in DTYPES:
            if any(n == name and p in params and d == dt for n, p, d in SKIP):
                continue
            d = str(dt).removeprefix("torch.")
            fwd = max(budget(op, k, shape, dt, s) for s in range(a.seeds))
            rows = [("fwd", fwd, "out")]
            if op.grad_bound is not None:
                worst: dict[str, float] = {}
                for s in range(a.seeds):
                    for t, b in grad_budgets(op, k, shape, dt, s).items():
                        worst[t] = max(worst.get(t, 0.0), b)
                t = max(worst, key=lambda n: worst[n])
                rows.append(("bwd", worst[t], t))
            for direction, b, t in rows:
                mark = "  <-- over 0.5" if b > 0.5 else ""
                flagged += b > 0.5
                print(
                    f"{name:<14} {str(params or ''):<28} {d:<9} {direction:<4} {b:8.3g}  {t}{mark}",
                    flush=True,
                )
    print(f"{flagged} rows over 0.5")
    return 0


if __name__ == "__main__":
    sys.exit(main())
