"""The placement check (kcgate.engine.placement) on kernels that make a reference's rounding mistake in another
reduction order, and on correct kernels in those orders (tests/testing/kernels/placement_orders.py, issue 54).

Per cell (op x kernel x dtype x seed): kcgate run's two trials (the seed's inputs and a second draw) go to
``misplaced`` as kcgate run hands them over. A wrong kernel is caught where a mutant is named, named right
where it is the row's change at the row's line (or, counted apart, the second name accepted after the first
run); a correct kernel named is a false alarm. ``--bound`` also
derives each cell's bound (as benchmarks/custom_ops.py does) and counts the wrong cells it passes: the cells
where only the placement check can catch the mistake. The issue's two attacks (rms_norm in blocks of 64; the
mutant, every other element 1 ulp off) are the thresholds' development pair and are counted apart.

    python -m benchmarks.placement_orders [--seeds 2] [--dtypes bfloat16,float16] [--bound]
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._machine import describe  # noqa: E402
from kcgate.engine.placement import Run, floats, misplaced  # noqa: E402
from kcgate.numerics.derived import in_fp64  # noqa: E402
from kcgate.numerics.ops.base import upcast  # noqa: E402
from tests.testing.kernels.placement_orders import PLACED, Placed, Wrong  # noqa: E402

SECOND = 7919  # the second trial's seed offset, as benchmarks/custom_ops.py draws it


def runs(p: Placed, kernel: Any, dtype: torch.dtype, seed: int) -> list[Run]:
    """kcgate run's two trials of one cell: inputs, the kernel's float outputs, the fp64 oracle's."""
    out = []
    for s in (seed, seed + SECOND):
        x = p.make(s, dtype)
        refs = tuple(floats(in_fp64(p.reference, upcast(x))))
        out.append(Run(x, tuple(floats(kernel(*[t.clone() for t in x]))), refs))
    return out


def expected(p: Placed, w: Wrong, dtype: torch.dtype) -> list[tuple[str, int]]:
    """The change and line a wrong kernel must be named by, then the one accepted after the first run."""
    lines, first = inspect.getsourcelines(p.reference)
    dt = str(dtype).removeprefix("torch.")
    marks = [(w.change, w.mark), *([w.also] if w.also else [])]
    return [
        (c.format(dtype=dt), first + next(i for i, t in enumerate(lines) if f"MARK {m}" in t))
        for c, m in marks
    ]


def within_bound(p: Placed, kernel: Any, dtype: torch.dtype, seed: int) -> bool:
    """Whether the derived bound passes the kernel on the cell's first trial (benchmarks/custom_ops.Case)."""
    from benchmarks.custom_ops import Case
    from benchmarks.custom_ops_kernels import Entry

    x = p.make(seed, dtype)
    e = Entry(p.name, "", lambda *a: x, p.reference, backward=False)
    return Case(e, dtype, tuple(x[0].shape), seed, False, x=x).judge(kernel)[0] <= 1


def main(argv: list[str] | None = None) -> dict[str, Any]:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--seeds", type=int, default=2)
    a.add_argument("--dtypes", default="bfloat16,float16")
    a.add_argument("--bound", action="store_true", help="also count the wrong cells the derived bound passes")
    args = a.parse_args(argv)
    print(describe())
    stats: dict[str, Any] = {"rows": [], "alarms": [], "ms": [], "correct": 0}
    for p in PLACED:
        for dt in (getattr(torch, d) for d in args.dtypes.split(",")):
            for seed in range(args.seeds):
                _cell(p, dt, seed, args.bound, stats)
    _print(stats)
    return stats


def _named(
    p: Placed, kernel: Any, dt: torch.dtype, seed: int, stats: dict[str, Any]
) -> tuple[str, int] | None:
    rs = runs(p, kernel, dt, seed)
    t0 = time.perf_counter()
    found = misplaced(p.reference, rs, dt)
    stats["ms"].append(1000 * (time.perf_counter() - t0))
    return None if found is None else (found.mutant.change, found.mutant.line)


def _cell(p: Placed, dt: torch.dtype, seed: int, bound: bool, stats: dict[str, Any]) -> None:
    cell = f"{p.name}/{str(dt)[6:]}/s{seed}"
    for k in p.correct:
        stats["correct"] += 1
        if (got := _named(p, k, dt, seed, stats)) is not None:
            stats["alarms"].append(f"{cell} {k.__name__}: {got[0]}, line {got[1]}")
    for name, w in p.wrong.items():
        got = _named(p, w.kernel, dt, seed, stats)
        inside = within_bound(p, w.kernel, dt, seed) if bound else None
        want = expected(p, w, dt)
        stats["rows"].append(
            (f"{p.name}: {name}", w.dev, got is not None, got == want[0], inside, got in want)
        )
        if got is not None and got != want[0]:
            print(f"  {cell} {name}: named {got}, expected {want[0]}", flush=True)


def _print(stats: dict[str, Any]) -> None:
    print(f"\n{'wrong kernel (16-bit cells)':62s} {'cells':>5s} {'caught':>6s} {'right':>5s} {'also':>5s} "
          f"{'in bound':>8s}")  # fmt: skip
    names = dict.fromkeys(r[0] for r in stats["rows"])
    for n in names:
        rs = [r for r in stats["rows"] if r[0] == n]
        inside = "" if rs[0][4] is None else str(sum(bool(r[4]) for r in rs))
        tag = " (dev)" if rs[0][1] else ""
        also = sum(r[5] and not r[3] for r in rs)
        print(f"{n + tag:62s} {len(rs):5d} {sum(r[2] for r in rs):6d} {sum(r[3] for r in rs):5d} {also:5d} "
              f"{inside:>8s}")  # fmt: skip
    for dev, label in ((True, "development pair"), (False, "held out")):
        rs = [r for r in stats["rows"] if r[1] == dev]
        inside = [r for r in rs if r[4]]
        also = (
            f"; of the {len(inside)} inside the bound: {sum(r[2] for r in inside)}"
            if rs and rs[0][4] is not None
            else ""
        )
        print(f"{label}: {sum(r[2] for r in rs)} of {len(rs)} caught, {sum(r[3] for r in rs)} named right "
              f"({sum(r[5] for r in rs)} with the names accepted after the first run){also}")  # fmt: skip
    print(f"correct kernels: {stats['correct']} cells, {len(stats['alarms'])} named (false alarms)")
    for line in stats["alarms"]:
        print("  false alarm:", line)
    ms = sorted(stats["ms"])
    print(f"placement check per kernel and cell: median {statistics.median(ms):.1f} ms, max {ms[-1]:.0f} ms")


if __name__ == "__main__":
    main()
