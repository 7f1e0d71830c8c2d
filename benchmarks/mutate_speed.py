"""Benchmark: how many mutants ``kcgate mutate`` runs a minute, cold (no cache) and warm (all cached).

Run: ``python benchmarks/mutate_speed.py [--repeats 2] [contracts.toml ...]`` (default: the repository's own
contracts.toml and examples/mutation/contracts.toml). Each repeat runs ``kcgate mutate --no-advice`` in a
subprocess with a fresh cache directory (cold: every mutant runs in the worker, the worker's start and the
unmutated kernels' runs included), then again on that cache (warm). Mutants per minute = mutants run / wall
time; the medians over the repeats are printed with the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import ROOT, describe, kcgate_cmd  # noqa: E402

DEFAULT = ("contracts.toml", "examples/mutation/contracts.toml")


def run_once(contracts: list[str], cache: Path, out: Path) -> tuple[float, dict[str, int], int]:
    """(wall seconds, outcome counts, mutants served from the cache) of one ``kcgate mutate``."""
    files = [arg for c in contracts for arg in ("-c", c)]
    cmd = [
        *kcgate_cmd(),
        "mutate",
        *files,
        "--no-advice",
        "--cache",
        str(cache),
        "--format",
        "json",
        "--output",
        str(out),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    doc = json.loads(out.read_text())
    cached = sum(1 for c in doc["contracts"] for m in c["mutants"] if m["cached"])
    return wall, doc["counts"], cached


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("contracts", nargs="*", default=list(DEFAULT), help="contracts files (repo-relative)")
    ap.add_argument("--repeats", type=int, default=2, help="cold + warm runs, each with a fresh cache")
    args = ap.parse_args()

    print(describe())
    print(
        f"repo: {ROOT}  command: kcgate mutate {' '.join(args.contracts)} --no-advice --cache TMP --json TMP"
    )
    print(f"repeats: {args.repeats}\n")
    cold, warm = [], []
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="kcgate-bench-") as tmp:
        for i in range(args.repeats):
            cache, out = Path(tmp) / f"cache{i}", Path(tmp) / f"m{i}.json"
            wall, counts, cached = run_once(args.contracts, cache, out)
            ran = sum(v for k, v in counts.items() if k != "not-run")
            cold.append((wall, ran))
            wall_w, _, cached_w = run_once(args.contracts, cache, out)
            warm.append((wall_w, cached_w))
            print(
                f"repeat {i}: cold {wall:.1f} s for {ran} mutants ({cached} cached); warm {wall_w:.1f} s ({cached_w} cached)"
            )
    wall = statistics.median(w for w, _ in cold)
    ran = cold[0][1]
    print(f"\noutcomes: {json.dumps(counts, sort_keys=True)}")
    print(
        f"cold: median {wall:.1f} s for {ran} mutants = {60 * ran / wall:.0f} mutants/min (worker start included)"
    )
    print(f"warm: median {statistics.median(w for w, _ in warm):.1f} s (all from the cache)")


if __name__ == "__main__":
    main()
