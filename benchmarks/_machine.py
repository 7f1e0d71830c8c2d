"""Describe the machine a benchmark ran on (shared by the benchmarks; printed at the top of each run)."""

from __future__ import annotations

import os
import platform


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


if __name__ == "__main__":
    print(describe())
