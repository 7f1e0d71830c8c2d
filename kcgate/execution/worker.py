"""The worker process: reads ``{"case": ..., "kernel": ...}`` JSON lines on stdin (``kernel``: an
import string run in place of the contract's, for calibration; null for the contract's own) and writes
result JSON lines to a result fd.

Started by ``kcgate.execution.executors``; stdout and stderr go to a file so a kernel that floods them
cannot corrupt the protocol. Run as ``python -m kcgate.execution.worker --contracts F --device D --fd N``.

Before reading any case it imports torch and the harness, resolves ``--device auto``, and sends
one handshake line with the device, its fingerprint and the op families' default shapes. The parent
plans from that handshake, so with isolation it never imports torch itself: the one torch import of
a run happens here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def _limit_memory(limit_bytes: int) -> None:
    if limit_bytes <= 0:
        return
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def _set_threads() -> int:
    """One intra-op thread unless KCGATE_THREADS (or OMP_NUM_THREADS) says otherwise: kcgate's cases are
    small, and under load torch's default (one per core) made a 2-core run's wall time swing from 4 to 21 s
    while one thread stayed stable; a contract that needs more sets KCGATE_THREADS."""
    import torch

    wanted = os.environ.get("KCGATE_THREADS") or os.environ.get("OMP_NUM_THREADS") or "1"
    threads = int(wanted) if wanted.isdigit() and int(wanted) > 0 else 1
    torch.set_num_threads(threads)
    return threads


def _start(contracts: str, device: str) -> tuple[dict[str, Any], Any, Any]:
    """The handshake payload, the project and the backend; a KcgateError becomes an error handshake."""
    import kcgate.checks  # noqa: F401  (warm: what the first case would otherwise import)
    import kcgate.execution.harness  # noqa: F401
    from kcgate.devices import default_backend, get_backend
    from kcgate.ops import default_shapes
    from kcgate.spec import load_project

    backend = get_backend(default_backend() if device == "auto" else device)
    project = load_project(contracts)
    hello = {
        "ready": True,
        "device": backend.name,
        "fingerprint": backend.fingerprint().to_json(),
        "default_shapes": default_shapes(),
    }
    return hello, project, backend


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contracts", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--memory-limit", type=int, default=0)
    args = ap.parse_args()
    out = os.fdopen(args.fd, "w", buffering=1, encoding="utf-8")
    from kcgate.devices.base import import_torch
    from kcgate.errors import KcgateError
    from kcgate.execution.plan import Case

    try:
        import_torch()  # a torch that cannot be imported is a handshake error naming the interpreter and fix
        from kcgate.execution.case import execute_case  # imports the harness before the first case

        _set_threads()

        hello, project, backend = _start(args.contracts, args.device)
    except KcgateError as exc:
        out.write(json.dumps({"ready": False, "error": exc.message, "exit_code": int(exc.exit_code)}) + "\n")
        return
    _limit_memory(args.memory_limit)
    out.write(json.dumps(hello) + "\n")
    for line in sys.stdin:
        message = json.loads(line)
        d = message["case"]
        case = Case(**{**d, "shape": tuple(d["shape"])})
        print(f"--- kcgate case {case.case_id}", file=sys.stderr, flush=True)
        result = execute_case(project, case, backend, kernel=message.get("kernel"))
        out.write(json.dumps(result.to_json(), allow_nan=False) + "\n")


if __name__ == "__main__":
    main()
