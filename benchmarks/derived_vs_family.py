"""The derived bound where the answer is known: for every built-in family, the bound kcgate derives from the
family's own fp64 oracle (kcgate.numerics.derived, as a custom op gets it) beside the family's hand-derived
bound, on the same inputs. Per family and dtype: the median and 10th/90th percentile over elements of
derived / hand, the budget the family's composite (torch's own op in the case dtype) uses under each, and
the derived bound's cost as a multiple of one fp64 oracle call.

    python -m benchmarks.derived_vs_family [--dtypes float32,bfloat16] [--only softmax,...] [--samples 24]
        [--scale 0.25]

``--scale`` shrinks the families' default shapes (each dimension at least 8) to keep a run short.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._machine import describe  # noqa: E402
from kcgate.engine.trial import subnormal_floor  # noqa: E402
from kcgate.numerics.derived import SAMPLES, Precision, derive  # noqa: E402
from kcgate.numerics.ops import OPS  # noqa: E402
from kcgate.numerics.ops.base import BoundArgs, upcast  # noqa: E402

SKIP = {"custom": "no oracle of its own", "pointwise": "needs params.fn"}


def _u(name: str) -> float:
    return float(torch.finfo(getattr(torch, name)).eps) / 2


def _shape(shape: tuple[int, ...], scale: float) -> tuple[int, ...]:
    return tuple(max(8, int(d * scale)) if d > 8 else d for d in shape)


def row(name: str, dtype: str, scale: float, samples: int) -> str:
    op = OPS[name]
    shape = _shape(op.default_shapes[0], scale)
    dt = getattr(torch, dtype)
    x = op.make_inputs(shape, dt, torch.Generator().manual_seed(0), "normal")
    up = upcast(x)
    t0 = time.perf_counter()
    ref = op.oracle(*up).to(torch.float64)
    t_oracle = time.perf_counter() - t0
    ba = BoundArgs(_u("float32"), _u(dtype), 8.0, _u(dtype))
    hand = op.bound(up, ref, ba) + subnormal_floor(ba)
    t0 = time.perf_counter()
    got = derive(
        lambda: op.oracle(*up), up, Precision(ba.u_in, ba.u_acc, ba.u_out), (ba.u_out,), samples=samples
    )
    t_derived = time.perf_counter() - t0
    derived = got.bounds[0].reshape(ref.shape) + subnormal_floor(ba)
    ratio = (derived / torch.broadcast_to(hand, ref.shape)).flatten()
    ratio = ratio[ratio.isfinite()]
    q = torch.quantile(ratio[: 1 << 24], torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
    kernel = op.composite or op.oracle
    kw = op.kwargs(shape) if op.kwargs else {}
    out = kernel(*x, **kw) if op.composite else kernel(*x)
    err = (out.to(torch.float64) - ref).abs()
    b_hand = float((err / torch.broadcast_to(hand, ref.shape)).max())
    b_der = float((err / derived).max())
    return (
        f"{name:13s} {dtype:9s} {str(list(shape)):22s} {q[1]:9.3g} {q[0]:9.3g} {q[2]:9.3g} "
        f"{b_hand:9.3g} {b_der:9.3g} {t_derived / max(t_oracle, 1e-6):8.0f}x"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--only", default="")
    p.add_argument("--samples", type=int, default=SAMPLES)
    p.add_argument("--scale", type=float, default=0.25)
    a = p.parse_args(argv)
    print(describe())
    print(f"samples {a.samples}, shapes x{a.scale}; ratio = derived / hand-derived bound, per element")
    print(
        f"{'family':13s} {'dtype':9s} {'shape':22s} {'ratio p50':>9s} {'p10':>9s} {'p90':>9s} "
        f"{'bud hand':>9s} {'bud der':>9s} {'cost':>9s}"
    )
    names = [n for n in (a.only.split(",") if a.only else OPS) if n not in SKIP]
    for name in names:
        for dtype in a.dtypes.split(","):
            try:
                print(row(name, dtype, a.scale, a.samples), flush=True)
            except Exception as exc:  # a family the derivation cannot run is reported, not hidden
                print(
                    f"{name:13s} {dtype:9s} not derived: {type(exc).__name__}: {str(exc)[:120]}", flush=True
                )
    for name, why in SKIP.items():
        print(f"{name:13s} skipped: {why}")


if __name__ == "__main__":
    main()
