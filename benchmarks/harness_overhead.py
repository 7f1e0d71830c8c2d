"""Benchmark: wall time of ``kcgate run`` on the repo's contracts.toml against the time spent inside cases.

Run: ``python benchmarks/harness_overhead.py [--repeats 3]`` from anywhere (it runs in the repo root).

Each repeat runs ``kcgate run --results TMP -q --seed 1`` as a subprocess and reads the results. Each case
records ``kernel_s`` (inside the kernel, synchronized), ``oracle_s`` (inside the fp64 oracle or the Freivalds
check) and ``duration_s`` (the whole case in the worker: inputs, guard bands, kernel, oracle, comparison,
the class check's bookkeeping); all three are summed. Startup + orchestration overhead = wall - sum of case durations. ``python -c pass`` and
``python -c 'import torch'`` are timed in the same loop (interleaved) as the floor of a worker's startup.
Medians over the repeats; the overhead is computed per repeat and then its median taken.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import ROOT, describe, kcgate_cmd, timed  # noqa: E402

from kcgate.results.model import load_run  # noqa: E402


def run_once(tmp: Path, i: int, extra_args: list[str]) -> dict[str, float]:
    out = tmp / f"run{i}.json"
    wall = timed([*kcgate_cmd(), "run", "--results", str(out), "-q", "--seed", "1", *extra_args], ok=(0, 1))
    cases = load_run(out).cases
    durations = [c.duration_s for c in cases]
    return {
        "wall": wall,
        "cases": float(len(cases)),
        "sum_dur": sum(durations),
        "first_dur": durations[0] if durations else 0.0,
        "kernel": sum(c.kernel_s for c in cases),
        "oracle": sum(c.oracle_s for c in cases),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--isolation", default="process", help="passed to kcgate run (default: process)")
    args = ap.parse_args()

    print(describe())
    print(f"repo: {ROOT}  command: kcgate run --results TMP -q --seed 1 --isolation {args.isolation}")
    print(f"repeats: {args.repeats} (interleaved with the python / torch-import floors)\n")

    rows: list[dict[str, float]] = []
    py_pass: list[float] = []
    torch_imp: list[float] = []
    tmp = Path(tempfile.mkdtemp(prefix="kcgate-bench-"))
    try:
        for i in range(args.repeats):
            py_pass.append(timed([sys.executable, "-c", "pass"]))
            torch_imp.append(timed([sys.executable, "-c", "import torch"]))
            rows.append(run_once(tmp, i, ["--isolation", args.isolation]))
            r = rows[-1]
            print(
                f"  repeat {i + 1}: wall {r['wall']:.3f} s, sum(duration_s) {r['sum_dur']:.3f} s, "
                f"python -c pass {py_pass[-1]:.3f} s, import torch {torch_imp[-1]:.3f} s",
                flush=True,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = statistics.median
    wall = med(r["wall"] for r in rows)
    inside = med(r["sum_dur"] for r in rows)
    overhead = med(r["wall"] - r["sum_dur"] for r in rows)
    first = med(r["first_dur"] for r in rows)
    n = int(rows[0]["cases"])
    floor_torch, floor_py = med(torch_imp), med(py_pass)

    print(f"\ncases per run: {n}")
    print(f"(a) total wall of kcgate run (median):          {wall:8.3f} s   1.00 x wall")
    print(f"(b) sum of case duration_s (median):            {inside:8.3f} s   {inside / wall:.2f} x wall")
    print(f"(c) startup + orchestration = wall - sum (med): {overhead:8.3f} s   {overhead / wall:.2f} x wall")
    print(f"    per case: inside {inside / n * 1000:.1f} ms, overhead {overhead / n * 1000:.1f} ms")
    print(f"    first case duration_s (warm-up, in (b)):    {first:8.3f} s   {first / wall:.2f} x wall")
    kern = med(r["kernel"] for r in rows)
    orac = med(r["oracle"] for r in rows)
    print(f"    of which inside kernels (kernel_s): {kern:8.3f} s   {kern / wall:.2f} x wall")
    print(f"    of which inside oracles (oracle_s): {orac:8.3f} s   {orac / wall:.2f} x wall")
    rest = inside - kern - orac
    print(
        f"    of which harness work in the case:  {rest:8.3f} s   {rest / wall:.2f} x wall "
        "(inputs, guard bands, comparison, the class check's extra calls and statistics)"
    )
    print(f"python -c pass (median):                        {floor_py:8.3f} s")
    print(
        f"python -c 'import torch' (median, worker floor):{floor_torch:8.3f} s   "
        f"{floor_torch / wall:.2f} x wall, {floor_torch / overhead if overhead > 0 else float('nan'):.2f} "
        f"x overhead"
    )
    print("    (with --isolation process the worker imports torch once per run; the CLI process need not)")


if __name__ == "__main__":
    main()
