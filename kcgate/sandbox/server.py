"""The sandbox: the process that runs the kernel, and nothing that judges it.

Run as ``python -m kcgate.sandbox.server --control-fd N`` by the judge (``kcgate.sandbox.client``). It imports
torch, configures the backend and captures torch's global state once, never running user code itself; for each
case it forks a fresh child (``kcgate.sandbox.case``) that imports the kernel, calls it and runs its backward,
and is gone when the case ends. So no case ever runs in a process an earlier case's kernel has touched, and a
crash, a corrupted heap or a changed global is its own case's alone. The parent reports each child's exit
status to the judge (a signal's name for a crash).
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
from typing import Any

from kcgate.devices import get_backend
from kcgate.sandbox import messages


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--control-fd", type=int, required=True)
    args = ap.parse_args()
    control = socket.socket(fileno=args.control_fd)
    _warm()
    init = messages.recv(control)
    backend = _prepare(init)
    messages.send(control, {"ready": True})
    while True:
        try:
            message = messages.recv(control)
        except (EOFError, OSError, messages.WireError):
            os._exit(0)  # the judge is gone
        if message.get("op") == "case":
            _one_case(control, backend, int(init.get("memory_limit", 0)))


def _warm() -> None:
    """Import torch, the case code, the op families and what torch imports lazily at a backward's first
    ``grad_outputs`` (sympy, through symbolic_shapes: 1 to 4 s that every child would pay again) before the
    judge's first word. Imports only: a backward here would start autograd's device threads, and a child
    forked after that cannot run a backward on a GPU."""
    import torch  # noqa: F401
    import torch.fx.experimental.symbolic_shapes  # noqa: F401

    import kcgate.numerics.ops  # noqa: F401
    from kcgate.sandbox import case  # noqa: F401


def _warm_derived() -> None:
    """The derived bound's imports and its first trace (torch's decomposition table and dispatch caches), on
    fp64 scalars of the CPU: no device is touched."""
    import torch

    from kcgate.numerics.derived import trace

    trace(lambda x: torch.softmax(x * x.sum(), -1).sqrt(), [torch.ones(2, 2, dtype=torch.float64)])


def _prepare(init: dict[str, Any]) -> Any:
    """What every child starts from: the backend's numerics settings made and torch's state captured. No
    device is touched: a CUDA context does not survive a fork."""
    import torch

    from kcgate.engine import torch_state

    if init.get("references"):  # the derived bound's tracer (torch._decomp) and the mutant searches: seconds
        import kcgate.engine.explain  # noqa: F401  # that each reference's child would otherwise pay again
        import kcgate.engine.placement  # noqa: F401
        import kcgate.sandbox.reference  # noqa: F401

        _warm_derived()
    torch.set_num_threads(int(init["threads"]))
    backend = get_backend(str(init["backend"]))
    backend.configure()
    torch_state.capture()
    return backend


def _one_case(control: socket.socket, backend: Any, memory_limit: int) -> None:
    """Fork the case's child, hand the judge its socket, wait for it to end (or for the judge's kill) and
    report how it ended."""
    mine, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        control.close()
        mine.close()
        from kcgate.sandbox.case import serve_case

        serve_case(theirs, backend, memory_limit)
        os._exit(0)
    theirs.close()
    messages.send(control, {"pid": pid}, fds=(mine.fileno(),))
    mine.close()
    status = _wait(control, pid)
    try:
        os.killpg(pid, signal.SIGKILL)  # whatever the kernel forked into the child's group
    except (ProcessLookupError, PermissionError):
        pass
    messages.send(control, {"exit": describe(status)})


def _wait(control: socket.socket, pid: int) -> int:
    """The child's wait status; a "kill" from the judge (it gave up on the case) kills it first."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([control.fileno(), pidfd], [], [])
            if pidfd in ready:
                return os.waitpid(pid, 0)[1]
            try:
                messages.recv(control)  # the only message mid-case is "kill"
            except (EOFError, OSError, messages.WireError):
                _kill(pid)
                os.waitpid(pid, 0)
                os._exit(0)
            _kill(pid)
    finally:
        os.close(pidfd)


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def describe(status: int) -> str:
    """A wait status in words: "exited with code 3", "killed by SIGSEGV (signal 11)"."""
    if os.WIFSIGNALED(status):
        n = os.WTERMSIG(status)
        try:
            name = signal.Signals(n).name
        except ValueError:
            name = "a signal"
        return f"killed by {name} (signal {n})"
    return f"exited with code {os.waitstatus_to_exitcode(status)}"


if __name__ == "__main__":
    main()
