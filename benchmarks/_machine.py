"""Shared by the benchmarks: describe the machine (printed at the top of each run) and time kcgate commands."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo, or platform's best guess."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def describe() -> str:
    """One block of text: platform, CPU, cores, torch version and threads, numpy, BLAS-related env vars."""
    lines = [
        f"platform: {platform.platform()} python {platform.python_version()}",
        f"cpu: {cpu_model()}, {os.cpu_count()} logical cores",
    ]
    try:
        import torch

        lines.append(f"torch: {torch.__version__}, {torch.get_num_threads()} threads")
    except ImportError:
        lines.append("torch: not installed")
    try:
        import numpy

        lines.append(f"numpy: {numpy.__version__}")
    except ImportError:
        lines.append("numpy: not installed")
    env = {k: v for k, v in os.environ.items() if k.endswith("_NUM_THREADS") or k.startswith("OPENBLAS")}
    lines.append(f"thread env: {env or 'none set'}")
    try:
        lines.append(f"load average: {os.getloadavg()}")
    except OSError:
        pass
    return "\n".join(lines)


def kcgate_cmd() -> list[str]:
    """The installed console script when present (what users run), else ``python -m kcgate``."""
    exe = Path(sys.executable).parent / "kcgate"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "kcgate"]


def timed(cmd: list[str], ok: tuple[int, ...] = (0,)) -> float:
    """Wall seconds of one command run in the repo root; exits with its output if it fails."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode not in ok:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return dt


if __name__ == "__main__":
    print(describe())
