"""Benchmark: startup time of the torch-free CLI commands, and proof that they do not import torch.

Run: ``python benchmarks/cli_startup.py [--repeats 7] [--profile]`` from anywhere (it runs in the repo root).

Times ``kcgate --help``, ``validate``, ``schema``, ``diff`` and ``compare`` (the last two on a pair of small
results files made once with ``kcgate run -k gather``), interleaved round-robin with ``python -c pass`` as
the interpreter floor; medians over the repeats. Target: ``kcgate --help`` <= 0.3 s.

Proof that torch is not imported, for every command: (1) ``python -X importtime -m kcgate ...`` has no
line naming a ``torch`` module (failed imports are listed too); (2) the command run with PYTHONPATH
pointing at a fake ``torch`` package whose ``__init__`` writes a marker file and raises ImportError
exits as usual and leaves no marker (so even a caught ``import torch`` is seen).
If ``--help`` is over target (or with --profile), the top importers by cumulative time are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import ROOT, describe, kcgate_cmd, timed  # noqa: E402

TARGET_HELP_S = 0.3
FAST_COMMANDS: dict[str, list[str]] = {"--help": ["--help"], "validate": ["validate"], "schema": ["schema"]}
OK_CODES = (0, 1)  # diff exits 1 when a change blocks; that is a result, not a failure
_TORCH_LINE = re.compile(r"\|\s*torch(\.|\s*$)")


# ---- proof: no torch --------------------------------------------------------------------------------


def _importtime(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run ``python -X importtime -m kcgate ARGS`` in the repo root."""
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kcgate", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def importtime_torch_lines(args: Sequence[str]) -> tuple[int, list[str]]:
    """(exit code, the importtime lines naming torch) of ``kcgate ARGS``."""
    proc = _importtime(args)
    lines = [
        ln for ln in proc.stderr.splitlines() if ln.startswith("import time:") and _TORCH_LINE.search(ln)
    ]
    return proc.returncode, lines


def fake_torch_attempted(args: Sequence[str], tmp: Path) -> tuple[int, bool, str]:
    """Run ``python -m kcgate ARGS`` with a poisoned torch first on the path.

    Returns (exit code, whether torch was imported at all, stderr tail). The fake package records the
    attempt in a marker file before raising ImportError, so a caught ``import torch`` still counts.
    """
    poison = tmp / "poison"
    marker = tmp / "torch-was-imported"
    (poison / "torch").mkdir(parents=True, exist_ok=True)
    (poison / "torch" / "__init__.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path(os.environ['KCGATE_BENCH_TORCH_MARKER']).write_text('imported')\n"
        "raise ImportError('torch is poisoned by benchmarks/cli_startup.py')\n",
        encoding="utf-8",
    )
    marker.unlink(missing_ok=True)
    env = {
        **os.environ,
        "KCGATE_BENCH_TORCH_MARKER": str(marker),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(poison), os.environ.get("PYTHONPATH", "")])),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "kcgate", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, marker.exists(), proc.stderr[-500:]


def prove_torch_free(commands: dict[str, list[str]], tmp: Path) -> list[str]:
    """Both proofs for every command; the list of problems (empty: torch is never imported)."""
    problems = []
    for name, args in commands.items():
        rc, lines = importtime_torch_lines(args)
        if rc not in OK_CODES:
            problems.append(f"{name}: python -X importtime -m kcgate exited {rc}")
        if lines:
            problems.append(f"{name}: importtime names torch: {lines[:3]}")
        rc, imported, err = fake_torch_attempted(args, tmp)
        if rc not in OK_CODES:
            problems.append(f"{name}: exited {rc} with a poisoned torch on the path: {err.strip()}")
        if imported:
            problems.append(f"{name}: attempted `import torch` (the fake torch's marker was written)")
    return problems


# ---- timing -----------------------------------------------------------------------------------------


def make_results(tmp: Path) -> tuple[Path, Path, Path]:
    """Base and current results for diff (same runner) and a second runner's copy for compare."""
    base = tmp / "base.json"
    cmd = [
        *kcgate_cmd(),
        "run",
        "-k",
        "gather",
        "--results",
        str(base),
        "-q",
        "--seed",
        "1",
        "--runner",
        "cpu-a",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in OK_CODES or not base.exists():
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    data = json.loads(base.read_text(encoding="utf-8"))
    current = tmp / "current.json"
    current.write_text(json.dumps(data), encoding="utf-8")
    data["runner"] = "cpu-b"
    other = tmp / "cpu-b.json"
    other.write_text(json.dumps(data), encoding="utf-8")
    return base, current, other


def top_importers(args: Sequence[str], n: int = 30) -> list[tuple[int, int, str]]:
    """(self us, cumulative us, module) of the N largest cumulative import times."""
    rows = []
    for ln in _importtime(args).stderr.splitlines():
        m = re.match(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(.*)$", ln)
        if m:
            rows.append((int(m.group(1)), int(m.group(2)), m.group(3).rstrip()))
    return sorted(rows, key=lambda r: r[1])[-n:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="runs per command (>= 7 for a median)")
    ap.add_argument("--profile", action="store_true", help="print the top importers of --help anyway")
    args = ap.parse_args()

    print(describe())
    print(f"repo: {ROOT}  kcgate: {' '.join(kcgate_cmd())}")
    tmp = Path(tempfile.mkdtemp(prefix="kcgate-bench-"))
    try:
        base, current, other = make_results(tmp)
        commands = {
            **FAST_COMMANDS,
            "diff": ["diff", str(base), str(current)],
            "compare": ["compare", str(base), str(other)],
        }

        problems = prove_torch_free(commands, tmp)
        print("\ntorch-free proof (importtime has no torch line; fake torch never imported):")
        for name in commands:
            bad = [p for p in problems if p.startswith(f"{name}:")]
            print(f"  {name:<8} {'OK' if not bad else 'FAIL: ' + '; '.join(bad)}")

        print(f"\ntiming: {args.repeats} repeats each, round-robin interleaved (rotating start)")
        runs: dict[str, list[str]] = {"python -c pass": [sys.executable, "-c", "pass"]}
        runs.update({f"kcgate {' '.join(a[:1])}": [*kcgate_cmd(), *a] for a in commands.values()})
        times: dict[str, list[float]] = {k: [] for k in runs}
        names = list(runs)
        for i in range(args.repeats):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                times[name].append(timed(runs[name], OK_CODES))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    floor = statistics.median(times["python -c pass"])
    print(f"  {'command':<20} {'median s':>9} {'min s':>7} {'max s':>7} {'x python':>9}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<20} {med:9.3f} {min(ts):7.3f} {max(ts):7.3f} {med / floor:9.2f}")
    help_s = statistics.median(times["kcgate --help"])
    ok = help_s <= TARGET_HELP_S
    print(
        f"\nkcgate --help median {help_s:.3f} s; target <= {TARGET_HELP_S} s: {'within' if ok else 'OVER'} "
        f"({help_s / TARGET_HELP_S:.2f}x of target)"
    )

    if not ok or args.profile:
        print("\ntop importers of `python -X importtime -m kcgate --help` (cumulative us, self us, module):")
        for self_us, cum_us, mod in top_importers(["--help"]):
            print(f"  {cum_us:>9} {self_us:>9} {mod}")
    if problems:
        sys.exit("torch was imported:\n  " + "\n  ".join(problems))


if __name__ == "__main__":
    main()
