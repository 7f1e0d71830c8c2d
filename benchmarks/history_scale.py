"""Benchmark: the history store at 10,000 commits x 200 contracts x 10 runners (one case per contract:
20 million case rows), synthesized. Prints medians of: adding one run (kcgate history add's path) to the
full store, re-adding it (a no-op), and the queries kcgate history and the dashboard make.

Run: ``python benchmarks/history_scale.py [--commits 10000] [--contracts 200] [--runners 10] [--repeats 9]``.
The store is filled with the store's own SQL in large transactions (the timed adds go through
``add_run``). No torch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kcgate.history.records import CaseEntry, RunEntry
from kcgate.history.store import STATUS_CODE, add_run, intern, open_store, sortable
from kcgate.history.view import load_view
from kcgate.render.dashboard import render_site
from kcgate.render.history_text import render_history_console

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402


def run_entry(commit: int, runner: int, contracts: int) -> RunEntry:
    cases = tuple(
        CaseEntry(f"c{k:03d}/float32/64x64/s0", f"c{k:03d}", "pass", 0.1 + 0.001 * ((commit + k) % 50),
                  2.0, 1e-6, 1e-6 * (1 + runner % 3), "", "")
        for k in range(contracts)
    )  # fmt: skip
    return RunEntry(
        f"{commit:040x}", _time(commit), f"runner-{runner:02d}", "fp" + str(runner), "cpu", "", None, cases
    )


def _time(commit: int) -> str:
    day, rest = divmod(commit, 24 * 60)
    return f"2026-{1 + day // 28 % 12:02d}-{1 + day % 28:02d}T{rest // 60:02d}:{rest % 60:02d}:00Z"


def fill(db: Path, commits: int, contracts: int, runners: int) -> float:
    """Bulk-load the store: per batch of commits one transaction, the same rows add_run writes."""
    start = time.perf_counter()
    with open_store(db) as conn:
        conn.execute("BEGIN IMMEDIATE")
        ids = intern(
            conn,
            {f"c{k:03d}" for k in range(contracts)}
            | {f"c{k:03d}/float32/64x64/s0" for k in range(contracts)}
            | {""},
        )
        conn.execute("COMMIT")
        run_id = 0
        for first in range(0, commits, 200):
            conn.execute("BEGIN IMMEDIATE")
            runs, cases, cells = [], [], []
            for c in range(first, min(first + 200, commits)):
                for r in range(runners):
                    run_id += 1
                    runs.append(
                        (
                            run_id,
                            f"{c:040x}",
                            _time(c),
                            f"runner-{r:02d}",
                            f"fp{r}",
                            "cpu",
                            "",
                            None,
                            sortable(_time(c)),
                            1,
                        )
                    )
                    for k in range(contracts):
                        b = 0.1 + 0.001 * ((c + k) % 50)
                        name, case = ids[f"c{k:03d}"], ids[f"c{k:03d}/float32/64x64/s0"]
                        cases.append(
                            (
                                run_id,
                                case,
                                name,
                                STATUS_CODE["pass"],
                                b,
                                2.0,
                                1e-6,
                                1e-6 * (1 + r % 3),
                                ids[""],
                                ids[""],
                                b,
                            )
                        )
                        cells.append((run_id, name, STATUS_CODE["pass"], b, 1, 0, ids[""], b))
            conn.executemany("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", runs)
            conn.executemany("INSERT INTO cases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", cases)
            conn.executemany("INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?, ?)", cells)
            conn.execute("COMMIT")
    return time.perf_counter() - start


def median_s(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--commits", type=int, default=10_000)
    p.add_argument("--contracts", type=int, default=200)
    p.add_argument("--runners", type=int, default=10)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument(
        "--dir", type=Path, default=None, help="where the store goes (default: a temporary directory)"
    )
    a = p.parse_args(argv)
    print(describe())
    print(
        f"history_scale: {a.commits:,} commits x {a.contracts} contracts x {a.runners} runners = {a.commits * a.contracts * a.runners:,} case rows"
    )
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        db = Path(tmp) / "h.db"
        print(
            f"fill (bulk, once): {fill(db, a.commits, a.contracts, a.runners):.1f} s, {os.path.getsize(db) / 2**20:,.0f} MiB"
        )
        with open_store(db) as conn:
            fresh = iter(range(a.commits, a.commits + a.repeats))
            add = median_s(lambda: add_run(conn, run_entry(next(fresh), 0, a.contracts)), a.repeats)
            again = run_entry(a.commits, 0, a.contracts)
            readd = median_s(lambda: add_run(conn, again), a.repeats)
            one = median_s(lambda: load_view(conn, 20, ["c007"]), a.repeats)
            every = median_s(lambda: load_view(conn, 20), a.repeats)
            view = load_view(conn, 20)
            text = median_s(lambda: render_history_console(view), a.repeats)
            site = median_s(lambda: render_site(view), max(1, a.repeats // 3))
        rows = [
            (f"add one run ({a.contracts} cases) to the full store", add),
            ("re-add the same run (no-op)", readd),
            ("view: one contract, last 20 commits, all runners", one),
            ("view: every contract, last 20 commits, all runners", every),
            ("render the console text of that view", text),
            ("render the dashboard of that view (all pages)", site),
        ]
        print("| operation | median s |\n|---|---|")
        for name, s in rows:
            print(f"| {name} | {s:.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
