"""Benchmark: one case's cost in the harness against the arithmetic it cannot avoid, in process.

Run: ``python benchmarks/case_floor.py [--cases 400] [--rounds 5]``.

Both sides take ``scale.py``'s C-PRC-01 matmul fp32 cases (small M, K, N in 8..64, two trials a case):

* **harness**: ``execute_case`` on each case, as a worker runs it (inputs, guard bands, the kernel, the
  state check, the fp64 oracle, the bound, the comparison and its metrics, the stale check, the sensitivity
  gate, the verdict);
* **floor**: the same arithmetic written straight-line with no checks around it: two fp64 normal draws cast
  to fp32, the guarded copies, the kernel, the fp64 product, a bound of the same form (``k·u·|A||B|``), the
  error, ratio, ULP distance and relative error, the gate's composite run and sequential model. It
  approximates the work, not kcgate's metrics: it is what a faster harness could at best approach.

CPU time per case (``time.process_time``), interleaved rounds, medians; the ratio is harness / floor.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402
from scale import contracts_toml  # noqa: E402

GUARD = 16
NAN_BAND = torch.full((GUARD,), float("nan"))  # one guard band's contents, shared as the harness's is


def floor_trial(m: int, k: int, n: int, seed: int) -> float:
    """One trial's unavoidable arithmetic; returns the budget used (to keep every result live)."""
    digest = hashlib.sha256(f"{seed}".encode()).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
    a = torch.randn(m, k, dtype=torch.float64, generator=gen).to(torch.float32)
    b = torch.randn(k, n, dtype=torch.float64, generator=gen).to(torch.float32)
    views = []
    for t in (a, b):
        buf = torch.cat((NAN_BAND, t.reshape(-1), NAN_BAND))
        views.append((buf, buf[GUARD : GUARD + t.numel()].view(t.shape), t))
    out = torch.matmul(views[0][1], views[1][1])
    for buf, view, t in views:  # inputs unchanged, guard bands intact
        assert torch.equal(view, t) and bool(
            buf.as_strided((2, GUARD), (buf.numel() - GUARD, 1)).isnan().all()
        )
    x, y = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    ref = x @ y
    bound = (np.abs(x) @ np.abs(y)) * (k * 2.0**-24)
    o = out.numpy()
    err = np.abs(o.astype(np.float64) - ref)
    ratio = err / bound
    keys = o.view(np.int32).astype(np.int64) - ref.astype(np.float32).view(np.int32).astype(np.int64)
    _ = float(np.abs(keys).max()), float((err / np.abs(ref)).max()), int(ratio.argmax())
    composite = torch.matmul(a, b).numpy().astype(np.float64)
    scale = 0.31 * 2.0**-24 * np.sqrt(k * ((x * x) @ (y * y) / 2 + ref * ref / 3))
    z, z_ref = err / scale, np.abs(composite - ref) / scale
    _ = math.sqrt(np.vdot(z, z) / z.size) / math.sqrt(np.vdot(z_ref, z_ref) / z.size), z.max() / z_ref.max()
    return float(ratio.max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    from kcgate.contracts.load import load_project
    from kcgate.devices import get_backend
    from kcgate.engine import torch_state
    from kcgate.engine.case import execute_case
    from kcgate.numerics.ops import default_shapes
    from kcgate.plan import make_plan

    torch.set_num_threads(1)  # as the worker runs
    print(describe())
    with tempfile.TemporaryDirectory() as tmp:
        toml = Path(tmp) / "contracts.toml"
        toml.write_text(contracts_toml(args.cases))
        project = load_project(toml)
    cases = make_plan(project, 1, default_shapes())[: args.cases]
    backend = get_backend("cpu")
    torch_state.capture()

    def harness() -> None:
        for case in cases:
            execute_case(project, case, backend)

    def floor() -> None:
        for case in cases:
            m, k, n = case.shape
            floor_trial(m, k, n, case.seed)
            floor_trial(m, k, n, case.seed + 1)

    timings: dict[str, list[float]] = {"harness": [], "floor": []}
    for fn in (harness, floor):  # warm
        fn()
    for _ in range(args.rounds):
        for name, fn in (("harness", harness), ("floor", floor)):
            t0 = time.process_time()
            fn()
            timings[name].append((time.process_time() - t0) / len(cases) * 1e3)
    med = {name: statistics.median(ts) for name, ts in timings.items()}
    for name, ts in timings.items():
        print(
            f"{name:8s} {med[name]:.3f} ms per case (median of {args.rounds}: {', '.join(f'{t:.3f}' for t in ts)})"
        )
    print(f"harness / floor: {med['harness'] / med['floor']:.2f}x over {len(cases)} cases")


if __name__ == "__main__":
    main()
