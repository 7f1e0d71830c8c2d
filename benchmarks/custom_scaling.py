"""A custom op against its family twin: time per case against the elements, and where each case's time goes.

Run: ``python -m benchmarks.custom_scaling [--sizes 16x1024 16x4096 64x4096 256x4096 1024x4096]
[--dtypes float32,bfloat16] [--seeds 2] [--profile 16x4096,256x4096]``.

One kernel (docs/custom-op.md's rms_norm, written as its reference), two contracts: ``op = "custom"`` with
the docs' ``rms_norm_ref`` (no tolerance: the bound derived from the reference) and ``op = "rmsnorm"`` (the
family's hand-derived bound), C-PRC-01, ``direction = "both"``. Each case runs in this process as a worker
runs it (``execute_case``, one thread), custom and family alternating case by case so that a loaded machine
slows both alike: read the ratio, not the seconds. A first custom and family case warm the process (the
first custom case in a worker imports ``torch._decomp`` and ``torch._dynamo``: printed apart).

It prints, per size, the median wall seconds per case of each contract and their ratio custom / family, the
same in CPU seconds of this process (on a shared machine the wall time is an upper bound; CPU time is less
touched by other jobs, not untouched: they share caches and memory bandwidth), and the kernel's own seconds;
the CPU seconds of one warm call of the kernel, forward and backward (the median of 15, on the case's inputs
outside the harness) and the family case's CPU time over it (issue 58's item 3: at most 3x); then the least-squares slope of log(time) against log(elements) over the sizes (1: linear; below: better). ``--profile`` adds, at each named size, cProfile's cumulative seconds per case of the stages
a case goes through (the kernel, the fp64 oracle, the bound, the derived bound's plan run and samples, the
reference gradients, the stability probes, the placement check, shrinking).
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import math
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._machine import describe  # noqa: E402

FNS = """import torch


def make_inputs(shape, dtype, generator):
    x = torch.randn(shape, generator=generator).to(dtype)
    weight = (torch.randn(shape[-1:], generator=generator) * 0.5 + 1).to(dtype)
    return x, weight


def rms_norm_ref(x, weight):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return h.to(x.dtype) * weight


