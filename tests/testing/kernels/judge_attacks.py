"""Kernels that edit the judge (issue 54, D1 and its kind): each returns a softmax 5% off and changes, in its
own process, what computes the verdict: kcgate's error function's code in place, the names it is bound to,
torch's, numpy's and builtins' functions; or damages its process for whatever runs there next. With the
kernel in a sandbox of its own (kcgate.sandbox), none of it reaches the judge. Used through real ``kcgate run``
workers (tests/sandbox/test_judge_attacks.py)."""

from __future__ import annotations

import builtins
import ctypes
import os

import numpy as np
import torch

_SOFTMAX = torch.softmax


def _off(x: torch.Tensor) -> torch.Tensor:
    return _SOFTMAX(x, -1) * 1.05


def _zeros(t, r):  # type: ignore[no-untyped-def]
    import numpy

    return numpy.zeros(numpy.shape(r))


def code_swap(x: torch.Tensor) -> torch.Tensor:
    """D1: kcgate.numerics.metrics.minus's __code__ replaced in place (every binding of it sees the change)."""
    import kcgate.numerics.metrics as metrics

    metrics.minus.__code__ = _zeros.__code__
    return _off(x)


def rebind(x: torch.Tensor) -> torch.Tensor:
    """Every function of kcgate's metrics and comparison modules rebound to one that reports no error."""
    import kcgate.engine.harness as harness
    import kcgate.numerics.metrics as metrics

    for module in (metrics, harness):
        for name in ("minus", "compare", "to_metrics", "f64", "host"):
            if hasattr(module, name):
                setattr(module, name, lambda *a, **k: np.zeros(1))
    return _off(x)


def patch_torch(x: torch.Tensor) -> torch.Tensor:
    """torch's subtraction, absolute value and comparisons made to say 'no error', process-wide."""
    out = _off(x)
    torch.Tensor.__sub__ = lambda a, b: torch.zeros_like(a)  # type: ignore[method-assign,assignment]
    torch.Tensor.abs = lambda a: torch.zeros_like(a)  # type: ignore[method-assign,assignment]
    torch.sub = lambda a, b, **k: torch.zeros_like(a)  # type: ignore[assignment]
    torch.allclose = lambda *a, **k: True  # type: ignore[assignment]
    return out


def patch_numpy(x: torch.Tensor) -> torch.Tensor:
    """numpy's subtraction and absolute value replaced by zeros, in place on the ufunc's module."""
    np.subtract = lambda a, b, **k: np.zeros(np.shape(b))  # type: ignore[assignment]
    np.abs = np.absolute = lambda a, **k: np.zeros(np.shape(a))  # type: ignore[assignment]
    return _off(x)


def patch_builtins(x: torch.Tensor) -> torch.Tensor:
    """max, float and abs made to report nothing."""
    builtins.max = lambda *a, **k: 0.0  # type: ignore[assignment]
    builtins.abs = lambda a: 0.0  # type: ignore[assignment]
    return _off(x)


def judge_memory(x: torch.Tensor) -> torch.Tensor:
    """Opens the judge's memory for writing (/proc/PID/mem of the process that started its sandbox): it must
    be refused; where it is not, the kernel passes by returning the right answer (so the test sees it)."""
    judge = _ancestor(os.getpid(), 2)  # this child -> the sandbox server -> the judge
    try:
        with open(f"/proc/{judge}/mem", "r+b"):
            pass
    except OSError as exc:
        raise PermissionError(f"the judge's memory is closed to the kernel: {type(exc).__name__}") from None
    return _SOFTMAX(x, -1)


def _ancestor(pid: int, up: int) -> int:
    for _ in range(up):
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return pid


def corrupt_heap(x: torch.Tensor) -> torch.Tensor:
    """A right softmax, then a heap object of its process corrupted: torch.softmax's type pointer zeroed, so
    the next call of torch.softmax in this process crashes (a group_norm release that corrupted memory made a
    later, unrelated case crash: issue 53)."""
    out = _SOFTMAX(x, -1)
    ctypes.memset(id(torch.softmax) + 8, 0, 8)
    return out


def change_state(x: torch.Tensor) -> torch.Tensor:
    """A right softmax, then torch.softmax replaced process-wide by one 5% off, where kcgate's global-state
    check does not look (the module object's own attribute, through its __dict__)."""
    out = _SOFTMAX(x, -1)
    torch.__dict__["softmax"] = lambda t, dim, **k: _SOFTMAX(t, dim) * 1.05
    torch.nn.functional.__dict__["softmax"] = torch.__dict__["softmax"]
    return out


def honest_off(x: torch.Tensor) -> torch.Tensor:
    """Another contract's honest kernel, 5% off, through torch.softmax as it finds it now."""
    return torch.softmax(x, -1) * 1.05


def honest(x: torch.Tensor) -> torch.Tensor:
    """A right softmax through torch.softmax as it finds it now."""
    return torch.softmax(x, -1)


def kill_judge(x: torch.Tensor) -> torch.Tensor:
    """Kills the process that judges it (the worker that started its sandbox): the case is lost with its worker."""
    os.kill(_ancestor(os.getpid(), 2), 9)
    return _SOFTMAX(x, -1)


def socket_garbage(x: torch.Tensor) -> torch.Tensor:
    """Writes a forged answer and garbage to every socket it holds (its sandbox's line to the judge), then
    returns the right softmax: the judge reads a broken protocol, and the case is an error of its own."""
    import socket
    import stat

    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                sock = socket.socket(fileno=os.dup(fd))
                sock.sendall(b'\x10\x00\x00\x00{"result": null}' + b"\xff" * 64)
                sock.close()
        except OSError:
            continue
    return _SOFTMAX(x, -1)
