"""Benchmark: load + diff + compare on 10,000 cases x 6 runners (base and current), against a 2 s target.

Run: ``python benchmarks/diff_compare_speed.py [--cases 10000] [--runners 6] [--repeats 5]``. No torch.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kcgate.contracts.policy import Policy
from kcgate.gate.compare import compare_runs
from kcgate.gate.diff import make_diff
from kcgate.render.compare_formats import render_markdown as compare_markdown
from kcgate.render.diff_formats import render_markdown as diff_markdown
from kcgate.results.baseline import load_sources, paused_gc
from kcgate.results.model import CaseResult, Fingerprint, Metrics, RunResult, write_run

TARGET_S = 2.0
CASES_PER_CONTRACT = 50


def make_case(i: int, runner_index: int, drift: float) -> CaseResult:
    k = 2 ** (6 + i % 8)
    err = 1e-6 * (1 + runner_index * (i % 3 == 0) * 20) * (k**0.5)
    metrics = Metrics(
        budget_used=0.2 + drift + (i % 7) / 10,
        max_abs_err=err,
        max_rel_err=err / 3,
        elements=4096,
        extra=(("reduction_len", float(k)),),
    )
    return CaseResult(
        case_id=f"contract-{i // CASES_PER_CONTRACT}/float32/{k}x{k}/seed{i % CASES_PER_CONTRACT}",
        contract_id=f"contract-{i // CASES_PER_CONTRACT}",
        klass="C-PRC-01",
        op="matmul",
        dtype="float32",
        shape=(k, k),
        seed=i,
        status="fail" if (i * (runner_index + 1)) % 97 == 0 else "pass",
        metrics=metrics,
        line=1 + i // CASES_PER_CONTRACT,
    )


def make_run(runner_index: int, cases: int, drift: float) -> RunResult:
    fp = Fingerprint(
        backend="cuda", vendor=f"vendor{runner_index}", device=f"gpu{runner_index}", torch="2.5.0"
    )
    return RunResult(
        f"runner-{runner_index}", fp, tuple(make_case(i, runner_index, drift) for i in range(cases))
    )


def generate(root: Path, cases: int, runners: int) -> tuple[Path, Path]:
    base, current = root / "base", root / "current"
    for r in range(runners):
        write_run(base / f"runner-{r}.json", make_run(r, cases, 0.0), stable=True)
        write_run(current / f"runner-{r}.json", make_run(r, cases - 10, 0.05 * (r % 2)))
    return base, current


def once(base: Path, current: Path) -> float:
    start = time.perf_counter()
    with paused_gc():  # as the diff and compare commands do
        runs, baselines = load_sources([current, base])
        verdict = make_diff(runs, baselines, Policy(), dt.date(2026, 1, 1))
        comparison = compare_runs(runs)
        diff_markdown(verdict), compare_markdown(comparison)
    return time.perf_counter() - start


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--runners", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    )
    print(f"python {platform.python_version()}; {args.cases} cases x {args.runners} runners, base + current")
    print(f"load average now: {_loadavg()} (other work on this machine slows the figure)")
    with tempfile.TemporaryDirectory() as tmp:
        base, current = generate(Path(tmp), args.cases, args.runners)
        times = [once(base, current) for _ in range(args.repeats)]
    median = statistics.median(times)
    print(
        f"load+diff+compare+render: median {median:.3f} s over {args.repeats} runs (min {min(times):.3f} s)"
    )
    print(
        f"ratio to the {TARGET_S:g} s target: {median / TARGET_S:.2f} ({'PASS' if median < TARGET_S else 'FAIL'})"
    )
    return 0 if median < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
