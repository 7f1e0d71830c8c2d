"""The judge's side of the sandbox: user code called remotely, its results received as tensors and data.

``kcgate.sandbox.process.Sandbox`` starts the sandbox server once per judge; ``Sandbox.case()`` is one case's ``CaseCode`` (the engine's ``UserCode`` seam, ``kcgate.engine.case``), whose kernel is a
``RemoteKernel``: calling it copies the arguments' storages into the judge's arena, the child calls the kernel
on them, and what it wrote into them is copied back here, so the guard bands, the input-mutation check and the
oracle read the judge's own memory. Outputs come back as private copies. The kernel's backward is a node of the
judge's autograd graph (``_Bridge``) whose backward asks the child for its gradients, so every check that
differentiates through the kernel's output is unchanged.
"""

from __future__ import annotations

import base64
import builtins
import os
import pickle
import socket
from collections.abc import Callable
from typing import Any, NoReturn

import torch

from kcgate.engine.case import op_for
from kcgate.sandbox import messages, wire


class SandboxLost(BaseException):
    """The case's child died, or broke the protocol, mid-case: the case is an error, nothing in it a finding.
    A BaseException so that no ``except Exception`` in the checks records it as the kernel raising."""


class CaseCode:
    """One case's user code, called in a child of the sandbox (the engine's ``UserCode``): the kernel in one
    child, the contract's reference and input generator (where it names them) in another, of the judge's
    reference sandbox (``references``), so that neither the judge nor the kernel can reach them."""

    def __init__(
        self,
        sandbox: Any,
        device: str,
        tail: Callable[[], str] | None = None,
        references: Any = None,
        who: str = "kernel",
    ) -> None:
        """``sandbox``: the judge's kcgate.sandbox.process.Sandbox; ``tail``: what the case printed so far (the
        worker's log since the case began), shown with a crash; ``references``: the sandbox the user's
        reference runs in; ``who``: whose process this is, in a crash's message."""
        self.sandbox, self.device, self.tail = sandbox, torch.device(device), tail
        self.references, self.who = references, who
        self.user: CaseCode | None = None  # the reference's child, once the op is asked for
        self.calls = 0
        self.sock: socket.socket | None = None
        self.peer = -1  # the child's arena, read with preadv
        self.arena = wire.Arena("kcgate-judge")
        self.kernel_s = 0.0  # the kernel's own time in the child, every call and backward of the case
        self.changes: list[str] = []  # process state the kernel changed (restored there), not yet reported
        self.ended = ""

    def kernel(self, contract: Any, target: str, paths: Any, dtype: torch.dtype, op: Any) -> RemoteKernel:
        names = [str(n) for n in (getattr(op, "input_names", ()) or ())]
        self.begin(contract, paths, target=target, dtype=str(dtype).removeprefix("torch."), names=names)
        return RemoteKernel(self)

    def op(self, contract: Any, paths: Any) -> Any:
        """The contract's op family; where it names a reference (a custom op's, or a family's oracle
        replaced) or a ``tolerance.baseline``, its user functions are remote ones, called in the reference's
        own child."""
        if not (contract.reference or contract.tolerance.baseline) or self.references is None:
            return op_for(contract, paths)
        from kcgate.sandbox.remote_op import remote_op

        who = "reference" if contract.reference else "baseline"  # whose process a crash's message names
        user = self.user = CaseCode(self.references, str(self.device), self.tail, who=who)
        answer = user.begin(contract, paths, role="reference")
        names = (
            [str(n)[:100] for n in answer.get("names", [])[:64]]
            if isinstance(answer.get("names"), list)
            else []
        )
        return remote_op(contract, paths, lambda fn: RemoteKernel(user, fn), tuple(names))

    def begin(self, contract: Any, paths: Any, **fields: Any) -> dict[str, Any]:
        """Fork this case's child and hand it the contract (the judge's, pickled: trusted) and its arena."""
        self.sock, self.pid = self.sandbox.fork()
        blob = base64.b64encode(pickle.dumps((contract, paths))).decode("ascii")
        message = {"op": "begin", "contract": blob, "device": str(self.device), **fields}
        return self.request(message, fds=(self.arena.fd,))

    def stopwatch(self, default: Callable[[], Any]) -> Callable[[], Any]:
        """The kernel's time as the child measured it (the crossing is the judge's, not the kernel's)."""
        return lambda: _RemoteWatch(self)

    def request(self, message: dict[str, Any], fds: tuple[int, ...] = ()) -> dict[str, Any]:
        """The child's answer; what the kernel raised is raised here, as an exception of the same name."""
        if self.sock is None:
            raise SandboxLost(self._lost("no sandbox for this case"))
        try:
            messages.send(self.sock, message, fds)
            begin = message["op"] == "begin"
            answer = messages.recv(self.sock, fds=int(begin))
            if begin:
                (self.peer,) = answer.pop("_fds")
            self.changes += _strings(answer.get("changed", []))
        except (EOFError, OSError) as exc:
            raise SandboxLost(self._lost(f"its socket closed ({exc})")) from None
        except messages.WireError as exc:
            raise SandboxLost(self._lost(f"it broke the protocol: {exc}", kill=True)) from None
        if "error" in answer:
            _raise(answer["error"])
        return answer

    def take_changes(self) -> list[str]:
        changed, self.changes = self.changes, []
        return changed

    def case_changes(self) -> list[str]:
        """The state the case left (the child's check at its end); ends the child (and the reference's,
        whose own state is its own)."""
        if self.user is not None:
            self.user.case_changes()
        if self.sock is None:
            return self.take_changes()
        try:
            self.request({"op": "end"})
        except (SandboxLost, Exception):  # noqa: BLE001 — a child lost at its end changes no verdict
            pass
        return self.take_changes()

    def close(self) -> None:
        """End the child (killed if it still runs) and reap it; the reference's too."""
        if self.user is not None:
            self.user.close()
            self.user = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            self.ended = self.sandbox.ended(kill=True)
        for fd in (self.arena.fd, self.peer):
            if fd >= 0:
                os.close(fd)
        self.arena.fd = self.peer = -1

    def _lost(self, why: str, kill: bool = False) -> str:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            self.ended = self.sandbox.ended(kill=kill)
        tail = self.tail().strip() if self.tail is not None else ""
        return (
            f"the {self.who}'s process {self.ended or 'ended'} mid-case ({why}); the case ran alone in a sandbox "
            "forked fresh for it, so this is the case's own crash, not an earlier case's damage"
            + (f"\n--- stderr tail ---\n{tail}" if tail else "")
        )