rms_norm = rms_norm_ref  # the kernel under test: written as its reference, as a library's eager kernel is
"""

# stage -> (module path suffix, function name) entry points, cumulative CPU seconds
STAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "kernel call (forward + backward)": (("engine/harness.py", "_call"),),
    "fp64 oracle": (("engine/trial.py", "oracle_parts"),),
    "bound, forward": (("engine/trial.py", "allowance"),),
    "reference gradients (fp64 autograd)": (("engine/backward.py", "reference_grads"),),
    "bound, gradients": (("engine/backward.py", "grad_allowance"),),
    "  derived: plan run (trace + scales)": (("numerics/derived.py", "_plan"),),
    "  derived: samples": (("numerics/derived.py", "_sample"),),
    "compare + metrics": (("numerics/metrics.py", "compare"), ("numerics/metrics.py", "to_metrics")),
    "stability probes": (("checks/stability.py", "after_class"),),
    "placement check": (("engine/placement.py", "placement_signature"),),
    "shrinking": (("engine/shrink.py", "shrink_case"),),
}


def contracts_toml(shape: tuple[int, int], dtypes: list[str], seeds: int) -> str:
    common = (
        f'class = "C-PRC-01"\nkernel = "kcg_scaling_fns:rms_norm"\ndtypes = {dtypes!r}\n'
        f'shapes = [{list(shape)}]\ndirection = "both"\nprotocol = {{ seeds = {seeds}, boundary = false }}\n'
    ).replace("'", '"')
    return (
        '[project]\nname = "custom-scaling"\n\n'
        '[[contract]]\nid = "custom"\nop = "custom"\ninputs = "kcg_scaling_fns:make_inputs"\n'
        f'reference = "kcg_scaling_fns:rms_norm_ref"\n{common}\n'
        f'[[contract]]\nid = "family"\nop = "rmsnorm"\nparams = {{ eps = 1e-6 }}\n{common}'
    )


def shape_of(text: str) -> tuple[int, int]:
    a, b = text.lower().split("x")
    return int(a), int(b)


Timing = tuple[float, float, str, float]  # wall seconds, kernel seconds, status, CPU seconds of this process


def run_cases(toml: Path, prof: cProfile.Profile | None = None) -> dict[str, list[Timing]]:
    """Wall seconds, kernel seconds, status and CPU seconds per case, by contract, custom and family
    alternating."""
    from kcgate.contracts.load import load_project
    from kcgate.devices.cpu import CpuBackend
    from kcgate.engine.case import execute_case
    from kcgate.plan import make_plan

    project = load_project(toml)
    cases = make_plan(project, 1, {})
    by = {c: [k for k in cases if k.contract_id == c] for c in ("custom", "family")}
    out: dict[str, list[Timing]] = {"custom": [], "family": []}
    backend = CpuBackend()
    for pair in itertools.zip_longest(by["custom"], by["family"]):
        for case in filter(None, pair):
            t0, c0 = time.perf_counter(), time.process_time()
            if prof:
                prof.enable()
            r = execute_case(project, case, backend)
            if prof:
                prof.disable()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            out[case.contract_id].append((wall, r.kernel_s, r.status, cpu))
    return out


def cumulative(stats: pstats.Stats, where: str, name: str) -> float:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    return sum(v[3] for (path, _line, fn), v in raw.items() if fn == name and path.endswith(where))


def profile(d: Path, shape: tuple[int, int], dtypes: list[str], seeds: int) -> None:
    print(f"\nprofile at {shape[0]}x{shape[1]} (cumulative s per case, under cProfile: read the split)")
    found = {}
    for contract in ("custom", "family"):
        toml = d / f"profile_{contract}.toml"
        text = contracts_toml(shape, dtypes, seeds)
        keep = text.split("[[contract]]")
        toml.write_text(keep[0] + "[[contract]]" + keep[1 if contract == "custom" else 2])
        prof = cProfile.Profile()
        got = run_cases(toml, prof)
        found[contract] = (len(got[contract]), sum(t[0] for t in got[contract]), pstats.Stats(prof))
    print(f"{'stage':<40}{'custom':>10}{'family':>10}")
    for stage, points in STAGES.items():
        cells = [sum(cumulative(v[2], w, f) for w, f in points) / v[0] for v in found.values()]
        print(f"{stage:<40}" + "".join(f"{c:10.3f}" for c in cells))
    print(f"{'all of the case':<40}" + "".join(f"{v[1] / v[0]:10.3f}" for v in found.values()))


def warm_call_cpu(shape: tuple[int, int], dtype: str) -> float:
    """CPU seconds of one warm call of the kernel, forward and backward, outside the harness (median of 15)."""
    import kcg_scaling_fns as fns  # written by main()
    import torch

    x, w = fns.make_inputs(shape, getattr(torch, dtype), torch.Generator().manual_seed(0))
    times = []
    for _ in range(16):
        xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
        c0 = time.process_time()
        y = fns.rms_norm(xx, ww)
        y.backward(torch.ones_like(y))
        times.append(time.process_time() - c0)
    return statistics.median(times[1:])


def slope(x: list[int], y: list[float]) -> float:
    """The least-squares slope of log(y) against log(x): 1 is linear growth, below 1 better than linear."""
    lx, ly = [math.log(v) for v in x], [math.log(v) for v in y]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Runs the benchmark; returns one row per size (elements, median wall and CPU seconds of each contract,
    the statuses seen)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["16x1024", "16x4096", "64x4096", "256x4096", "1024x4096"])
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--profile", default="", help="sizes to profile, e.g. 16x4096,256x4096")
    args = ap.parse_args(argv)
    import torch

    from kcgate.engine import torch_state
    from kcgate.util import heap

    torch.set_num_threads(1)  # as a worker runs
    torch_state.capture()
    heap.keep_freed_memory()  # as a worker runs (no address-space cap here: every freed block kept)
    print(describe())
    dtypes = args.dtypes.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "kcg_scaling_fns.py").write_text(FNS)
        sys.path.insert(0, str(d))
        warm = d / "warm.toml"
        warm.write_text(contracts_toml((4, 64), dtypes[:1], 1))
        t0 = time.perf_counter()
        run_cases(warm)
        print(f"warm-up (first custom and family case: imports): {time.perf_counter() - t0:.2f} s")
        rows = []
        found: list[dict[str, Any]] = []
        print(
            f"\n{'shape':>10} {'elements':>9} {'custom s':>9} {'family s':>9} {'ratio':>6} {'custom cpu':>10} "
            f"{'family cpu':>10} {'ratio':>6} {'kernel s':>9} {'call cpu':>9} {'fam/call':>8}  status"
        )
        for size in args.sizes:
            shape = shape_of(size)
            toml = d / f"c_{size}.toml"
            toml.write_text(contracts_toml(shape, dtypes, args.seeds))
            got = run_cases(toml)
            c, f = (statistics.median(t[0] for t in got[k]) for k in ("custom", "family"))
            cc, fc = (statistics.median(t[3] for t in got[k]) for k in ("custom", "family"))
            k = statistics.median(t[1] for t in got["custom"] + got["family"])
            call = statistics.median(warm_call_cpu(shape, dt) for dt in dtypes)
            status = sorted({t[2] for v in got.values() for t in v})
            rows.append((shape[0] * shape[1], c, f, cc, fc))
            found.append({"elements": rows[-1][0], "custom": c, "family": f, "custom_cpu": cc, "family_cpu": fc,
                          "call_cpu": call, "status": status})  # fmt: skip
            print(
                f"{size:>10} {rows[-1][0]:>9} {c:9.3f} {f:9.3f} {c / f:6.2f} {cc:10.3f} {fc:10.3f} {cc / fc:6.2f} "
                f"{k:9.4f} {call:9.4f} {fc / call:8.0f}  {','.join(status)}",
                flush=True,
            )
        if len(rows) > 1:
            n = [r[0] for r in rows]
            fit = [slope(n, [r[i] for r in rows]) for i in (1, 2, 3, 4)]
            print(
                f"\nslope of log(time) against log(elements), least squares over {len(rows)} sizes "
                f"({args.sizes[0]} to {args.sizes[-1]}; 1: linear): wall custom {fit[0]:.2f}, family {fit[1]:.2f}; "
                f"CPU custom {fit[2]:.2f}, family {fit[3]:.2f}"
            )
        for size in filter(None, args.profile.split(",")):
            profile(d, shape_of(size), dtypes, args.seeds)
    return found


if __name__ == "__main__":
    main()
