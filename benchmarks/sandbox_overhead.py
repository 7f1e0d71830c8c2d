"""Benchmark: the kernel in a sandbox process (the default) vs in the judge's own worker (KCGATE_SANDBOX=0).

Run: ``python benchmarks/sandbox_overhead.py [--repeats 3] [--production]`` from anywhere.

One contracts file of torch's own kernels (kcgate.kernels.builtin), at small shapes and, with ``--production``,
at production shapes (rms_norm 256x4096 forward and backward, matmul 1024^3): ``kcgate run --seed 1`` with each
setting, interleaved ABBA so drift on a shared machine hits both alike. Per case: the median ``duration_s``
(the judge's time for the case, the crossing included) with and without the sandbox, side by side, and the
median over the run of the ratio. What the sandbox adds per case is a fork, the kernel's import in the child,
and each call's arguments and outputs copied through the memfd arenas.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import ROOT, describe, kcgate_cmd  # noqa: E402

from kcgate.results.model import load_run  # noqa: E402

SMALL = [
    ("softmax", "softmax", "C-PRC-01", [[8, 64]], ""),
    ("rmsnorm", "rmsnorm", "C-PRC-01", [[4, 64]], ""),
    ("rmsnorm-bwd", "rmsnorm", "C-PRC-01", [[4, 64]], 'direction = "both"'),
    ("matmul", "matmul", "C-PRC-01", [[64, 64, 64]], ""),
]
PRODUCTION = [
    ("rmsnorm-256x4096", "rmsnorm", "C-PRC-01", [[256, 4096]], ""),
    ("rmsnorm-256x4096-bwd", "rmsnorm", "C-PRC-01", [[256, 4096]], 'direction = "both"'),
    ("matmul-1024", "matmul", "C-PRC-01", [[1024, 1024, 1024]], ""),
]
SETTINGS = {"sandbox": "1", "in-process": "0"}


def contracts(rows: list[tuple[str, str, str, list[list[int]], str]]) -> str:
    out = []
    for cid, op, klass, shapes, extra in rows:
        out.append(
            f'[[contract]]\nid = "{cid}"\nclass = "{klass}"\nkernel = "kcgate.kernels.builtin:{op}"\n'
            f'op = "{op}"\ndtypes = ["float32"]\nshapes = {shapes}\n{extra}\n'
            "protocol = { seeds = 2, trials = 2, boundary = false, timeout_s = 600 }\n"
        )
    return "\n".join(out)


def run_once(toml: Path, setting: str, out: Path) -> dict[str, float]:
    cmd = [
        *kcgate_cmd(),
        "run",
        "-c",
        str(toml),
        "--results",
        str(out),
        "-q",
        "--seed",
        "1",
        "--shrink-s",
        "0",
    ]
    env = {**os.environ, "KCGATE_SANDBOX": SETTINGS[setting]}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return {c.case_id: c.duration_s for c in load_run(out).cases}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--production", action="store_true", help="add the production shapes")
    args = ap.parse_args()
    print(describe())
    tmp = Path(tempfile.mkdtemp(prefix="kcgate-sandbox-"))
    toml = tmp / "contracts.toml"
    toml.write_text(contracts(SMALL + (PRODUCTION if args.production else [])))
    times: dict[str, dict[str, list[float]]] = {s: {} for s in SETTINGS}
    try:
        for i in range(args.repeats):
            for setting in SETTINGS if i % 2 == 0 else list(SETTINGS)[::-1]:
                for case, t in run_once(toml, setting, tmp / f"{setting}{i}.json").items():
                    times[setting].setdefault(case, []).append(t)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"command: kcgate run --seed 1 --shrink-s 0 (KCGATE_SANDBOX=1|0), {args.repeats} repeats, ABBA\n")
    print(f"{'case':40s} {'sandbox ms':>11s} {'in-process ms':>14s} {'added ms':>9s} {'ratio':>6s}")
    ratios = []
    for case in sorted(times["sandbox"]):
        a, b = (statistics.median(times[s][case]) * 1e3 for s in SETTINGS)
        ratios.append(a / b)
        print(f"{case:40s} {a:11.1f} {b:14.1f} {a - b:9.1f} {a / b:6.2f}")
    print(f"\nmedian ratio sandbox / in-process per case: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
