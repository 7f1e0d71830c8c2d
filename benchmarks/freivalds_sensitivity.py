"""Freivalds sensitivity and false positives: kcgate's check versus the reference method.

Usage: ``python benchmarks/freivalds_sensitivity.py [--quick]``

Three configurations: fp32; bf16 inputs with fp32 accumulation and an fp32 output; bf16 inputs with fp32
accumulation and a bf16 output (what ``a @ b`` returns for bf16 tensors).

* Sensitivity: one element (random position, random sign) is corrupted by δ, swept as a fraction of max|C|;
  the smallest δ detected in ≥ 95% of trials is reported for ours and for the reference.
* False positives: fresh correct products, ≥ 500 trials per configuration, both methods.
* Contract edge: a product carrying the largest error the contract allows (|E_ij| = β_ij, random signs);
  a check that is consistent with the contract must pass it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402

from kcgate.oracles.freivalds import (  # noqa: E402
    DEFAULT_LAMBDA,
    FreivaldsResult,
    freivalds_check,
    reference_freivalds,
    unit_roundoff,
)

Product = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
Checker = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], FreivaldsResult]
CONFIGS = ("fp32", "bf16-in fp32-out", "bf16-in bf16-out")
GRID = [10 ** (-7 + i / 4) for i in range(29)]  # 1e-7 .. 1 of max|C|
TARGET_FACTOR = 10.0


def make_product(config: str, n: int, gen: torch.Generator) -> Product:
    """Fresh random inputs and the correct product for a configuration."""
    a = torch.randn(n, n, generator=gen)
    b = torch.randn(n, n, generator=gen)
    if config == "fp32":
        return a, b, a @ b
    a, b = a.bfloat16(), b.bfloat16()
    if config == "bf16-in fp32-out":
        return a, b, a.float() @ b.float()  # exact bf16 products, fp32 accumulation and output
    return a, b, a @ b


def checkers() -> dict[str, Checker]:
    return {
        "ours": lambda a, b, c: freivalds_check(a, b, c, accumulate="float32"),
        "reference": lambda a, b, c: reference_freivalds(a, b, c),
    }


def detection_rate(check: Checker, prod: Product, delta: float, trials: int, gen: torch.Generator) -> float:
    a, b, c = prod
    hits = 0
    for _ in range(trials):
        i, j = (int(x) for x in torch.randint(0, c.shape[0], (2,), generator=gen))
        sign = 1.0 if torch.rand((), generator=gen) < 0.5 else -1.0
        bad = c.clone()
        bad[i, j] += sign * delta
        hits += not check(a, b, bad).passed
    return hits / trials


def smallest_detected(check: Checker, prod: Product, trials: int, gen: torch.Generator) -> float:
    """Smallest δ / max|C| on the grid with a detection rate ≥ 95% (and at all larger grid points)."""
    scale = float(prod[2].abs().max())
    found = float("nan")
    for frac in reversed(GRID):
        if detection_rate(check, prod, frac * scale, trials, gen) < 0.95:
            break
        found = frac
    return found


def false_positives(config: str, n: int, trials: int, gen: torch.Generator) -> dict[str, int]:
    counts = dict.fromkeys(checkers(), 0)
    for _ in range(trials):
        prod = make_product(config, n, gen)
        for name, check in checkers().items():
            counts[name] += not check(*prod).passed
    return counts


def contract_edge(config: str, n: int, trials: int, gen: torch.Generator) -> dict[str, int]:
    """Failures on products whose error sits exactly at the contract's elementwise bound β."""
    counts = dict.fromkeys(checkers(), 0)
    for _ in range(trials):
        a, b, c = make_product(config, n, gen)
        a64, b64 = a.double(), b.double()
        exact = a64 @ b64
        beta = DEFAULT_LAMBDA * n**0.5 * unit_roundoff("float32") * (a64.abs() @ b64.abs())
        beta += unit_roundoff(c.dtype) * exact.abs()
        signs = torch.randint(0, 2, exact.shape, generator=gen).double() * 2 - 1
        edge = (exact + 0.99 * beta * signs).to(c.dtype)
        for name, check in checkers().items():
            counts[name] += not check(a, b, edge).passed
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 256, fewer trials")
    args = parser.parse_args()
    n = 256 if args.quick else 512
    sweep_trials = 20 if args.quick else 40
    fp_trials = 100 if args.quick else 500
    edge_trials = 20 if args.quick else 100
    gen = torch.Generator().manual_seed(2026)
    print(describe())
    print(
        f"\nn = {n}; sweep {sweep_trials} trials per δ; false positives {fp_trials} trials; "
        f"contract edge {edge_trials} trials"
    )
    print(
        f"{'config':<18} {'ours δ/max|C|':>14} {'ref δ/max|C|':>13} {'ref/ours':>9} "
        f"{'FP ours':>8} {'FP ref':>7} {'edge fail ours':>15} {'edge fail ref':>14}"
    )
    for config in CONFIGS:
        prod = make_product(config, n, gen)
        ours = smallest_detected(checkers()["ours"], prod, sweep_trials, gen)
        ref = smallest_detected(checkers()["reference"], prod, sweep_trials, gen)
        fps = false_positives(config, n, fp_trials, gen)
        edge = contract_edge(config, n, edge_trials, gen)
        print(
            f"{config:<18} {ours:>14.2e} {ref:>13.2e} {ref / ours:>9.1f} {fps['ours']:>4}/{fp_trials} "
            f"{fps['reference']:>3}/{fp_trials} {edge['ours']:>11}/{edge_trials} "
            f"{edge['reference']:>10}/{edge_trials}",
            flush=True,
        )
    print(
        f"\ntarget: ours detects corruptions >= {TARGET_FACTOR:.0f}x smaller than the reference, "
        f"with 0 false positives"
    )


if __name__ == "__main__":
    main()
