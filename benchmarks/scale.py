"""Benchmark: cost per case and fixed cost of ``kcgate run`` at 40, 400 and 2,000 small cases, side by side
with the same checks written as pytest + ``torch.testing.assert_close``.

Run: ``python benchmarks/scale.py [--sizes 40 400 2000] [--repeats 1]``.

Both sides check the same cases: C-PRC-01 on ``kcgate.builtin_kernels:matmul`` in float32 over small shapes
(M, K, N in 8..64), one case per (shape, seed). kcgate runs each case as its protocol says (2 trials, fresh
inputs, guard bands, NaN-poisoned outputs, the fp64 oracle and the derived bound); the pytest file draws the
inputs once per case, runs the kernel and compares it with an fp64 matmul under assert_close's float32
defaults. Wall times are of whole subprocesses (``kcgate run --isolation process`` and ``python -m pytest``);
the cost per case and the fixed cost are the slope and intercept of a least-squares line through the sizes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe, kcgate_cmd, timed  # noqa: E402

SEEDS = 2  # the class's default protocol.seeds: cases = shapes x seeds


def shapes(n_cases: int) -> list[tuple[int, int, int]]:
    """n_cases / SEEDS distinct small (M, K, N) shapes."""
    out = []
    for i in range(n_cases // SEEDS):
        out.append((8 + i % 57, 8 + (i * 7) % 57, 8 + (i * 13) % 57))
    return out


def contracts_toml(n_cases: int) -> str:
    rows = shapes(n_cases)
    per = 20  # shapes per contract: 40 cases each
    parts = ['[project]\nname = "scale"\n']
    for c in range(0, len(rows), per):
        chunk = ", ".join(f"[{m}, {k}, {n}]" for m, k, n in rows[c : c + per])
        parts.append(
            f'[[contract]]\nid = "mm-{c // per}"\nclass = "C-PRC-01"\nkernel = "kcgate.builtin_kernels:matmul"\n'
            f'op = "matmul"\ndtypes = ["float32"]\naccumulate = "float32"\nshapes = [{chunk}]\n'
        )
    return "\n".join(parts)


def pytest_file(n_cases: int) -> str:
    return f"""import pytest
import torch

from kcgate.builtin_kernels import matmul

CASES = [(s, seed) for s in {shapes(n_cases)!r} for seed in range({SEEDS})]


@pytest.mark.parametrize(("shape", "seed"), CASES)
def test_matmul(shape, seed):
    m, k, n = shape
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g)
    out = matmul(a, b)
    torch.testing.assert_close(out, (a.double() @ b.double()).float())
"""


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and intercept."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def measure(tmp: Path, n: int, repeats: int) -> tuple[float, float]:
    toml, test = tmp / f"c{n}.toml", tmp / f"test_scale_{n}.py"
    toml.write_text(contracts_toml(n))
    test.write_text(pytest_file(n))
    kc, py = [], []
    for i in range(repeats):  # interleaved so load changes hit both sides alike
        out = tmp / f"r{n}-{i}.json"
        kc.append(timed([*kcgate_cmd(), "run", "-c", str(toml), "--out", str(out), "-q", "--seed", "1"]))
        py.append(
            timed(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:kcgate", str(test)]
            )
        )
    return statistics.median(kc), statistics.median(py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[40, 400, 2000])
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    print(describe())
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n in args.sizes:
            kc, py = measure(Path(d), n, args.repeats)
            rows.append((n, kc, py))
            print(
                f"{n:>6} cases: kcgate {kc:7.2f} s ({1e3 * kc / n:6.2f} ms/case)   "
                f"pytest+assert_close {py:7.2f} s ({1e3 * py / n:6.2f} ms/case)   ratio {kc / py:.2f}"
            )
    if len(rows) >= 2:
        ns = [float(r[0]) for r in rows]
        (ks, k0), (ps, p0) = fit(ns, [r[1] for r in rows]), fit(ns, [r[2] for r in rows])
        print(
            f"per case: kcgate {1e3 * ks:.2f} ms, pytest {1e3 * ps:.2f} ms;  fixed: kcgate {k0:.2f} s, pytest {p0:.2f} s"
        )


if __name__ == "__main__":
    main()
