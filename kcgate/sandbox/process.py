"""The sandbox server's process, as its judge holds it: started once per judge (``kcgate.sandbox.server``), a
fresh child forked for each case, and how each child ended. Torch-free: the judge starts it before it imports
torch, so the two imports overlap.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from kcgate.sandbox import messages as wire

_PR_SET_DUMPABLE = 4

# A contract's ``env`` variables that load code into a process at its start (a sitecustomize.py on the path, a
# warnings category's module, a preloaded library): they reach the sandbox servers (the kernel's side) only,
# never the judge, which gets them as data in SANDBOX_ENV (docs/security.md#the-judge-and-the-sandbox).
# The runner's own environment is the job's, not the repository's: it is left as it is.
KERNEL_SIDE_ENV = frozenset({
    "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONWARNINGS", "PYTHONBREAKPOINT",
    "PYTHONPLATLIBDIR", "PYTHONEXECUTABLE", "PYTHONINSPECT", "LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH",
})  # fmt: skip
SANDBOX_ENV = "KCGATE_SANDBOX_ENV"


def judge_env(base: Mapping[str, str], contract_env: Mapping[str, str]) -> dict[str, str]:
    """The judge's environment under a contract's ``env``: ``base`` with the contract's variables, but those
    that load code (KERNEL_SIDE_ENV) carried as JSON in SANDBOX_ENV for its sandbox servers alone."""
    kernel_side = {k: v for k, v in contract_env.items() if k in KERNEL_SIDE_ENV}
    out = {**base, **{k: v for k, v in contract_env.items() if k not in KERNEL_SIDE_ENV}}
    out.pop(SANDBOX_ENV, None)
    if kernel_side:
        out[SANDBOX_ENV] = json.dumps(kernel_side)
    return out


def sandbox_env() -> dict[str, str]:
    """A sandbox server's environment: the judge's, with the contract's code-loading variables back."""
    env = dict(os.environ)
    carried = json.loads(env.pop(SANDBOX_ENV, "{}"))
    return {**env, **{str(k): str(v) for k, v in carried.items() if k in KERNEL_SIDE_ENV}}


def shield() -> None:
    """Make this process undumpable: no process of the same user (a sandbox) may ptrace it or write its
    memory through /proc/PID/mem, where the kernel's ptrace rules (no Yama) would otherwise allow it."""
    try:
        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0)
    except (OSError, AttributeError):
        pass


class Sandbox:
    """The sandbox server of one judge: started once; each case is a fresh child it forks."""

    def __init__(self) -> None:
        """Started at once (its torch import overlaps the judge's); ``setup`` then names the backend."""
        self.init: dict[str, Any] = {}
        self.references: Sandbox | None = None  # the user's references' own sandbox (``with_references``)
        self.hosts_references = False  # this is such a sandbox: its server imports what their children run
        self.proc: subprocess.Popen[bytes] | None = None
        self.control: socket.socket | None = None
        self.start()

    def setup(self, backend: str, threads: int, memory_limit: int) -> None:
        """The backend the children configure, their thread count and their address-space cap (0: none)."""
        self.init = {"backend": backend, "threads": threads, "memory_limit": memory_limit,
                     "references": self.hosts_references}  # fmt: skip
        assert self.control is not None
        wire.send(self.control, self.init)
        if self.references is not None:
            self.references.setup(backend, threads, memory_limit)

    def with_references(self, tracer: bool = True) -> None:
        """A second sandbox, for the contracts' references, input generators and baselines: each case's are
        called in a child of it, apart from the kernel's child (a kernel cannot reach the reference it is
        judged by). ``tracer``: its server imports the derived bound's tracer and the mutant searches before
        it forks (seconds; a project whose only such code is a ``tolerance.baseline`` needs neither)."""
        if self.references is None:
            self.references = Sandbox()
            self.references.hosts_references = tracer

    def start(self) -> None:
        mine, theirs = socket.socketpair()
        cmd = [sys.executable, "-m", "kcgate.sandbox.server", "--control-fd", str(theirs.fileno())]
        # stdout and stderr are the judge's (the worker's log): a kernel's output is in a failure's tail
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), env=sandbox_env()
        )
        theirs.close()
        self.control = mine
        self.ready = False
        if self.init:
            wire.send(mine, self.init)

    def fork(self) -> tuple[socket.socket, int]:
        """A fresh child for one case: its socket and pid. A dead server is started again first."""
        for attempt in (0, 1):
            try:
                assert self.control is not None
                if not self.ready:
                    wire.recv(self.control)
                    self.ready = True
                wire.send(self.control, {"op": "case"})
                forked = wire.recv(self.control, fds=1)
                return socket.socket(fileno=forked["_fds"][0]), int(forked["pid"])
            except (EOFError, OSError, wire.WireError, KeyError, TypeError, ValueError):
                self.close()
                if attempt:
                    raise
                self.start()
        raise AssertionError("unreachable")

    def ended(self, kill: bool) -> str:
        """How the case's child ended ("exit 0", "SIGSEGV (signal 11)"); ``kill``: end it first."""
        try:
            assert self.control is not None
            if kill:
                wire.send(self.control, {"op": "kill"})
            return str(wire.recv(self.control).get("exit", "unknown"))[:100]
        except (EOFError, OSError, wire.WireError):
            self.close()
            self.start()
            return "the sandbox server died"

    def case(self, device: str, tail: Any = None) -> Any:
        """One case's ``CaseCode`` (kcgate.sandbox.client), its child forked when the kernel is first asked for."""
        from kcgate.sandbox.client import CaseCode

        return CaseCode(self, device, tail, references=self.references)

    def wait_ready(self) -> None:
        """Wait for the server's start-up (torch's import), so that no case's timeout counts it."""
        if self.references is not None:
            self.references.wait_ready()
        try:
            assert self.control is not None
            if not self.ready:
                wire.recv(self.control)
                self.ready = True
        except (EOFError, OSError, wire.WireError):
            self.close()
            self.start()

    def close(self) -> None:
        """End this server (a server that died is started again by ``fork``; the references' lives on)."""
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