class _RemoteWatch:
    def __init__(self, code: CaseCode) -> None:
        self.code, self.t0 = code, 0.0

    def start(self) -> None:
        self.t0 = self.code.kernel_s

    def stop(self) -> float:
        return self.code.kernel_s - self.t0


class RemoteKernel:
    """``kernel(*inputs, **extra)`` as the harness calls it, run in the case's child; ``fn``: which of the
    child's functions (the kernel, or one of the reference's: kcgate.sandbox.reference)."""

    def __init__(self, code: CaseCode, fn: str = "kernel") -> None:
        self.code, self.fn = code, fn
        self.param_names: dict[str, str] = {}
        self.__name__ = self.__qualname__ = fn

    def take_changes(self) -> list[str]:
        return self.code.take_changes()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call = _Call(self, args, kwargs)
        if not (torch.is_grad_enabled() and any(t.requires_grad for t in call.flat)):
            return call.run(grad=torch.is_grad_enabled())
        outs = _Bridge.apply(call, *call.flat)
        return call.tree_with(outs[:-1])


class _Call:
    """One call's arguments (their tensors flattened), its reply, and its backward."""

    def __init__(self, kernel: RemoteKernel, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.kernel, self.code = kernel, kernel.code
        self.flat: list[torch.Tensor] = []
        self.args = wire.encode(args, self._index)
        self.kwargs = wire.encode(kwargs, self._index)
        self.fresh: list[torch.Tensor] = []
        self.rg: list[bool] = []
        self.tree: Any = None
        self.storages: list[tuple[torch.Tensor, int]] = []
        self.id = 0  # the call's number in its child: its backward names it

    def _index(self, t: torch.Tensor) -> int:
        self.flat.append(t)
        return len(self.flat) - 1

    def run(self, grad: bool) -> Any:
        self.code.arena.reset()
        self.storages = []
        storages, tensors = self._put(self.flat)
        self.code.calls += 1
        self.id = self.code.calls
        answer = self.code.request(
            {
                "op": "call",
                "fn": self.kernel.fn,
                "id": self.id,
                "storages": storages,
                "tensors": tensors,
                "args": self.args,
                "kwargs": self.kwargs,
                "grad": grad,
                "mkldnn": bool(torch._C._get_mkldnn_enabled()),
            }  # fmt: skip
        )
        self._copy_back()
        self.code.kernel_s += _seconds(answer.get("kernel_s"))
        names = answer.get("param_names")
        if isinstance(names, dict):
            self.kernel.param_names.update({str(k): str(v) for k, v in names.items()})
        self.tree = self._decode(answer.get("result"))
        return self.tree

    def backward(self, grads: tuple[torch.Tensor | None, ...]) -> list[torch.Tensor | None]:
        """The gradients of the differentiated arguments for ``grads`` on the fresh outputs (None: none)."""
        given = [g for g in grads if g is not None]
        storages, tensors = self._put(given, record=False)
        it = iter(range(len(given)))
        index = [None if g is None else next(it) for g in grads]
        answer = self.code.request(
            {"op": "backward", "id": self.id, "storages": storages, "tensors": tensors, "grads": index}
        )
        self._copy_back()
        self.code.kernel_s += _seconds(answer.get("kernel_s"))
        got = iter(self._output(d) if d is not None else None for d in _list(answer.get("grads")))
        leaves = [t.requires_grad for t in self.flat]
        out = [next(got, None) if rg else None for rg in leaves]
        return [None if g is None else g.to(t.dtype) for g, t in zip(out, self.flat)]

    def _put(self, tensors: list[torch.Tensor], record: bool = True) -> tuple[list[Any], list[Any]]:
        """Each distinct storage's bytes into the judge's arena (guard bands and all) and each tensor as a view
        of one; ``record``: the storage is copied back after the call and after its backward (the arguments'
        are; dY's is not)."""
        seen: dict[tuple[str, int], int] = {}
        storages: list[Any] = []
        descs: list[dict[str, Any]] = []
        for t in tensors:
            if t.device.type == "meta":  # a shape and a dtype: no bytes (a reference's outputs' dtypes)
                descs.append({"meta": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")})
                continue
            s = t.untyped_storage()
            key = (str(s.device), s.data_ptr())
            if key not in seen:
                seen[key] = len(storages)
                data = _storage_bytes(t)
                off = self.code.arena.put(data if data.device.type == "cpu" else data.cpu())
                storages.append({"off": off, "n": data.numel(), "device": str(data.device)})
                if record:
                    self.storages.append((data, off))
            descs.append({"s": seen[key], "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                          "stride": list(t.stride()), "at": t.storage_offset(), "rg": t.requires_grad})  # fmt: skip
        return storages, descs

    def _copy_back(self) -> None:
        """What the kernel wrote into its arguments' storages (a mutation, a guard band) into the judge's own."""
        with torch.no_grad():
            for data, off in self.storages:
                data.copy_(self.code.arena.bytes(off, data.numel()))

    def _decode(self, tree: Any) -> Any:
        try:
            return wire.decode(tree, self._tensor)
        except messages.WireError as exc:
            raise SandboxLost(
                self.code._lost(f"it sent a result that is not data: {exc}", kill=True)
            ) from None

    def _tensor(self, d: Any) -> torch.Tensor:
        if isinstance(d, dict) and "arg" in d:
            i = d["arg"]
            if not isinstance(i, int) or not 0 <= i < len(self.flat):
                raise messages.WireError("an argument index out of range")
            return self.flat[i]
        t = self._output(d)
        if t.device.type == "meta":
            return t
        self.fresh.append(t)
        self.rg.append(bool(d.get("rg")) and t.is_floating_point())
        return t

    def _output(self, d: Any) -> torch.Tensor:
        if not isinstance(d, dict):
            raise messages.WireError("a tensor descriptor that is not an object")
        dtype, shape = wire.dtype_of(d.get("dtype")), wire.dims(d.get("shape", d.get("meta")))
        if "meta" in d:
            return torch.empty(shape, dtype=dtype, device="meta")
        n = _numel(shape) * torch.empty((), dtype=dtype).element_size()
        off = d.get("off")
        if not isinstance(off, int):
            raise messages.WireError("a tensor descriptor without an offset")
        t = (
            wire.read_bytes(self.code.peer, off, n).view(dtype).view(shape)
            if n
            else torch.empty(shape, dtype=dtype)
        )
        where = wire.device_of(d.get("device"))
        if where.type not in ("cpu", self.code.device.type):
            raise messages.WireError("a tensor on a device the case does not run on")
        return t if where.type == "cpu" else t.to(self.code.device)

    def tree_with(self, outs: tuple[torch.Tensor, ...]) -> Any:
        """The result with each fresh tensor replaced by the bridge's output of it (carrying its backward)."""
        swap = {id(f): o for f, o in zip(self.fresh, outs)}
        return _swap(self.tree, swap)


class _Bridge(torch.autograd.Function):
    """The kernel's call as one node of the judge's autograd graph: its backward is the child's."""

    @staticmethod
    def forward(ctx: Any, call: _Call, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        call.run(grad=True)
        outs = (*call.fresh, torch.zeros(0))
        ctx.call = call
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(*[o for o, rg in zip(outs, [*call.rg, False]) if not rg])
        return outs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:  # type: ignore[override]
        return (None, *ctx.call.backward(grads[:-1]))


def _swap(value: Any, swap: dict[int, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return swap.get(id(value), value)
    if isinstance(value, dict):
        return {k: _swap(v, swap) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_swap(v, swap) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_swap(v, swap) for v in value)
    return value


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """The whole storage under ``t`` as uint8 (a view: copying into it writes the storage)."""
    s = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=s.device).set_(s)  # type: ignore[call-overload]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _seconds(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and 0 <= v < 1e6 else 0.0


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _strings(v: Any) -> list[str]:
    return [str(s)[:200] for s in v[:50]] if isinstance(v, list) else []


# the exception types a child's error may name, a table fixed when the judge starts (the name is looked up
# here, never as an attribute path): builtins' and torch's out-of-memory error
_EXCEPTIONS: dict[str, type[Exception]] = {
    **{n: t for n, t in vars(builtins).items() if isinstance(t, type) and issubclass(t, Exception)},
    "OutOfMemoryError": torch.OutOfMemoryError,
}


def _raise(error: Any) -> NoReturn:
    """What the kernel raised, as an exception of the same type name here (a builtin's subclass where the name
    is a builtin exception's, so ImportError, MemoryError and sys.exit read as they did in one process)."""
    error = error if isinstance(error, dict) else {}
    name, text = wire._safe(error.get("type")), str(error.get("message", ""))[:4000]
    if name == "SystemExit":
        code = error.get("code")
        raise SystemExit(code if code is None or isinstance(code, (int, str)) else None)
    base = _EXCEPTIONS.get(name, Exception)
    try:
        exc = type(name, (base,), {"__str__": lambda self: text, "__module__": "sandbox"})(text)
    except Exception:  # noqa: BLE001 — a builtin whose constructor takes more (UnicodeDecodeError)
        exc = type(name, (Exception,), {"__str__": lambda self: text, "__module__": "sandbox"})(text)
    raise exc
