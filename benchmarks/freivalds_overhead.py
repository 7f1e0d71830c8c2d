"""Freivalds overhead against the matmul it verifies: kcgate's check versus the reference method.

Usage: ``python benchmarks/freivalds_overhead.py [--quick]``

For n in 1024, 2048, 4096 (``--quick``: 512, 1024, 2048) and fp32 / bf16 inputs, times side by side, interleaved
in each repeat: the matmul, kcgate's ``freivalds_check`` (its default k = 10, bound and sensitivity tests)
with its fused native kernel ("ours") and with the native kernel disabled ("torch path": a GEMM and a norm
pass per matrix), the real reference (ashiba-verify's ``freivalds_verify`` as shipped, k = 10, imported by
``benchmarks/_reference.py``: installed, or vendored verbatim) and the memory-read floor (``a.sum() + b.sum() + c.sum()``: reading A, B and C once). Prints
medians, the ratios to the matmul, ours / reference, and the log-log slope of time against n.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402
from _reference import load  # noqa: E402

from kcgate.numerics.oracles import native  # noqa: E402
from kcgate.numerics.oracles.freivalds import freivalds_check  # noqa: E402

TARGET_OVERHEAD = 0.02
TARGET_SPEEDUP = 2.5
TARGET_EXPONENT = 2.2


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _torch_path(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> object:
    with native.disabled("benchmark: the torch path"):
        return freivalds_check(a, b, c)


def measure(n: int, dtype: torch.dtype, repeats: int) -> dict[str, float]:
    """Median (and best, as ``<name>_min``) seconds for matmul, ours, reference and the read floor."""
    gen = torch.Generator().manual_seed(n)
    a = torch.randn(n, n, generator=gen).to(dtype)
    b = torch.randn(n, n, generator=gen).to(dtype)
    c = a @ b
    reference_freivalds = load()[0]
    cases: dict[str, Callable[[], object]] = {
        "matmul": lambda: a @ b,
        "ours": lambda: freivalds_check(a, b, c),
        "ours_k2": lambda: freivalds_check(a, b, c, k=2, excess=0.0),  # the earlier default: bound test only
        "torch_path": lambda: _torch_path(a, b, c),
        "reference": lambda: reference_freivalds(a, b, c),
        "floor": lambda: a.sum() + b.sum() + c.sum(),
    }
    for fn in cases.values():  # warm-up
        fn()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            samples[name].append(_time(fn))
    medians = {name: statistics.median(times) for name, times in samples.items()}
    paired = {  # each repeat's check over the matmul timed just before it: robust to the machine drifting
        f"{name}_paired": statistics.median(
            t / m for t, m in zip(samples[name], samples["matmul"], strict=True)
        )
        for name in ("ours", "reference")
    }
    return medians | paired | {f"{name}_min": min(times) for name, times in samples.items()}


def slope(sizes: list[int], times: list[float]) -> float:
    """Least-squares slope of log(time) against log(n)."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(t) for t in times]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def report_dtype(dtype: torch.dtype, sizes: list[int], repeats: int) -> dict[int, dict[str, float]]:
    """Measure and print one dtype's table; returns the medians per size."""
    print(f"\n== {str(dtype).removeprefix('torch.')} (medians of {repeats}, interleaved) ==")
    print(
        f"{'n':>6} {'matmul s':>9} {'ours':>8} {'k=2':>7} {'torch path':>11} {'reference':>10} {'floor':>8} {'ours/ref':>9}"
        "   best-of: ours ref"
    )
    rows: dict[int, dict[str, float]] = {}
    for n in sizes:
        t = measure(n, dtype, repeats)
        rows[n] = t
        mm = t["matmul"]
        print(
            f"{n:>6} {mm:>9.4f} {100 * t['ours'] / mm:>7.2f}% {100 * t['ours_k2'] / mm:>6.2f}% "
            f"{100 * t['torch_path'] / mm:>10.2f}% "
            f"{100 * t['reference'] / mm:>9.2f}% "
            f"{100 * t['floor'] / mm:>7.2f}% {t['ours'] / t['reference']:>9.2f}"
            f"   {100 * t['ours_min'] / t['matmul_min']:>6.2f}% {100 * t['reference_min'] / t['matmul_min']:.2f}%",
            flush=True,
        )
    if len(set(sizes)) < 2:
        print("exponent of time vs n: needs two sizes or more")
        return rows
    ours_exp = slope(sizes, [rows[n]["ours"] for n in sizes])
    mm_exp = slope(sizes, [rows[n]["matmul"] for n in sizes])
    ref_exp = slope(sizes, [rows[n]["reference"] for n in sizes])
    print(f"exponent of time vs n: ours {ours_exp:.2f}, reference {ref_exp:.2f}, matmul {mm_exp:.2f}")
    return rows


def verdicts(rows: dict[int, dict[str, float]]) -> None:
    """Compare the largest fp32 size with the targets and say what limits them."""
    n = max(rows)
    t = rows[n]
    overhead = t["ours"] / t["matmul"]
    speedup = t["reference"] / t["ours"]
    floor = t["floor"] / t["matmul"]
    print(
        f"\nfp32 n={n}: overhead {100 * overhead:.2f}% (target <= {100 * TARGET_OVERHEAD:.0f}%): "
        f"{'met' if overhead <= TARGET_OVERHEAD else 'NOT met'}; median of per-repeat ratios: ours "
        f"{100 * t['ours_paired']:.2f}%, reference {100 * t['reference_paired']:.2f}%"
    )
    print(
        f"fp32 n={n}: reference/ours {speedup:.2f}x (target >= {TARGET_SPEEDUP}x): "
        f"{'met' if speedup >= TARGET_SPEEDUP else 'NOT met'}"
    )
    print(
        f"fp32 n={n}: read-once floor {100 * floor:.2f}% of the matmul; ours = {overhead / floor:.1f}x floor"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    parser.add_argument(
        "--sizes", type=int, nargs="*", default=None, help="override the sizes (>= 2 of them)"
    )
    parser.add_argument(
        "--fp32-only", action="store_true", help="skip bf16 (slow on CPUs without bf16 GEMMs)"
    )
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    sizes = args.sizes or ([512, 1024, 2048] if args.quick else [1024, 2048, 4096])
    repeats = args.repeats or (3 if args.quick else 9)
    print(describe())
    print(f"native kernel: {native.status().detail}")
    print(f"reference: ashiba_verify.freivalds_verify, {load()[1]}")
    fp32 = report_dtype(torch.float32, sizes, repeats)
    if not args.fp32_only:
        report_dtype(torch.bfloat16, sizes, repeats)
    verdicts(fp32)


if __name__ == "__main__":
    main()
