"""A correct matmul that appends its worker's process id to ``$KCGATE_TEST_PID_FILE``: which worker ran each call
(the worker that judges it: the kernel itself runs in a sandbox child of that worker, kcgate.sandbox).

With ``KCGATE_TEST_PEERS=N`` a call waits (up to 60 s) until N distinct workers have called it: a run with N
workers then uses them all, however fast the first is (a lane takes work only once its worker is ready)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    path = os.environ["KCGATE_TEST_PID_FILE"]
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{_worker(os.getpid())}\n")
    peers, deadline = int(os.environ.get("KCGATE_TEST_PEERS", "1")), time.monotonic() + 60
    while len(set(Path(path).read_text(encoding="utf-8").split())) < peers and time.monotonic() < deadline:
        time.sleep(0.01)
    return a @ b


def _worker(pid: int) -> int:
    """The nearest ancestor (or this process) that is a kcgate worker; this process where none is."""
    here = pid
    while pid > 1:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"kcgate.execution.worker" in cmdline:
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return here
