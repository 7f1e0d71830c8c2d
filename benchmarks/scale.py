"""Benchmark: cost per case and fixed cost of ``kcgate run`` at 40, 400 and 2,000 small cases, side by side
with the same checks written as pytest + ``torch.testing.assert_close``.

Run: ``python benchmarks/scale.py [--sizes 40 400 2000] [--repeats 1] [--workers N]``. ``kcgate`` is
``kcgate run`` as it ships (``--workers auto``: on the CPU one worker per 250 cases, up to one per CPU, started together),
``kcgate --workers 1`` the same on one worker. With ``--workers N`` it also times ``kcgate run --workers N``
against ``pytest -n N`` (pytest-xdist): parallel against parallel.

Both sides check the same cases: C-PRC-01 on ``kcgate.kernels.builtin:matmul`` in float32 over small shapes
(M, K, N in 8..64), one case per (shape, seed). kcgate runs each case as its protocol says (2 trials, fresh
inputs, guard bands, NaN-poisoned outputs, the fp64 oracle and the derived bound); the pytest file draws the
inputs once per case, runs the kernel and compares it with an fp64 matmul under assert_close's float32
defaults. Wall times are of whole subprocesses (``kcgate run --isolation process`` and ``python -m pytest``);
the cost per case and the fixed cost are the slope and intercept of a least-squares line through the sizes.
With three sizes or more it also prints the cost per case between the two largest: ``kcgate run`` adds a
worker per 250 cases, so on two CPUs the line through 40, 400 and 2,000 spans one worker and two.
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
            f'[[contract]]\nid = "mm-{c // per}"\nclass = "C-PRC-01"\nkernel = "kcgate.kernels.builtin:matmul"\n'
            f'op = "matmul"\ndtypes = ["float32"]\naccumulate = "float32"\nshapes = [{chunk}]\n'
        )
    return "\n".join(parts)


def pytest_file(n_cases: int) -> str:
    return f"""import pytest
import torch

from kcgate.kernels.builtin import matmul

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


def sides(workers: int) -> list[str]:
    """What is timed: kcgate as it ships, kcgate on one worker and pytest, and with ``workers`` > 1 also
    kcgate --workers N and pytest -n N."""
    return ["kcgate", "kcgate --workers 1", "pytest"] + (
        [f"kcgate --workers {workers}", f"pytest -n {workers}"] if workers > 1 else []
    )


def command(side: str, toml: Path, test: Path, out: Path) -> list[str]:
    if side.startswith("kcgate"):
        return [
            *kcgate_cmd(),
            "run",
            "-c",
            str(toml),
            "--results",
            str(out),
            "-q",
            "--seed",
            "1",
            *side.split()[1:],
        ]
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:kcgate"]
    return [*pytest, *side.split()[1:], str(test)]


def measure(tmp: Path, n: int, repeats: int, names: list[str]) -> dict[str, float]:
    """Median wall time of each side at ``n`` cases, the sides interleaved so load changes hit all alike, and
    their order rotated each repeat (the first command after writing the files, or after another side's
    5 s of pytest, ran up to 0.5 s slower at 40 cases)."""
    toml, test = tmp / f"c{n}.toml", tmp / f"test_scale_{n}.py"
    toml.write_text(contracts_toml(n))
    test.write_text(pytest_file(n))
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(timed(command(name, toml, test, tmp / f"r{n}-{i}.json")))
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[40, 400, 2000])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="also time kcgate --workers N against pytest -n N (pytest-xdist)",
    )
    args = ap.parse_args()
    print(describe())
    names = sides(args.workers)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n in args.sizes:
            t = measure(Path(d), n, args.repeats, names)
            rows.append((n, t))
            cells = "   ".join(
                f"{name} {t[name]:7.2f} s ({1e3 * t[name] / n:6.2f} ms/case)" for name in names
            )
            print(f"{n:>6} cases: {cells}   ratio {t['kcgate'] / t['pytest']:.2f}")
    if len(rows) >= 2:
        ns = [float(r[0]) for r in rows]
        for name in names:
            slope, fixed = fit(ns, [r[1][name] for r in rows])
            print(f"per case: {name:<20} {1e3 * slope:6.2f} ms   fixed {fixed:5.2f} s")
    # The fit spans auto's switch to more workers; this is the cost where the plan is large.
    if len(rows) >= 3:
        (n1, t1), (n2, t2) = rows[-2:]
        for name in names:
            marginal = (t2[name] - t1[name]) / (n2 - n1)
            print(f"per case from {n1} to {n2} cases: {name:<20} {1e3 * marginal:6.2f} ms")


if __name__ == "__main__":
    main()
