"""Verdict flips (issue 53 item 3): an unchanged case run at many seeds, its verdicts counted.

Runs the planted drift (tests/testing/kernels/drift.py: torch's rms_norm scaled by 1 + 4e-7, error 6-9x a
correct implementation's, within the bound) and its correct twin under C-PRC-01 fp32, at the declared shape
and the boundary shape kcgate adds, one case per seed, in process as ``kcgate run`` plans them. Per kernel and
shape it prints the verdicts (fail; pass; pass with an inconclusive or limitation note), the trials the
sequential test added, and the pass <-> fail flips over every ordered pair of seeds (a pair whose two runs
disagree on fail: what a PR would see as a "new violation" on unchanged code).

    python -m benchmarks.verdict_flips [--seeds 40] [--seed0 0] [--shape 32,512] [--kernels drift,twin]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = {"drift": "rmsnorm_drift", "twin": "rmsnorm_twin"}


def project(tmp: Path, kernel: str, shape: str) -> object:
    from kcgate.contracts.load import load_project

    f = tmp / "contracts.toml"
    f.write_text(
        f'[project]\npaths = ["{ROOT}"]\n\n[[contract]]\nid = "{kernel}"\nclass = "C-PRC-01"\n'
        f'kernel = "tests.testing.kernels.drift:{KERNELS[kernel]}"\nop = "rmsnorm"\ndtypes = ["float32"]\n'
        f"shapes = [[{shape}]]\nprotocol = {{ seeds = 1 }}\n"
    )
    return load_project(f)


def verdict(status: str, message: str) -> str:
    if status != "pass":
        return status
    return message.split(":")[0] if message.startswith(("inconclusive:", "limitation:")) else "pass"


def flips(verdicts: list[str]) -> tuple[int, int]:
    """(ordered seed pairs whose runs disagree on fail, ordered pairs)."""
    n, fails = len(verdicts), sum(v == "fail" for v in verdicts)
    return 2 * fails * (n - fails), n * (n - 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--shape", default="32, 512")
    ap.add_argument("--kernels", default="drift,twin")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    from kcgate.devices.cpu import CpuBackend
    from kcgate.engine.case import execute_case
    from kcgate.plan import make_plan

    torch.set_num_threads(1)
    got: dict[tuple[str, str], list[str]] = defaultdict(list)
    drawn: Counter[tuple[str, str]] = Counter()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for kernel in args.kernels.split(","):
            p = project(Path(tmp), kernel, args.shape)
            for seed in range(args.seed0, args.seed0 + args.seeds):
                for case in make_plan(p, seed, {}, boundary=True):  # type: ignore[arg-type]
                    r = execute_case(p, case, CpuBackend())  # type: ignore[arg-type]
                    key = (kernel, "x".join(map(str, case.shape)))
                    got[key].append(verdict(str(r.status), r.message))
                    drawn[key] += int(dict(r.metrics.extra).get("excess_extra_trials", 0))
    print(
        f"seeds {args.seed0}..{args.seed0 + args.seeds - 1}, C-PRC-01 rmsnorm fp32, "
        f"{time.perf_counter() - t0:.0f} s"
    )
    print(
        "| kernel | shape | fail | pass | inconclusive | limitation | trials added | fail flips (ordered pairs) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (kernel, shape), vs in got.items():
        c, (k, n) = Counter(vs), flips(vs)
        print(
            f"| {kernel} | {shape} | {c['fail']} | {c['pass']} | {c['inconclusive']} | {c['limitation']} | "
            f"{drawn[kernel, shape]} | {k} of {n} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
