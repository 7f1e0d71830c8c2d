"""Benchmark: what boundary shapes and stability probes cost on the repository's contracts, in process.

Every case of contracts.toml runs through ``execute_case`` three ways, in alternating rounds: boundary shapes
and probes on (as ``kcgate run`` ships), probes off (``protocol.probes = false``), and neither (the declared
shapes only). Worker start-up, the same for every arm, is left out. Prints the median wall time of each arm
and its cost over the declared shapes alone.

    python benchmarks/boundary_cost.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _variant(project: Any, probes: bool) -> Any:
    contracts = tuple(
        dataclasses.replace(c, protocol=dataclasses.replace(c.protocol, probes=probes))
        for c in project.contracts
    )
    return dataclasses.replace(project, contracts=contracts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from kcgate.contracts.load import load_project
    from kcgate.devices.cpu import CpuBackend
    from kcgate.engine.case import execute_case
    from kcgate.plan import make_plan

    project = load_project(ROOT / "contracts.toml")
    backend = CpuBackend()
    arms = {
        "boundary shapes and probes (as it ships)": (_variant(project, True), True),
        "boundary shapes, probes off": (_variant(project, False), True),
        "declared shapes only": (_variant(project, False), False),
    }
    plans = {k: make_plan(p, 0, {}, boundary=b) for k, (p, b) in arms.items()}
    for k, (p, _) in arms.items():  # warm-up: imports, oneDNN kernels
        for case in plans[k][:5]:
            execute_case(p, case, backend)
    times: dict[str, list[float]] = {k: [] for k in arms}
    for _ in range(args.rounds):
        for k, (p, _) in arms.items():
            t0 = time.perf_counter()
            for case in plans[k]:
                execute_case(p, case, backend)
            times[k].append(time.perf_counter() - t0)
    base = statistics.median(times["declared shapes only"])
    for k, v in times.items():
        med = statistics.median(v)
        runs = ", ".join(f"{x:.2f}" for x in v)
        print(f"{k}: {len(plans[k])} cases, median {med:.2f} s ({runs}); {100 * (med / base - 1):+.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
