"""One case's child of the sandbox: imports the kernel (or the contract's reference and input generator: role
``reference``, kcgate.sandbox.reference), calls it and runs its backward for the judge.

Messages (``kcgate.sandbox.wire``): ``begin`` (the contract, the kernel's import string, the device and dtype:
the kernel is resolved and adapted here, module ``init`` included; or the reference's role), ``call`` (which
function, the arguments' storages in the judge's arena; the result's tensors come back in this child's arena,
or as "argument i" where the function returned one of its arguments), ``backward`` (dY for a call's outputs,
named by its id; the gradients of its arguments that required grad) and ``end`` (torch's global state as the
case left it). After every call the process-wide
torch state is checked and restored (``kcgate.engine.torch_state``), a second line reported as data.
"""

from __future__ import annotations

import base64
import ctypes
import os
import pickle
import resource
import signal
import socket
from types import SimpleNamespace
from typing import Any

import torch

from kcgate.devices.base import HostStopwatch
from kcgate.engine import torch_state
from kcgate.engine.case import op_for
from kcgate.engine.harness import plain
from kcgate.engine.invoke import adapt
from kcgate.sandbox import messages, reference, wire
from kcgate.util.resolve import resolve

_PR_SET_PDEATHSIG = 1


GRAPHS = 8  # the calls whose graphs a child keeps for their backward (the judge's runs right after its call)


