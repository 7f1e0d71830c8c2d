"""The worker process: reads case JSON lines on stdin, writes result JSON lines to a result fd.

Started by ``kcgate.isolation``; stdout and stderr go to a file so a kernel that floods them
cannot corrupt the protocol. Run as ``python -m kcgate.worker --contracts F --device D --fd N``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _limit_memory(limit_bytes: int) -> None:
    if limit_bytes <= 0:
        return
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contracts", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--memory-limit", type=int, default=0)
    args = ap.parse_args()
    out = os.fdopen(args.fd, "w", buffering=1, encoding="utf-8")
    from kcgate.devices import get_backend
    from kcgate.execute import execute_case
    from kcgate.plan import Case
    from kcgate.spec import load_project

    project = load_project(args.contracts)
    backend = get_backend(args.device)
    _limit_memory(args.memory_limit)
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        d = json.loads(line)
        case = Case(**{**d, "shape": tuple(d["shape"])})
        print(f"--- kcgate case {case.case_id}", file=sys.stderr, flush=True)
        result = execute_case(project, case, backend)
        out.write(json.dumps(result.to_json(), allow_nan=False) + "\n")


if __name__ == "__main__":
    main()
