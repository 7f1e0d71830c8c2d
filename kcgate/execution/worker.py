"""The worker process: runs cases for ``kcgate.execution.executors`` and answers on an authenticated channel.

Run as ``python -m kcgate.execution.worker --device D``. Its first stdin line (from the parent, never in
argv or the environment) names the result pipe's fd and the channel key (``kcgate.execution.channel``) and carries
the parent's parsed contracts (``execution.handoff``: pickled), which the worker rebuilds: it never reads
contracts.toml. The worker then moves the command stream and the result pipe off fds 0 and the
inherited number to private, non-inheritable fds, points fd 0 at /dev/null, and keeps copies of fds 1
and 2 (the parent's log file) so a kernel that closes or redirects them is undone after its case.

Before reading any case it imports torch and the harness, resolves ``--device auto``, captures torch's
global state (``kcgate.engine.torch_state``) and sends one handshake line with the device, its fingerprint
and the op families' default shapes. Each case is ``{"case", "kernel", "nonce"}`` (``kernel``: an
import string run in place of the contract's, for calibration); each answer is signed with its nonce
and says whether the worker should be replaced (``retire``: it changed global state, or its stdio or
channel was tampered with).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import resource
import sys
from collections.abc import Mapping
from typing import IO, Any

from kcgate.devices import default_backend, get_backend
from kcgate.devices.base import import_torch
from kcgate.engine.case import execute_case
from kcgate.errors import KcgateError
from kcgate.execution import handoff
from kcgate.execution.channel import CASE_MARKER, sign
from kcgate.plan import Case
from kcgate.sandbox.process import Sandbox, shield
from kcgate.util import heap

# Torch-free at the top (tests/test_local_imports.py checks it): the worker reads its init line and sends an
# error handshake for a torch that cannot be imported before anything imports torch; what imports torch
# stays inside the functions main() calls in order (import, thread count, warm-up, state capture).


def _limit_memory(limit_bytes: int, backend: Any = None) -> int:
    """Cap the worker's address space (RLIMIT_AS), so a kernel that allocates without end costs one case
    (a MemoryError), not the machine; the cap applied (0: none). Not on a backend whose runtime reserves far
    more address space than it uses (CUDA and ROCm: ``caps_address_space``), where any cap below that
    reservation fails the first kernel launch; the device's own allocator bounds device memory there."""
    if limit_bytes <= 0 or not getattr(backend, "caps_address_space", True):
        return 0
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    return limit_bytes


def _set_threads() -> int:
    """One intra-op thread unless KCGATE_THREADS (or OMP_NUM_THREADS) says otherwise: kcgate's cases are
    small, and under load torch's default (one per core) made a 2-core run's wall time swing from 4 to 21 s
    while one thread stayed stable; a contract that needs more sets KCGATE_THREADS."""
    import torch  # heavy: after the init line is read (import_torch reports a torch that fails)

    threads = thread_count(os.environ)
    torch.set_num_threads(threads)
    return threads


def thread_count(env: Mapping[str, str]) -> int:
    """The worker's thread rule: KCGATE_THREADS, else OMP_NUM_THREADS, else 1 (a positive integer)."""
    wanted = env.get("KCGATE_THREADS") or env.get("OMP_NUM_THREADS") or "1"
    return int(wanted) if wanted.isdigit() and int(wanted) > 0 else 1


def _start(project_text: str, device: str) -> tuple[dict[str, Any], Any, Any]:
    """The handshake payload, the project and the backend; a KcgateError becomes an error handshake."""
    import kcgate.engine.checks  # noqa: F401  (warm: what the first case would otherwise import)
    import kcgate.engine.harness  # noqa: F401
    from kcgate.numerics.ops import default_shapes

    backend = get_backend(default_backend() if device == "auto" else device)
    backend.configure()  # kcgate's numerics settings, before the fingerprint reads them and any cuBLAS handle
    project = handoff.decode(project_text)  # as the parent parsed it
    hello = {
        "ready": True,
        "device": backend.name,
        "fingerprint": backend.fingerprint().to_json(),
        "default_shapes": default_shapes(),
    }
    return hello, project, backend


def _warm_checks() -> None:
    """Import every class check now, so the state captured at start includes their modules."""
    import kcgate.engine.checks

    for info in pkgutil.iter_modules(kcgate.engine.checks.__path__):
        importlib.import_module(f"kcgate.engine.checks.{info.name}")


class Stdio:
    """Private copies of the worker's fds 0, 1 and 2, put back after every case."""

    def __init__(self) -> None:
        self.null = os.open(os.devnull, os.O_RDWR)  # os.open and os.dup make non-inheritable fds
        self.saved = {1: os.dup(1), 2: os.dup(2)}
        os.dup2(self.null, 0)  # a kernel reading stdin reads nothing, not the parent's commands

    def tail_since(self, offset: int) -> Any:
        """What was written to the log (fd 2, the parent's file) from ``offset`` on, its last 2,000 characters,
        read when called (a sandboxed kernel writes there too: a crash's message shows it)."""

        def tail() -> str:
            try:
                end = os.fstat(self.saved[2]).st_size
                start = max(offset, end - 8000)
                return os.pread(self.saved[2], end - start, start).decode("utf-8", "replace")[-2000:]
            except OSError:
                return ""

        return tail

    def restore(self) -> bool:
        """Put fds 0-2 and sys.stdout/err back; False when a kernel had closed or replaced one."""
        intact = all(_same_file(fd, saved) for fd, saved in ((0, self.null), *self.saved.items()))
        os.dup2(self.null, 0)
        for fd, saved in self.saved.items():
            os.dup2(saved, fd)
        for name, fd in (("stdout", 1), ("stderr", 2)):
            stream = getattr(sys, name)
            if stream is None or stream.closed or _fileno(stream) != fd:
                setattr(sys, name, open(fd, "w", buffering=1, closefd=False, encoding="utf-8"))  # noqa: SIM115
                intact = False
        return intact


