"""Benchmark: ``kcgate run --isolation process`` (worker subprocess, the default) vs ``--isolation none``.

Run: ``python benchmarks/isolation_overhead.py [--repeats 3]`` from anywhere (it runs in the repo root).

Both modes run the repo's own contracts.toml with ``--results TMP -q --seed 1``, interleaved in ABBA order
(process, none, none, process, ...) so drift on a shared machine hits both alike. Medians over the repeats;
target: process / none <= 1.3x.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import ROOT, describe, kcgate_cmd  # noqa: E402

from kcgate.results.model import load_run  # noqa: E402

TARGET = 1.3
MODES = ("process", "none")


def run_once(mode: str, out: Path) -> tuple[float, float, int]:
    """(wall, sum of case duration_s, cases) of one ``kcgate run --isolation MODE``."""
    cmd = [*kcgate_cmd(), "run", "--results", str(out), "-q", "--seed", "1", "--isolation", mode]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    cases = load_run(out).cases
    return wall, sum(c.duration_s for c in cases), len(cases)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="runs per mode (>= 3 for a median)")
    args = ap.parse_args()

    print(describe())
    print(f"repo: {ROOT}  command: kcgate run --results TMP -q --seed 1 --isolation {{process|none}}")
    print(f"repeats: {args.repeats} per mode, ABBA-interleaved\n")

    walls: dict[str, list[float]] = {m: [] for m in MODES}
    inside: dict[str, list[float]] = {m: [] for m in MODES}
    n_cases: dict[str, int] = {}
    tmp = Path(tempfile.mkdtemp(prefix="kcgate-bench-"))
    try:
        for i in range(args.repeats):
            order = MODES if i % 2 == 0 else MODES[::-1]
            for mode in order:
                wall, dur, n = run_once(mode, tmp / f"{mode}{i}.json")
                walls[mode].append(wall)
                inside[mode].append(dur)
                n_cases[mode] = n
                print(
                    f"  repeat {i + 1} {mode:<7}: wall {wall:.3f} s, sum(duration_s) {dur:.3f} s", flush=True
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = statistics.median
    p, nn = med(walls["process"]), med(walls["none"])
    paired = med(a / b for a, b in zip(walls["process"], walls["none"]))
    print(f"\ncases per run: process {n_cases['process']}, none {n_cases['none']}")
    print(f"--isolation process (median wall): {p:.3f} s   sum(duration_s) {med(inside['process']):.3f} s")
    print(f"--isolation none    (median wall): {nn:.3f} s   sum(duration_s) {med(inside['none']):.3f} s")
    print(f"difference (process - none):       {p - nn:+.3f} s")
    ovh = {m: med(w - d for w, d in zip(walls[m], inside[m])) for m in MODES}
    print(
        f"outside cases, wall - sum(duration_s) (median; less sensitive to kernel-time noise): "
        f"process {ovh['process']:.3f} s, none {ovh['none']:.3f} s, "
        f"difference {ovh['process'] - ovh['none']:+.3f} s"
    )
    verdict = "within" if p / nn <= TARGET else "OVER"
    print(
        f"ratio process / none: {p / nn:.2f}x (median of paired ratios {paired:.2f}x); "
        f"target <= {TARGET}x: {verdict}"
    )


if __name__ == "__main__":
    main()
