"""Freivalds sensitivity, false positives and cost: kcgate's check versus the real reference.

Usage: ``python benchmarks/freivalds_sensitivity.py [--quick] [--sizes 512 1024]``

The reference is ashiba-verify's ``freivalds_verify`` as its author ships it (k = 10 Uniform(−1, 1) vectors
in the input dtype, fixed atol/rtol; ``benchmarks/_reference.py`` imports it, installed or vendored
verbatim). kcgate's is ``freivalds_check`` with its defaults (``protocol.freivalds_vectors`` = 10, the
contract's bound plus the sensitivity test, fp32 accumulation declared).

Configurations: fp32; bf16 inputs with an fp32 output (fp32 accumulation); bf16 inputs and output (the fp32
product rounded to bf16, what torch's bf16 GEMM computes, without its slow CPU path). Where the reference
raises (mixed dtypes) it is reported as such.

* Sensitivity: one element (random position and sign) corrupted by δ; the smallest δ / RMS(C) on a grid
  detected in ≥ 95% of trials (and at every larger grid point).
* Noise: C + 0.001·randn, detection rate.
* False positives: fresh correct products (torch's ``a @ b``), and correct products in another summation
  order (split-K in 4 slices, reversed): failures out of the trials.
* Cost: median seconds of each check at that n against the matmul (benchmarks/freivalds_overhead.py times
  large n).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402
from _reference import load, reference_passes  # noqa: E402

from kcgate.numerics.oracles.freivalds import freivalds_check  # noqa: E402

Product = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
Check = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], "bool | str"]
CONFIGS = ("fp32", "bf16-in fp32-out", "bf16-in bf16-out")
GRID = [10 ** (-6 + i / 4) for i in range(25)]  # 1e-6 .. 1 of RMS(C)


def ours(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> bool | str:
    return freivalds_check(a, b, c, accumulate="float32").passed


CHECKS: dict[str, Check] = {"kcgate": ours, "reference": reference_passes}


def make_product(config: str, n: int, gen: torch.Generator, order: str = "torch") -> Product:
    """Fresh random inputs and a correct product (torch's, or split-K in 4 reversed slices)."""
    a = torch.randn(n, n, generator=gen)
    b = torch.randn(n, n, generator=gen)
    if config != "fp32":
        a, b = a.bfloat16(), b.bfloat16()
    x, y = (a.float(), b.float()) if config != "fp32" else (a, b)  # bf16 GEMMs: fp32 accumulation
    if order == "torch":
        c = x @ y
    else:
        cut = [0, n // 4, n // 2, 3 * n // 4, n]
        parts = [x[:, s:e].float() @ y[s:e].float() for s, e in zip(cut, cut[1:], strict=False)]
        c = sum(reversed(parts), torch.zeros(()))
    return a, b, c.to(torch.bfloat16) if config == "bf16-in bf16-out" else c


def rate(check: Check, prod: Product, delta: float, trials: int, gen: torch.Generator) -> float | str:
    """Detection rate of one corrupted element of size delta, or the reference's exception text."""
    a, b, c = prod
    hits = 0
    for _ in range(trials):
        i, j = (int(v) for v in torch.randint(0, c.shape[0], (2,), generator=gen))
        bad = c.clone()
        bad[i, j] += delta if torch.rand((), generator=gen) < 0.5 else -delta
        got = check(a, b, bad)
        if isinstance(got, str):
            return got
        hits += not got
    return hits / trials


def smallest(check: Check, prod: Product, trials: int, gen: torch.Generator) -> float | str:
    """Smallest δ / RMS(C) on the grid detected in >= 95% of trials, at it and every larger grid point."""
    rms = float(prod[2].double().square().mean().sqrt())
    found: float | str = float("nan")
    for frac in reversed(GRID):
        r = rate(check, prod, frac * rms, trials, gen)
        if isinstance(r, str):
            return r
        if r < 0.95:
            break
        found = frac
    return found


def failures(check: Check, config: str, n: int, trials: int, gen: torch.Generator, order: str) -> str:
    fails = 0
    for _ in range(trials):
        got = check(*make_product(config, n, gen, order))
        if isinstance(got, str):
            return got
        fails += not got
    return f"{fails}/{trials}"


def noise_rate(check: Check, config: str, n: int, trials: int, gen: torch.Generator) -> str:
    hits = 0
    for _ in range(trials):
        a, b, c = make_product(config, n, gen)
        got = check(
            a, b, (c.double() + 0.001 * torch.randn(c.shape, generator=gen, dtype=torch.float64)).to(c.dtype)
        )
        if isinstance(got, str):
            return got
        hits += not got
    return f"{hits}/{trials}"


def cost(check: Check, prod: Product, repeats: int) -> float | str:
    """Median seconds of the check over the median seconds of the matmul, interleaved."""
    a, b, c = prod
    got = check(a, b, c)
    if isinstance(got, str):
        return got
    mm, ck = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        mm.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        check(a, b, c)
        ck.append(time.perf_counter() - t0)
    return statistics.median(ck) / statistics.median(mm)


def fmt(x: float | str, spec: str) -> str:
    return x if isinstance(x, str) else format(x, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 256, fewer trials")
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=CONFIGS)
    args = parser.parse_args()
    sizes = args.sizes or ([256] if args.quick else [512, 1024])
    sweep = 20 if args.quick else 40
    fp = 100 if args.quick else 500
    other = 20 if args.quick else 100
    gen = torch.Generator().manual_seed(2026)
    print(describe())
    print(f"reference: ashiba_verify.freivalds_verify, {load()[1]}")
    print(
        f"trials: sweep {sweep} per δ; false positives {fp} (torch order), {other} (split-K order); noise {other}"
    )
    for n in sizes:
        for config in args.configs:
            prod = make_product(config, n, gen)
            for name, check in CHECKS.items():
                row = {
                    "smallest δ/RMS(C)": fmt(smallest(check, prod, sweep, gen), ".2e"),
                    "C+0.001·randn caught": noise_rate(check, config, n, other, gen),
                    "false pos (torch)": failures(check, config, n, fp, gen, "torch"),
                    "false pos (split-K)": failures(check, config, n, other, gen, "split"),
                    "cost / matmul": fmt(cost(check, prod, 7), ".2%"),
                }
                raised = {v for v in row.values() if v.startswith("raises")}
                text = raised.pop() if raised else "  ".join(f"{k}: {v}" for k, v in row.items())
                print(f"n={n:<5} {config:<17} {name:<9} {text}", flush=True)
    print(
        "\ntargets (issue 17): kcgate detects single-element corruptions at least as small as the reference "
        "in fp32, 0 false positives in 500 trials; C + 0.001·randn fails"
    )


if __name__ == "__main__":
    main()
