"""Flip benchmark (issue 53): does the gate hold still on unchanged code?

Runs ``kcgate run`` on the same tree R + 1 times per contracts file at the defaults, as the action would
after issue 53: run 0 is the first baseline; each later run replays the previous run's results (``--baseline``)
with its fresh seeds beside them, and reruns any new failure on the tree's own commit (``--base-ref HEAD``:
the merge base of a PR that changes nothing). Then, over every ordered pair (baseline, PR) of runs 1..R
(R·(R−1) pairs), it diffs the two as ``kcgate diff`` does and counts the blocking rows, which must be 0 on
unchanged code, and the cases whose verdict (status) changes: on the replayed seeds (should be 0 for a
deterministic kernel) and on the fresh ones (a new draw may land elsewhere; the gate must not block on it).

    python -m benchmarks.flips --runs 6                      # 30 pairs over the default corpora
    python -m benchmarks.flips --runs 3 --contracts contracts.toml

The default corpora: the repository's contracts.toml, the realistic bugs (tests/data/realistic) and the
incidents (examples/incidents/*). The shipped bugs (tests/data/shipped), their fixed twins
(tests/data/shipped-fixed) and a sample of the false-alarm corpus (tests/data/false-alarms) are contracts files
too (``python -m tests.testing.corpus_files`` writes them). The contracts must be committed: base is HEAD's
tree. It prints the machine and the command first.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = [
    ROOT / "contracts.toml",
    ROOT / "tests" / "data" / "realistic" / "contracts.toml",
    *sorted((ROOT / "examples" / "incidents").glob("*/contracts.toml")),
]


def run_series(contracts: Path, runs: int, out: Path, workers: str) -> list[Path]:
    """``runs`` + 1 results files of the same tree, each replaying the one before."""
    files: list[Path] = []
    for k in range(runs + 1):
        path = out / f"run{k}.json"
        args = [
            "run",
            "-q",
            "-c",
            str(contracts),
            "--runner",
            "flips",
            "--results",
            str(path),
            "--shrink-s",
            "0",
        ]
        args += ["--workers", workers, "--baseline", str(files[-1]) if files else "none"]
        args += ["--base-ref", "HEAD" if files else "none"]
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "kcgate", *args], cwd=ROOT, capture_output=True, text=True
        )
        if proc.returncode not in (0, 1):
            raise SystemExit(f"kcgate run failed ({proc.returncode}): {proc.stderr[-2000:]}")
        print(f"  run {k}: {time.perf_counter() - t0:.1f} s {proc.stderr.strip()[-200:]}", flush=True)
        files.append(path)
    return files[1:]


def pair_counts(base: Path, pr: Path, contracts: Path) -> dict[str, Any]:
    """One ordered pair, as `kcgate diff BASE PR -c CONTRACTS` decides it."""
    from kcgate.contracts.load import load_project
    from kcgate.gate.diff import make_diff
    from kcgate.plan import is_fresh
    from kcgate.results.model import load_run

    b, p = load_run(base), load_run(pr)
    policy = load_project(contracts, locate_kernels=False).policy
    diff = make_diff({p.runner: p}, {b.runner: b}, policy, dt.datetime.now(dt.timezone.utc).date())
    before = {c.case_id: c.status for c in b.cases}
    flips = [c.case_id for c in p.cases if c.case_id in before and before[c.case_id] != c.status]
    return {
        # a case's rows only: a required runner this one-runner benchmark never runs (the repository's
        # policy.required_runners) is a missing leg of the setup, not a flip
        "blocking": [f"{c.category} {c.case_id}" for c in diff.blocking if c.case_id],
        "missing_legs": [c.runner for c in diff.blocking if not c.case_id],
        "flips_replayed": [cid for cid in flips if not is_fresh(cid)],
        "flips_fresh": [cid for cid in flips if is_fresh(cid)],
        "categories": {k: v for k, v in diff.counts().items() if v},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--runs", type=int, default=6, help="runs after the first baseline (pairs: runs*(runs-1))"
    )
    ap.add_argument("--contracts", type=Path, nargs="*", default=DEFAULTS)
    ap.add_argument("--workers", default="auto")
    ap.add_argument("--json", type=Path, help="write every pair's counts here")
    a = ap.parse_args(argv)
    from benchmarks._machine import describe

    print(describe())
    print(
        f"command: python -m benchmarks.flips {' '.join(sys.argv[1:] if argv is None else argv)}", flush=True
    )
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kcgate-flips-") as tmp:
        for contracts in a.contracts:
            name = contracts.resolve().relative_to(ROOT).as_posix()
            print(f"{name}:", flush=True)
            out = Path(tmp) / str(len(report))
            out.mkdir()
            files = run_series(contracts.resolve(), a.runs, out, a.workers)
            pairs = [pair_counts(i, j, contracts) for i, j in itertools.permutations(files, 2)]
            report[name] = pairs
            print(summary(name, pairs), flush=True)
    every = [p for pairs in report.values() for p in pairs]
    print(f"TOTAL: {summary('all corpora', every)}; machine {os.uname().machine}, {os.cpu_count()} CPUs")
    if a.json:
        a.json.write_text(json.dumps(report, indent=1, sort_keys=True))
    return 1 if any(p["blocking"] for p in every) else 0


def summary(name: str, pairs: list[dict[str, Any]]) -> str:
    blocked = sum(bool(p["blocking"]) for p in pairs)
    rows = sum(len(p["blocking"]) for p in pairs)
    replayed = sum(len(p["flips_replayed"]) for p in pairs)
    fresh = sum(len(p["flips_fresh"]) for p in pairs)
    return (
        f"{name}: {len(pairs)} ordered pairs, {blocked} blocked ({rows} blocking rows); verdict changes: "
        f"{replayed} on replayed seeds, {fresh} on fresh seeds"
    )


if __name__ == "__main__":
    raise SystemExit(main())
