"""What crosses between the judge and the sandbox besides the messages (``kcgate.sandbox.messages``): tensor
bytes in memfd arenas, and values as tagged JSON trees (docs/security.md#the-judge-and-the-sandbox).

Each side writes its own arena and reads the other's. The judge's arena is sealed against shrinking, so a
sandbox cannot pull pages from under the judge's mapping; the judge reads the sandbox's arena with ``preadv``
(a short read, never a SIGBUS). Nothing the sandbox sends is unpickled: messages are JSON, values are tagged
JSON trees, tensors are (offset, dtype, shape) descriptors that the judge checks before it reads a byte.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import re
from collections import namedtuple
from typing import Any

import torch

from kcgate.sandbox.messages import WireError

ALIGN = 64
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}\Z")
DTYPES = {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}


class Arena:
    """A memfd this side writes and the other maps or reads: a bump allocator reset per message."""

    def __init__(self, name: str) -> None:
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)  # never shrunk under a mapping
        self.size, self.used = 0, 0
        self.mm: mmap.mmap | None = None

    def reset(self) -> None:
        self.used = 0

    def put(self, data: torch.Tensor) -> int:
        """Copy a contiguous uint8 tensor (on any device) into the arena; its offset."""
        n = data.numel()
        offset = -(-self.used // ALIGN) * ALIGN
        self._reserve(offset + n)
        if n:
            self.bytes(offset, n).copy_(data)
        self.used = offset + n
        return offset

    def bytes(self, offset: int, n: int) -> torch.Tensor:
        """The arena's bytes [offset, offset + n) as a uint8 tensor (a view: writes land in the arena)."""
        assert self.mm is not None
        return torch.frombuffer(self.mm, dtype=torch.uint8, count=n, offset=offset)

    def _reserve(self, n: int) -> None:
        if n <= self.size:
            return
        size = max(n, 2 * self.size, 1 << 20)
        size = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
        os.ftruncate(self.fd, size)
        self.size, self.mm = size, mmap.mmap(self.fd, size)  # the old mapping lives while views hold it


class Mapped:
    """The other side's arena mapped here (the sandbox's view of the judge's arguments)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.size = fd, 0
        self.mm: mmap.mmap | None = None

    def bytes(self, offset: int, n: int) -> torch.Tensor:
        if offset + n > self.size:
            self.size = os.fstat(self.fd).st_size
            self.mm = mmap.mmap(self.fd, self.size) if self.size else None
        if offset < 0 or n < 0 or offset + n > self.size:
            raise WireError(f"bytes [{offset}, {offset + n}) outside an arena of {self.size}")
        if not n:
            return torch.empty(0, dtype=torch.uint8)
        return torch.frombuffer(self.mm, dtype=torch.uint8, count=n, offset=offset)  # type: ignore[arg-type]


def read_bytes(fd: int, offset: int, n: int) -> torch.Tensor:
    """A private copy of the other side's arena bytes [offset, offset + n): read, never mapped."""
    if offset < 0 or n < 0 or offset + n > os.fstat(fd).st_size:
        raise WireError(f"bytes [{offset}, {offset + n}) outside the sandbox's arena")
    out = torch.empty(n, dtype=torch.uint8)
    got = os.preadv(fd, [out.numpy()], offset) if n else 0  # type: ignore[list-item]
    if got != n:
        raise WireError(f"read {got} of {n} bytes from the sandbox's arena")
    return out


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's data as uint8 (a view)."""
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)


def dtype_of(name: Any) -> torch.dtype:
    if not isinstance(name, str) or name not in DTYPES:
        raise WireError(f"unknown dtype {str(name)[:40]!r}")
    return DTYPES[name]


def device_of(name: Any) -> torch.device:
    """A device named by the other side: a string torch parses as one, else a WireError."""
    if not isinstance(name, str) or len(name) > 40:
        raise WireError("a device that is not a short string")
    try:
        return torch.device(name)
    except (RuntimeError, ValueError):
        raise WireError(f"unknown device {name!r}") from None


def dims(value: Any, limit: int = 64) -> tuple[int, ...]:
    """A shape or stride list from the other side: at most ``limit`` non-negative ints."""
    if not isinstance(value, list) or len(value) > limit:
        raise WireError("a shape that is not a list of at most 64 sizes")
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 48 for v in value):
        raise WireError("a shape with a size that is not a non-negative integer")
    return tuple(value)


def encode(value: Any, tensor: Any) -> Any:
    """``value`` as a tagged JSON tree; each tensor becomes ``{"T": tensor(t)}``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor):
        return {"T": tensor(value)}
    if isinstance(value, dict):
        return {"di": [[_key(k), encode(v, tensor)] for k, v in value.items()]}
    fields = getattr(value, "_fields", None)
    if isinstance(value, tuple) and fields is not None:
        return {
            "nt": type(value).__name__,
            "f": list(map(str, fields)),
            "v": [encode(v, tensor) for v in value],
        }
    if isinstance(value, (tuple, list)):
        return {"tu" if isinstance(value, tuple) else "li": [encode(v, tensor) for v in value]}
    if isinstance(value, torch.dtype):
        return {"dt": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"dev": str(value)}
    return {"ob": type(value).__name__}


def _key(k: Any) -> Any:
    return k if k is None or isinstance(k, (bool, int, float, str)) else str(k)


def decode(tree: Any, tensor: Any, depth: int = 0) -> Any:
    """The value ``encode`` made (``tensor`` maps a tensor's descriptor back); other shapes are a WireError."""
    if depth > 64:
        raise WireError("a value nested over 64 deep")
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if not isinstance(tree, dict) or len(tree) not in (1, 3):
        raise WireError("a value that is not a tagged JSON tree")
    items = [decode(v, tensor, depth + 1) for v in _list(tree.get("v", tree.get("tu", tree.get("li", []))))]
    if "T" in tree:
        return tensor(tree["T"])
    if "tu" in tree:
        return tuple(items)
    if "li" in tree:
        return items
    if "di" in tree:
        return {k: decode(v, tensor, depth + 1) for k, v in map(_pair, _list(tree["di"]))}
    if "nt" in tree:
        return _namedtuple(tree["nt"], tree["f"], items)
    if "dt" in tree:
        return dtype_of(tree["dt"])
    if "dev" in tree:
        return device_of(tree["dev"])
    if "ob" in tree:
        return _opaque(tree["ob"])
    raise WireError("a value with an unknown tag")


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise WireError("a tagged value whose items are not a list")
    return v


def _pair(p: Any) -> tuple[Any, Any]:
    if not isinstance(p, list) or len(p) != 2 or isinstance(p[0], (list, dict)):
        raise WireError("a dict item that is not a (key, value) pair")
    return p[0], p[1]


def _namedtuple(name: Any, fields: Any, items: list[Any]) -> Any:
    """A named tuple of the same type name and fields, made here: data, never the other side's class."""
    names = [str(f) for f in _list(fields)]
    if len(names) != len(items):
        raise WireError("a named tuple whose fields and items differ in number")
    cls = namedtuple(_safe(name), names, rename=True)  # type: ignore[misc]  # noqa: PYI024
    return cls(*items)


def _opaque(name: Any) -> Any:
    """A stand-in of the same type name for a value that is not data (the messages name its type)."""
    return type(_safe(name), (), {"__repr__": lambda self: f"<{type(self).__name__}>"})()


def _safe(name: Any) -> str:
    return name if isinstance(name, str) and _NAME.match(name) else "object"