def _same_file(fd: int, other: int) -> bool:
    try:
        a, b = os.fstat(fd), os.fstat(other)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _fileno(stream: IO[str]) -> int:
    try:
        return stream.fileno()
    except (OSError, ValueError):
        return -1


class Channel:
    """The command stream in and the signed result lines out, on private fds."""

    def __init__(self, init: dict[str, Any], commands: IO[str]) -> None:
        self.key = str(init["key"])
        self.out = os.dup(int(init["fd"]))  # off the number the parent passed (it was in our fd table)
        os.close(int(init["fd"]))
        self.commands = commands
        self.ids = (os.fstat(self.out).st_ino, os.fstat(commands.fileno()).st_ino)

    def send(self, nonce: str, message: dict[str, Any]) -> None:
        data = sign(self.key, nonce, message)
        while data:
            data = data[os.write(self.out, data) :]

    def intact(self) -> bool:
        try:
            return (os.fstat(self.out).st_ino, os.fstat(self.commands.fileno()).st_ino) == self.ids
        except (OSError, ValueError):
            return False


def _commands() -> IO[str]:
    """The parent's command pipe, moved from fd 0 to a private fd."""
    return os.fdopen(os.dup(0), "r", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--memory-limit", type=int, default=0)
    args = ap.parse_args()
    commands = _commands()
    init = json.loads(commands.readline())
    channel = Channel(init, commands)
    stdio = Stdio()
    sandbox = _sandbox()  # started now: its torch import overlaps this process's
    try:
        import_torch()  # a torch that cannot be imported is a handshake error naming the interpreter and fix
        _set_threads()  # before the state is captured: the thread count every case starts from
        hello, project, backend = _start(init["project"], args.device)
        _warm_checks()
    except KcgateError as exc:
        channel.send(init["nonce"], {"ready": False, "error": exc.message, "exit_code": int(exc.exit_code)})
        return
    from kcgate.engine import torch_state

    torch_state.capture()
    cap = _limit_memory(args.memory_limit, backend)
    heap.keep_freed_memory()  # a case's freed tensors serve its next allocations (kcgate.util.heap)
    if sandbox is not None:
        if _user_references(project) and os.environ.get("KCGATE_SANDBOX_REFERENCES") != "0":
            # the user's references and baselines run in a sandbox of their own (0: here, to compare)
            sandbox.with_references(tracer=any(c.reference for c in project.contracts))
        sandbox.setup(backend.name, thread_count(os.environ), cap)
        sandbox.wait_ready()  # its start-up is the worker's, never a case's time
    channel.send(init["nonce"], hello)
    serve(channel, stdio, project, backend, sandbox, heap.keep_for(cap))
    _exit_now()


def _user_references(project: Any) -> bool:
    """Whether a contract names user code besides its kernel: a reference (and generator), or a
    ``tolerance.baseline``."""
    return any(c.reference or c.tolerance.baseline for c in project.contracts)


def _sandbox() -> Any:
    """The sandbox the kernels run in (kcgate.sandbox), this process made unreadable to it; none where
    KCGATE_SANDBOX=0 (the cost comparison of benchmarks/sandbox_overhead.py; docs/security.md)."""
    if os.environ.get("KCGATE_SANDBOX", "1") == "0":
        return None
    shield()  # no sandbox may write this process's memory (/proc/PID/mem) or ptrace it
    return Sandbox()


def _exit_now() -> None:
    """Leave without the interpreter's teardown once the commands end: every answer is sent, and torch's
    teardown took about 2 s of every run's end under load (the parent waits for the worker to exit)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a kernel may have closed or replaced it
            pass
    os._exit(0)


def serve(
    channel: Channel, stdio: Stdio, project: Any, backend: Any, sandbox: Any = None, keep: int | None = None
) -> None:
    """Answer cases until the command stream ends or the worker must retire; ``keep``: the free heap memory
    kept from one case for the next (kcgate.util.heap)."""
    for line in channel.commands:
        message = json.loads(line)
        d = message["case"]
        case = Case.from_json(d)
        began = os.fstat(stdio.saved[2]).st_size  # the case's output in the log begins here
        print(f"{CASE_MARKER}{case.case_id}", file=sys.stderr, flush=True)
        result = _run(project, case, backend, message.get("kernel"), sandbox, stdio.tail_since(began))
        intact = stdio.restore() and channel.intact()
        # a kernel in a sandbox changed its own child's state, gone with it; here, this process's
        changed = (
            sandbox is None and result.signature is not None and result.signature.cause == "global-state"
        )
        answer = {"case_id": case.case_id, "result": result.to_json(), "retire": changed or not intact}
        channel.send(message["nonce"], answer)
        heap.release(keep)  # past ``keep``, the case's freed memory back to the system (after the answer)
        if answer["retire"]:
            return  # the parent starts a fresh worker for the next case


def _run(project: Any, case: Case, backend: Any, kernel: str | None, sandbox: Any, tail: Any) -> Any:
    """One case, its kernel in a child of the sandbox forked for it alone (or here, without a sandbox);
    ``tail``: the case's output so far, for a crash's message."""
    if sandbox is None:
        return execute_case(project, case, backend, kernel=kernel)
    code = sandbox.case(backend.device(), tail)
    try:
        return execute_case(project, case, backend, kernel=kernel, code=code)
    finally:
        code.close()


if __name__ == "__main__":
    main()
