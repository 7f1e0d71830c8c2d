"""Kernels that attack the harness: forge results on the worker's pipe, patch torch for later cases,
close the worker's stdio, leave children behind. Used through real subprocess workers."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator

import torch

_MATMUL = torch.matmul
_MM = torch.mm


def honest(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _MM(a, b)  # torch.mm, which the attacks below leave alone: only the oracle's operators change


def wrong(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _MM(a, b) * 1.01  # 1% off: far outside an fp32 matmul's bound


# ---- the result pipe --------------------------------------------------------------------------------


def _case() -> object:
    """The case being run, found in the harness's frames as an attacker would."""
    frame = sys._getframe(1)
    while frame is not None:
        case = frame.f_locals.get("case")
        if hasattr(case, "case_id"):
            return case
        frame = frame.f_back
    raise RuntimeError("no case in the calling frames")


def _writable_pipes() -> Iterator[int]:
    """Every pipe this process holds open for writing, beyond stdio: the result pipe among them."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
                if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
                    yield fd
        except OSError:
            continue


def _write_everywhere(line: bytes) -> None:
    for fd in list(_writable_pipes()):
        try:
            os.write(fd, line)
        except OSError:
            pass


def forge_pass(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = _case()
    forged = {
        "case_id": c.case_id,  # type: ignore[attr-defined]
        "contract_id": c.contract_id,  # type: ignore[attr-defined]
        "class": c.klass,  # type: ignore[attr-defined]
        "op": c.op,  # type: ignore[attr-defined]
        "dtype": c.dtype,  # type: ignore[attr-defined]
        "shape": list(c.shape),  # type: ignore[attr-defined]
        "seed": c.seed,  # type: ignore[attr-defined]
        "status": "pass",
        "metrics": {"budget_used": 0.0},
        "message": "forged",
    }
    _write_everywhere(json.dumps(forged).encode() + b"\n")
    return wrong(a, b)


def garbage(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _write_everywhere(b"this is not JSON\n")
    return honest(a, b)


def forged_object(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _write_everywhere(b'{"forged": true}\n')
    return honest(a, b)


# ---- global state -----------------------------------------------------------------------------------


def patch_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Leaves torch.matmul and Tensor.__matmul__ (the fp64 oracle's operator) 1% off for later cases."""
    torch.matmul = lambda x, y: _MATMUL(x, y) * 1.01
    torch.Tensor.__matmul__ = lambda x, y: _MATMUL(x, y) * 1.01  # type: ignore[method-assign]
    return honest(a, b)


def change_flags(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(torch.get_num_threads() + 1)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = not torch.backends.cuda.matmul.allow_tf32
    return honest(a, b)


# ---- the worker process -----------------------------------------------------------------------------


def close_stdio(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = honest(a, b)
    sys.stdout.flush()
    for fd in (0, 1, 2):
        os.close(fd)
    return out


def close_std_streams(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    sys.stdout.close()
    sys.stderr.close()
    return honest(a, b)


def fork_child(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Starts a child that would sleep for ten minutes, and says where it is."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["KCGATE_TEST_PIDFILE"], "a") as fh:
        fh.write(f"{child.pid}\n")
    return honest(a, b)


# ---- the disk -----------------------------------------------------------------------------------------


def fill_disk(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Fills the filesystem named by KCGATE_TEST_FILL, as another job on the runner might."""
    with open(os.path.join(os.environ["KCGATE_TEST_FILL"], "ballast"), "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass
    return honest(a, b)


# ---- the journal (issue 35) ---------------------------------------------------------------------------


def _run_out() -> tuple[int, str]:
    """The ``kcgate run`` process up the tree (the kernel's sandbox, its judge, then the run) and its --results,
    read from its command line as an attacker would."""
    pid = os.getppid()
    while pid > 1:
        args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")  # noqa: SIM115
        if b"--results" in args:
            out = args[args.index(b"--results") + 1].decode()
            return pid, out if os.path.isabs(out) else os.path.join(os.readlink(f"/proc/{pid}/cwd"), out)
        stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no kcgate run with --results above this kernel")


def forge_journal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Append a ``pass`` row for the next contract's case (whose kernel returns zeros) to the run's journal,
    unsigned and with a made-up MAC, then SIGKILL ``kcgate run``: ``--resume`` must run that case, not trust
    the row. Once only (a marker beside the journal): the resumed run finds an honest kernel."""
    from kcgate.plan import case_id
    from kcgate.results.records import CaseResult

    run, out = _run_out()
    journal = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.journal")
    marker = journal + ".forged"
    if os.path.exists(marker):
        return _MM(a, b)
    open(marker, "w").close()  # noqa: SIM115
    shape = (a.shape[0], a.shape[1], b.shape[1])
    cid = case_id("zeros", "float32", shape, 0)
    row = CaseResult(cid, "zeros", "C-PRC-01", "matmul", "float32", shape, 1, "pass").to_row()
    line = json.dumps(row).encode()
    with open(journal, "ab") as fh:
        fh.write(line + b"\n" + b"0" * 64 + b" " + line + b"\n")  # as kcgate 0.1 wrote it, and "signed"
    os.kill(run, 9)
    return _MM(a, b)


def zeros(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)


# ---- writes the bitwise input check must see (#44) ----------------------------------------------------


def softmax_nan_where_half(x: torch.Tensor) -> torch.Tensor:
    """Writes NaN into its own input wherever x == 0.5 (a check that maps NaN to 0.5 sees no write), and the
    oracle, reading the mutated input, agrees with its NaN rows."""
    x.masked_fill_(x == 0.5, float("nan"))
    return torch.softmax(x, -1)


def matmul_negates_zeros(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Writes -0.0 over every +0.0 of ``a``: equal as numbers, a write all the same."""
    out = a @ b
    a.masked_fill_(a == 0, -0.0)
    return out
