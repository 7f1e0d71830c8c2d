"""Where kcgate's host time per case goes, and what each distinct shape adds: cProfile over ``scale.py``'s cases.

Run: ``python benchmarks/case_profile.py [--cases 400] [--top 25]``.

Two plans of the same size, in process as a worker runs them (``execute_case``, one thread):

* **shapes**: ``scale.py``'s cases (C-PRC-01 matmul fp32, ``cases / 2`` distinct small shapes, 2 seeds each);
* **one shape**: the same number of cases on one shape (every seed a case).

For each it reports CPU time per case in the stages a case goes through (planning, the context, input
generation, the kernel call under guard, the fp64 oracle, the bound, the comparison and its metrics, the
signal ratio, the stale check, the class check's other work), from cProfile's cumulative times of those entry
points, and the functions whose time per case differs most between the two plans: what a new shape costs.
CPU time (cProfile timed by ``time.process_time``); cProfile's own overhead inflates every figure alike
(about 2x on small cases): read the split, not the totals.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import contracts_toml  # noqa: E402

# stage -> (module path suffix, function name): cumulative times of non-nested entry points
STAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "context (resolve, adapt, op)": (("engine/case.py", "make_context"),),
    "input generation": (("engine/trial.py", "inputs"),),
    "kernel call under guard": (("engine/harness.py", "_call"),),
    "fp64 oracle": (("engine/trial.py", "oracle"),),
    "bound (allowance)": (("engine/trial.py", "allowance"),),
    "compare + metrics": (("numerics/metrics.py", "compare"), ("numerics/metrics.py", "to_metrics")),
    "signal ratio": (("engine/trial.py", "signal"),),
    "stale check": (("engine/harness.py", "_stale_check"),),
    "sensitivity gate (excess)": (("checks/__init__.py", "_excess_gate"),),
    "torch state checks": (
        ("engine/torch_state.py", "after_kernel"),
        ("engine/torch_state.py", "case_changes"),
    ),
}


def one_shape_toml(n_cases: int) -> str:
    return (
        '[project]\nname = "one-shape"\n\n[[contract]]\nid = "mm"\nclass = "C-PRC-01"\n'
        'kernel = "kcgate.kernels.builtin:matmul"\nop = "matmul"\ndtypes = ["float32"]\naccumulate = "float32"\n'
        f"shapes = [[37, 29, 41]]\nprotocol = {{ seeds = {n_cases} }}\n"
    )


def profile(toml: Path) -> tuple[int, float, float, pstats.Stats]:
    """Cases, planning seconds, CPU seconds of all cases, and the profile of the cases."""
    import torch

    from kcgate.contracts.load import load_project
    from kcgate.devices.cpu import CpuBackend
    from kcgate.engine import torch_state
    from kcgate.engine.case import execute_case
    from kcgate.plan import make_plan

    torch.set_num_threads(1)  # as a worker runs
    torch_state.capture()
    t0 = time.process_time()
    project = load_project(toml)
    cases = make_plan(project, 1, {})
    planning = time.process_time() - t0
    backend = CpuBackend()
    execute_case(project, cases[0], backend)  # warm: first-use imports and caches are not per case
    prof = cProfile.Profile(time.process_time)  # CPU time: the VM is shared, wall time is not ours
    t0 = time.process_time()
    prof.enable()
    for case in cases:
        execute_case(project, case, backend)
    prof.disable()
    return len(cases), planning, time.process_time() - t0, pstats.Stats(prof)


def cumulative(stats: pstats.Stats, where: str, name: str) -> float:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    return sum(v[3] for (path, _line, fn), v in raw.items() if fn == name and path.endswith(where))


def per_function(stats: pstats.Stats) -> dict[str, float]:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for (path, line, fn), v in raw.items():
        key = f"{Path(path).parent.name}/{Path(path).name}:{line}({fn})" if path != "~" else fn
        out[key] = out.get(key, 0.0) + v[3]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    found = {}
    with tempfile.TemporaryDirectory() as d:
        for name, text in (("shapes", contracts_toml(args.cases)), ("one shape", one_shape_toml(args.cases))):
            toml = Path(d) / f"{name.replace(' ', '_')}.toml"
            toml.write_text(text)
            found[name] = profile(toml)
    print(f"{'stage (ms per case, CPU, under cProfile)':<42}" + "".join(f"{k:>12}" for k in found))
    n0 = {k: v[0] for k, v in found.items()}
    print(
        f"{'planning (load + make_plan)':<42}"
        + "".join(f"{1e3 * v[1] / n0[k]:12.3f}" for k, v in found.items())
    )
    for stage, points in STAGES.items():
        cells = [sum(cumulative(v[3], w, f) for w, f in points) / n0[k] for k, v in found.items()]
        print(f"{stage:<42}" + "".join(f"{1e3 * c:12.3f}" for c in cells))
    print(f"{'all of execute_case':<42}" + "".join(f"{1e3 * v[2] / n0[k]:12.3f}" for k, v in found.items()))
    a, b = (per_function(v[3]) for v in found.values())
    na, nb = found["shapes"][0], found["one shape"][0]
    diff = sorted(((a.get(f, 0.0) / na - b.get(f, 0.0) / nb, f) for f in a.keys() | b.keys()), reverse=True)
    print(f"\nwhat a distinct shape adds: cumulative ms per case, shapes minus one shape (top {args.top})")
    for d_s, f in diff[: args.top]:
        print(f"{1e3 * d_s:9.3f}  {f}")


if __name__ == "__main__":
    main()
