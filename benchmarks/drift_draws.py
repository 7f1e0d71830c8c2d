"""Drift only where the inputs are the same (issue 57.3): count budget-drift rows on unchanged code and on a
real change.

Over one contracts file (default tests/data/drift: Liger-like fp16 kernels, swiglu, a JSD, a KL and a
cross-entropy), it runs ``kcgate run`` as the action would, then diffs as ``kcgate diff`` does:

- **draws**: P + 1 runs of the unchanged tree at unpredictable seeds, none replaying (``--baseline none``),
  each diffed with the one before (P pairs, every case on different inputs). It counts the budget-drift rows
  (target 0) and the rows a rule blind to the seeds would have called drift (a pass in both whose budget,
  or share not correctly rounded, rose past ``policy.budget_drift``), with the largest such factor;
- **replays**: P + 1 runs, each replaying the one before (``--baseline``, fresh seeds beside): budget-drift
  rows (target 0);
- **change**: for each replaying run but the last, the contracts file with ``--change OLD=NEW`` applied
  (default Liger 0.6.0's swiglu: one fp16 rounding become two) run on that run's seeds, selecting the
  changed contract (``-k``; its rows only are counted): the replayed cases that show as budget drift, per
  dtype (target: every fp16 case, no fp32 one), and the blocking rows (target 0: drift does not block by
  default).

    python -m benchmarks.drift_draws --pairs 10

It prints the machine and the command first, then each part's figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "tests" / "data" / "drift" / "contracts.toml"
SWIGLU = "drift:swiglu_once=drift:swiglu_twice"


def run(contracts: Path, path: Path, baseline: str, workers: str, *extra: str) -> Path:
    args = ["run", "-q", "-c", str(contracts), "--runner", "drift", "--results", str(path), "--shrink-s", "0"]
    args += ["--workers", workers, "--baseline", baseline, "--base-ref", "none", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kcgate", *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"kcgate run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    print(f"  {path.name}: {time.perf_counter() - t0:.1f} s {proc.stderr.strip()[-120:]}", flush=True)
    return path


def pair(base: Path, pr: Path, contracts: Path, contract: str = "") -> dict[str, Any]:
    """One (baseline, PR) pair as `kcgate diff` decides it, and what a seed-blind drift rule would say;
    ``contract``: that contract's rows only (a PR run that selected it leaves the others *removed*)."""
    from kcgate.contracts.load import load_project
    from kcgate.gate.diff import make_diff
    from kcgate.results.model import load_run

    b, p = load_run(base), load_run(pr)
    policy = load_project(contracts, locate_kernels=False).policy
    diff = make_diff({p.runner: p}, {b.runner: b}, policy, dt.datetime.now(dt.timezone.utc).date())
    rule, before = policy.budget_drift, {c.case_id: c for c in b.cases}
    blind = []
    for c in p.cases:
        was = before.get(c.case_id)
        if contract and c.contract_id != contract:
            continue
        if was is None or was.status != "pass" or c.status != "pass":
            continue
        m, w = c.metrics, was.metrics
        factor = max(
            rule.factor(w.budget_used, m.budget_used) or 0.0,
            rule.rounding_factor(w.cr_miss, m.cr_miss, m.elements) or 0.0,
        )
        if rule.drifted(w.budget_used, m.budget_used) or rule.rounding_drifted(
            w.cr_miss, m.cr_miss, m.elements
        ):
            blind.append((c.case_id, factor))
    rows = [c for c in diff.changes if not contract or c.contract_id == contract]
    return {
        "drift": [(c.case_id, c.dtype, c.replayed) for c in rows if c.category == "budget-drift"],
        "replayed": [(c.case_id, c.dtype) for c in rows if c.replayed],
        "blind": blind,
        "blocking": [f"{c.category} {c.case_id}" for c in rows if c.blocking],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10, help="pairs per part (runs: pairs + 1 per chain)")
    ap.add_argument("--contracts", type=Path, default=DEFAULT)
    ap.add_argument("--change", default=SWIGLU, help="OLD=NEW: the PR's edit of the contracts file's text")
    ap.add_argument("--select", default="swiglu", help="the changed contract's id (-k of its PR runs)")
    ap.add_argument("--workers", default="1")
    a = ap.parse_args(argv)
    from benchmarks._machine import describe

    print(describe())
    print(f"command: python -m benchmarks.drift_draws {' '.join(sys.argv[1:] if argv is None else argv)}")
    contracts = a.contracts.resolve()
    old, new = a.change.split("=", 1)
    with tempfile.TemporaryDirectory(prefix="kcgate-drift-") as tmp:
        out = Path(tmp)
        print("draws (no replay):", flush=True)
        draws = [run(contracts, out / f"draw{k}.json", "none", a.workers) for k in range(a.pairs + 1)]
        print("replays:", flush=True)
        chain: list[Path] = []
        for k in range(a.pairs + 1):
            chain.append(
                run(contracts, out / f"replay{k}.json", str(chain[-1]) if chain else "none", a.workers)
            )
        changed = out / "changed.toml"
        changed.write_text(contracts.read_text().replace(old, new))
        print(f"change {old} -> {new}:", flush=True)
        prs = [
            run(changed, out / f"change{k}.json", str(base), a.workers, "-k", a.select)
            for k, base in enumerate(chain[:-1])
        ]
        report(
            "draws",
            [pair(i, j, contracts) for i, j in zip(draws, draws[1:])],
        )
        report("replays", [pair(i, j, contracts) for i, j in zip(chain, chain[1:])])
        report("change", [pair(b, pr, contracts, a.select) for b, pr in zip(chain, prs)], changed=True)
    print(f"machine {os.uname().machine}, {os.cpu_count()} CPUs")
    return 0


def report(name: str, pairs: list[dict[str, Any]], changed: bool = False) -> None:
    drift = [d for p in pairs for d in p["drift"]]
    blind = [b for p in pairs for b in p["blind"]]
    blocking = sum(len(p["blocking"]) for p in pairs)
    line = f"{name}: {len(pairs)} pairs, {len(drift)} budget-drift rows, {blocking} blocking rows"
    if changed:
        replayed = Counter(dtype for p in pairs for _, dtype in p["replayed"])
        shown = Counter(dtype for _, dtype, was in drift if was)
        line += "; replayed cases shown as drift: " + ", ".join(
            f"{dtype} {shown[dtype]}/{n}" for dtype, n in sorted(replayed.items())
        )
    else:
        worst = max((f for _, f in blind), default=0.0)
        cases = Counter(cid.split("/")[0] for cid, _ in blind)
        line += (
            f"; a seed-blind rule: {len(blind)} drift rows in {sum(bool(p['blind']) for p in pairs)} pairs, "
            f"up to x{worst:.3g} ({', '.join(f'{c} {n}' for c, n in sorted(cases.items())) or 'none'})"
        )
    print(line, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