class Child:
    """The case's state: its functions (the adapted kernel, or the reference's), the judge's arena mapped,
    this child's arena, the last calls' graphs."""

    def __init__(self, sock: socket.socket, backend: Any) -> None:
        self.sock, self.backend = sock, backend
        self.judge: wire.Mapped | None = None
        self.arena = wire.Arena("kcgate-sandbox")
        self.kernel: Any = None
        self.functions: dict[str, Any] = {}
        self.graphs: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}  # id: (leaves, outputs)

    def begin(self, message: dict[str, Any]) -> dict[str, Any]:
        contract, paths = pickle.loads(base64.b64decode(message["contract"]))  # the judge's: trusted
        if (
            message.get("role") == "reference"
        ):  # the user's reference and generator (kcgate.sandbox.reference)
            self.functions, names = reference.functions(contract, paths)
            return {"ok": True, "names": names}
        obj = resolve(message["target"], paths)
        if contract.op == "custom":  # the judge names the inputs; the generator is not called again here
            op: Any = SimpleNamespace(input_names=tuple(message["names"]), sizes=None)
        else:
            op = op_for(contract, paths, with_reference=False)
        self.kernel = adapt(obj, contract, message["device"], getattr(torch, message["dtype"]), op)
        self.functions = {"kernel": self.kernel}
        return {"ok": True}

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        storages, tensors = self._arguments(message)
        args = wire.decode(message["args"], lambda i: tensors[i])
        kwargs = wire.decode(message["kwargs"], lambda i: tensors[i])
        fn = self.functions[str(message.get("fn", "kernel"))]
        if message.get("fn", "kernel") != "kernel":  # the judge's oneDNN setting (kcgate.engine.sensitivity)
            torch._C._set_mkldnn_enabled(bool(message.get("mkldnn", True)))
        watch = self._stopwatch()
        with torch.set_grad_enabled(bool(message["grad"])):
            watch.start()
            result = plain(fn(*args, **kwargs))
        took = watch.stop()
        self._write_back(storages)
        self.arena.reset()
        fresh: list[torch.Tensor] = []
        tree = wire.encode(result, lambda t: self._output(t, tensors, fresh))
        self.graphs[int(message.get("id", 0))] = ([t for t in tensors if t.requires_grad], fresh)
        for old in sorted(self.graphs)[:-GRAPHS]:
            del self.graphs[old]
        names = getattr(fn, "param_names", {})
        return {"result": tree, "kernel_s": took, "param_names": {str(k): str(v) for k, v in names.items()}}

    def backward(self, message: dict[str, Any]) -> dict[str, Any]:
        storages, grads = self._arguments(message)
        leaves, outs = self.graphs.get(int(message.get("id", 0)), ([], []))
        pairs = [(o, grads[g]) for o, g in zip(outs, message["grads"]) if g is not None and o.requires_grad]
        watch = self._stopwatch()
        watch.start()
        got: tuple[torch.Tensor | None, ...] = (None,) * len(leaves)
        if pairs and leaves:
            got = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True)
        took = watch.stop()
        self._write_back(storages)
        self.arena.reset()
        return {"grads": [None if g is None else self._output(g, [], []) for g in got], "kernel_s": took}

    def _arguments(
        self, message: dict[str, Any]
    ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[Any]]:
        """The judge's storages as this process sees them (the arena's bytes, or a device copy of them) and the
        argument tensors on them, those the judge differentiates made leaves that require grad."""
        assert self.judge is not None
        storages = []
        for s in message["storages"]:
            here = self.judge.bytes(s["off"], s["n"])
            storages.append((here, here if s["device"] == "cpu" else here.to(s["device"])))
        tensors = []
        for d in message["tensors"]:
            if "meta" in d:
                tensors.append(torch.empty(d["meta"], dtype=wire.dtype_of(d["dtype"]), device="meta"))
                continue
            u8 = storages[d["s"]][1]
            t = torch.empty(0, dtype=wire.dtype_of(d["dtype"]), device=u8.device)
            t.set_(u8.untyped_storage(), d["at"], d["shape"], d["stride"])
            tensors.append(t.requires_grad_() if d["rg"] else t)
        return storages, tensors

    def _write_back(self, storages: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """What the kernel wrote into a device copy goes back to the judge's arena (its checks read it there)."""
        for arena, here in storages:
            if here is not arena:
                arena.copy_(here)

    def _output(self, t: torch.Tensor, args: list[Any], fresh: list[torch.Tensor]) -> dict[str, Any]:
        for i, a in enumerate(args):
            if t is a:
                return {"arg": i}
        if t.device.type == "meta":
            return {"meta": list(t.shape), "dtype": _name(t.dtype)}
        fresh.append(t)
        d = t.detach().contiguous()
        off = self.arena.put(wire.as_bytes(d).cpu() if d.device.type != "cpu" else wire.as_bytes(d))
        return {"off": off, "dtype": _name(d.dtype), "shape": list(d.shape), "rg": t.requires_grad,
                "device": str(d.device)}  # fmt: skip

    def _stopwatch(self) -> Any:
        make = getattr(self.backend, "stopwatch", None)
        return make() if make is not None else HostStopwatch(self.backend.synchronize)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def serve_case(sock: socket.socket, backend: Any, memory_limit: int) -> None:
    """The child's loop: one case, then exit (the judge's ``end``, or its socket closing)."""
    _detach(memory_limit)
    child = Child(sock, backend)
    handlers = {"begin": child.begin, "call": child.call, "backward": child.backward}
    while True:
        try:
            message = messages.recv(sock, fds=int(child.judge is None))
        except (EOFError, OSError, messages.WireError):
            return
        op = message.get("op")
        if op == "begin":
            child.judge = wire.Mapped(message["_fds"][0])
        if op == "end":
            messages.send(sock, {"changed": torch_state.case_changes()})
            return
        answer = _answer(handlers[str(op)], message)
        messages.send(sock, answer, fds=(child.arena.fd,) if op == "begin" else ())


def _answer(handler: Any, message: dict[str, Any]) -> dict[str, Any]:
    """The handler's answer, or what the kernel raised; with the state changes the call made (restored)."""
    try:
        answer = handler(message)
    except BaseException as exc:  # noqa: BLE001 — SystemExit and KeyboardInterrupt from a kernel included
        answer = {"error": describe(exc)}
    answer["changed"] = torch_state.after_kernel()
    return answer


def describe(exc: BaseException) -> dict[str, Any]:
    """An exception as data: its type's name, its message, and sys.exit's code."""
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001 — a kernel's exception whose __str__ raises
        text = f"<unprintable {type(exc).__name__}>"
    code = exc.code if isinstance(exc, SystemExit) else None
    return {"type": type(exc).__name__, "message": text[:4000],
            "code": code if code is None or isinstance(code, (int, str)) else str(code)}  # fmt: skip


def _detach(memory_limit: int) -> None:
    """The child's own process group (the parent kills it whole when the case ends), death with its parent,
    and the memory cap (a kernel that allocates without end costs its case, not the machine)."""
    os.setpgid(0, 0)
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if memory_limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
