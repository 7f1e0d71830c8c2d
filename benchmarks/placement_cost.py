"""The placement check's cost and verdicts against an earlier revision's, side by side on the same trials: every
16-bit cell of benchmarks/custom_ops.py (21 ops, declared and boundary shapes, library, fused and wrong kernels,
with ``kcgate mutate``'s planted variants) and the held-out orders of benchmarks/placement_orders.py.

Per kernel and cell, kcgate run's two trials are built once; then the earlier revision's ``misplaced`` (its
kcgate/engine/placement.py, read with ``git show REV:...`` and run beside this tree's modules) and this tree's
run in the order A B B A, each timed, so that the machine's load falls on both alike. Printed: each side's
median, p90, max and total per kernel and cell, their ratio, and where the two name different things.

    python -m benchmarks.placement_cost --rev 0cf2a0d [--seeds 2] [--no-mutants]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks import custom_ops as C  # noqa: E402
from benchmarks import placement_orders as O  # noqa: E402
from benchmarks._machine import describe  # noqa: E402
from benchmarks.custom_ops_kernels import ENTRIES  # noqa: E402
from kcgate.engine import placement as new  # noqa: E402
from tests.testing.kernels.placement_orders import PLACED  # noqa: E402

Cell = tuple[str, str, Callable[..., Any], list[Any], torch.dtype]  # (kind, name, reference, runs, dtype)


def earlier(rev: str) -> types.ModuleType:
    """kcgate/engine/placement.py as of ``rev``, as a module of its own beside this tree's."""
    text = subprocess.run(
        ["git", "show", f"{rev}:kcgate/engine/placement.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType("placement_at_rev")
    sys.modules[module.__name__] = module  # its dataclasses look their module up
    exec(compile(text, f"placement.py@{rev}", "exec"), module.__dict__)  # noqa: S102 — this repository's own file
    return module


def custom_cells(seeds: int, mutants: bool) -> Iterator[Cell]:
    for e in ENTRIES:
        e = C.with_mutants(e) if mutants else e
        for dt in (torch.bfloat16, torch.float16):
            for shape in C._shapes(e, False, True, {}):
                for seed in range(seeds):
                    x = e.inputs(shape, dt, torch.Generator().manual_seed(seed))
                    x2 = e.inputs(shape, dt, torch.Generator().manual_seed(seed + C.SECOND))
                    for kname, k in (("library", e.kernel), ("fused", e.fused), *e.wrong.items()):
                        if k is None:
                            continue
                        try:
                            runs = [_run(e.kernel, k, xi) for xi in (x, x2)]
                        except Exception:  # noqa: BLE001 — a planted mutant that raises: no placement verdict
                            continue
                        kind = "correct" if kname in ("library", "fused") else "wrong"
                        yield (
                            kind,
                            f"{e.name}/{str(dt)[6:]}/{list(shape)}/s{seed} {kname}",
                            e.kernel,
                            runs,
                            dt,
                        )


def _run(reference: Callable[..., Any], k: Callable[..., Any], x: tuple[torch.Tensor, ...]) -> Any:
    refs = tuple(new.floats(C.in_fp64(reference, C.upcast(x))))
    return new.Run(x, tuple(new.floats(k(*[t.clone() for t in x]))), refs)


def order_cells(seeds: int) -> Iterator[Cell]:
    for p in PLACED:
        for dt in (torch.bfloat16, torch.float16):
            for seed in range(seeds):
                for k in p.correct:
                    runs = O.runs(p, k, dt, seed)
                    yield (
                        "correct",
                        f"orders {p.name}/{str(dt)[6:]}/s{seed} {k.__name__}",
                        p.reference,
                        runs,
                        dt,
                    )
                for name, w in p.wrong.items():
                    runs = O.runs(p, w.kernel, dt, seed)
                    yield "wrong", f"orders {p.name}/{str(dt)[6:]}/s{seed} {name}", p.reference, runs, dt


def _timed(fn: Callable[..., Any], cell: Cell) -> tuple[float, str]:
    _, _, ref, runs, dt = cell
    t0 = time.perf_counter()
    try:
        found = fn(ref, runs, dt)
    except Exception as exc:  # noqa: BLE001 — counted, never fatal: a side that raises names nothing
        return 1000 * (time.perf_counter() - t0), f"raised {type(exc).__name__}"
    took = 1000 * (time.perf_counter() - t0)
    return took, "" if found is None else f"{found.mutant.change}, line {found.mutant.line}"


def main(argv: list[str] | None = None) -> None:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--rev", required=True, help="the earlier revision (a git commit of this repository)")
    a.add_argument("--seeds", type=int, default=2)
    a.add_argument("--no-mutants", action="store_true", help="without kcgate mutate's planted variants")
    args = a.parse_args(argv)
    old = earlier(args.rev)
    print(describe(), f"\nearlier: {args.rev}", flush=True)
    ms: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    named = {"old": {"correct": 0, "wrong": 0}, "new": {"correct": 0, "wrong": 0}}
    cells = {"correct": 0, "wrong": 0}
    diffs = []
    for cell in (*custom_cells(args.seeds, not args.no_mutants), *order_cells(args.seeds)):
        kind, name = cell[0], cell[1]
        a1, said_old = _timed(old.misplaced, cell)
        b1, said_new = _timed(new.misplaced, cell)
        b2, _ = _timed(new.misplaced, cell)
        a2, _ = _timed(old.misplaced, cell)
        ms["old"].setdefault(kind, []).append((a1 + a2) / 2)
        ms["new"].setdefault(kind, []).append((b1 + b2) / 2)
        cells[kind] += 1
        named["old"][kind] += bool(said_old)
        named["new"][kind] += bool(said_new)
        if said_old != said_new:
            diffs.append(f"{kind} {name}: before {said_old or '-'} | now {said_new or '-'}")
    _print(ms, named, cells, diffs)


def _stats(xs: list[float]) -> str:
    xs = sorted(xs)
    return (
        f"median {statistics.median(xs):.2f} ms, p90 {xs[int(0.9 * (len(xs) - 1))]:.1f} ms, max {xs[-1]:.0f} ms, "
        f"total {sum(xs) / 1000:.1f} s"
    )


def _print(ms: dict[str, Any], named: dict[str, Any], cells: dict[str, int], diffs: list[str]) -> None:
    for kind in ("correct", "wrong"):
        print(
            f"\n{kind} kernels: {cells[kind]} cells; named before {named['old'][kind]}, now {named['new'][kind]}"
        )
        for side, label in (("old", "before"), ("new", "now")):
            print(f"  {label}: {_stats(ms[side].get(kind, [0.0]))}")
        o, n = ms["old"].get(kind, [0.0]), ms["new"].get(kind, [0.0])
        print(f"  now / before: median {statistics.median(n) / max(statistics.median(o), 1e-9):.2f}, total "
              f"{sum(n) / max(sum(o), 1e-9):.2f}")  # fmt: skip
    print(f"\ncells named differently: {len(diffs)}")
    for line in diffs:
        print("  " + line)


if __name__ == "__main__":
    main()
