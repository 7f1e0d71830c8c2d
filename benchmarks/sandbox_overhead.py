"""Benchmark: the kernel and the user's reference and baseline in sandbox processes (the default) vs the
reference and baseline in the judge (KCGATE_SANDBOX_REFERENCES=0, the kernel alone sandboxed) vs all in the
judge's own worker (KCGATE_SANDBOX=0).

Run: ``python benchmarks/sandbox_overhead.py [--repeats 3] [--production]`` from anywhere.

One contracts file of torch's own kernels (kcgate.kernels.builtin) judged by the families' oracles, by a user
``reference =`` (softmax), against a user ``tolerance.baseline`` (softmax, ``method = "relative"``) and as a
custom op (rms_norm: the user's reference and input generator, the derived
bound), at small shapes and, with ``--production``, at production shapes (256x4096; matmul 1024^3):
``kcgate run --seed 1`` with each setting, the settings' order reversed every other repeat so drift on a
shared machine hits them alike. Per case: the median ``duration_s`` (the judge's time for the case, the
crossings included) under each setting, side by side, and the ratios. What the kernel's sandbox adds per case
is a fork, the kernel's import in the child, and each call's arguments and outputs copied through the memfd
arenas; the reference's adds a second child, the reference's import there, and each reference call's
tensors (the generator's, the oracle's, the derived bound's, the baseline's) copied the same way. ``--only
softmax`` runs the contracts whose id names softmax.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import ROOT, describe, kcgate_cmd  # noqa: E402

from kcgate.results.model import load_run  # noqa: E402

USER = "benchmark_user_code"  # the user functions' module, written beside the contracts
USER_CODE = """
import torch

def softmax_ref(x):
    return torch.softmax(x, -1)

def rms_gen(shape, dtype, g):
    return torch.randn(shape, generator=g).to(dtype), (torch.randn(shape[-1:], generator=g) * 0.5 + 1).to(dtype)

def rms_ref(x, w):
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).to(x.dtype)
"""
REF = f'reference = "{USER}:softmax_ref"'
BASELINE = f'tolerance = {{ method = "relative", baseline = "{USER}:softmax_ref" }}'
CUSTOM = f'reference = "{USER}:rms_ref"\ninputs = "{USER}:rms_gen"'
SMALL = [
    ("softmax", "softmax", "C-PRC-01", [[8, 64]], ""),
    ("softmax-user-reference", "softmax", "C-PRC-01", [[8, 64]], REF),
    ("softmax-baseline", "softmax", "C-PRC-01", [[8, 64]], BASELINE),
    ("rmsnorm-custom", "rmsnorm", "C-PRC-01", [[4, 64]], CUSTOM),
    ("rmsnorm", "rmsnorm", "C-PRC-01", [[4, 64]], ""),
    ("rmsnorm-bwd", "rmsnorm", "C-PRC-01", [[4, 64]], 'direction = "both"'),
    ("matmul", "matmul", "C-PRC-01", [[64, 64, 64]], ""),
]
PRODUCTION = [
    ("rmsnorm-256x4096", "rmsnorm", "C-PRC-01", [[256, 4096]], ""),
    ("softmax-user-reference-256x4096", "softmax", "C-PRC-01", [[256, 4096]], REF),
    ("softmax-baseline-256x4096", "softmax", "C-PRC-01", [[256, 4096]], BASELINE),
    ("rmsnorm-custom-256x4096", "rmsnorm", "C-PRC-01", [[256, 4096]], CUSTOM),
    ("rmsnorm-256x4096-bwd", "rmsnorm", "C-PRC-01", [[256, 4096]], 'direction = "both"'),
    ("matmul-1024", "matmul", "C-PRC-01", [[1024, 1024, 1024]], ""),
]
# (KCGATE_SANDBOX, KCGATE_SANDBOX_REFERENCES): everything sandboxed; the kernel alone (before #54's item 1
# was finished); nothing
SETTINGS = {"split": ("1", "1"), "kernel-only": ("1", "0"), "in-process": ("0", "0")}


def contracts(rows: list[tuple[str, str, str, list[list[int]], str]]) -> str:
    out = []
    for cid, op, klass, shapes, extra in rows:
        family = "custom" if "inputs =" in extra else op
        out.append(
            f'[[contract]]\nid = "{cid}"\nclass = "{klass}"\nkernel = "kcgate.kernels.builtin:{op}"\n'
            f'op = "{family}"\ndtypes = ["float32"]\nshapes = {shapes}\n{extra}\n'
            "protocol = { seeds = 2, trials = 2, boundary = false, timeout_s = 600 }\n"
        )
    return f'[project]\npaths = [".", "{ROOT}"]\n\n' + "\n".join(out)


def run_once(toml: Path, setting: str, out: Path) -> dict[str, float]:
    cmd = [
        *kcgate_cmd(),
        "run",
        "-c",
        str(toml),
        "--results",
        str(out),
        "-q",
        "--seed",
        "1",
        "--shrink-s",
        "0",
    ]
    sandbox, references = SETTINGS[setting]
    env = {**os.environ, "KCGATE_SANDBOX": sandbox, "KCGATE_SANDBOX_REFERENCES": references}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return {c.case_id: c.duration_s for c in load_run(out).cases}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--production", action="store_true", help="add the production shapes")
    ap.add_argument(
        "--only", nargs="*", default=[], help="the contracts whose id contains one of these words"
    )
    args = ap.parse_args()
    print(describe())
    tmp = Path(tempfile.mkdtemp(prefix="kcgate-sandbox-"))
    toml = tmp / "contracts.toml"
    rows = SMALL + (PRODUCTION if args.production else [])
    toml.write_text(contracts([r for r in rows if not args.only or any(w in r[0] for w in args.only)]))
    (tmp / f"{USER}.py").write_text(USER_CODE)
    times: dict[str, dict[str, list[float]]] = {s: {} for s in SETTINGS}
    try:
        for i in range(args.repeats):
            for setting in list(SETTINGS) if i % 2 == 0 else list(SETTINGS)[::-1]:
                for case, t in run_once(toml, setting, tmp / f"{setting}{i}.json").items():
                    times[setting].setdefault(case, []).append(t)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"command: kcgate run --seed 1 --shrink-s 0 (KCGATE_SANDBOX, KCGATE_SANDBOX_REFERENCES = 1,1 | 1,0 | 0,0),"
        f" {args.repeats} repeats, the order reversed every other repeat\n"
    )
    names = list(SETTINGS)
    print(f"{'case':44s} " + " ".join(f"{n + ' ms':>14s}" for n in names) + f" {'split/kernel-only':>18s} "
          f"{'split/in-process':>17s}")  # fmt: skip
    ratios: dict[str, list[float]] = {"kernel-only": [], "in-process": []}
    for case in sorted(times["split"]):
        ms = {n: statistics.median(times[n][case]) * 1e3 for n in names}
        for n in ratios:
            ratios[n].append(ms["split"] / ms[n])
        print(f"{case:44s} " + " ".join(f"{ms[n]:14.1f}" for n in names)
              + f" {ms['split'] / ms['kernel-only']:18.2f} {ms['split'] / ms['in-process']:17.2f}")  # fmt: skip
    for n, r in ratios.items():
        print(f"median ratio split / {n} per case: {statistics.median(r):.2f}")


if __name__ == "__main__":
    main()
