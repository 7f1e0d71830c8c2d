"""The worker's heap: freed tensor memory kept for the next allocation within a case, released between cases.

A case at 256×4096 allocates and frees hundreds of 8 MB fp64 tensors (inputs, the oracle, the bounds, the
comparisons). glibc serves each from a fresh mmap (or trims the heap top after it), so every one is faulted
in and zeroed by the kernel again: 36,000-101,000 minor page faults and 0.08-0.29 s of system time in a
0.7-0.9 s family rmsnorm case (docs/derived-bound.md, session 61). Raising glibc's mmap threshold to its
maximum (32 MB) and its trim threshold past it keeps freed blocks in the heap for reuse: the faults fall to a
few thousand. Between cases ``release`` (``malloc_trim``) hands the free pages back to the system where
more than ``keep`` bytes of the heap are free: the worker keeps up to a quarter of its address-space cap
(``kcgate run --memory-limit-gb``: by default half the RAM over the workers) resident between cases, all of it where there
is no cap, so that the next case of the same size finds its memory already faulted in. Trimming after every
case gave back the whole gain: a 256×4096 case leaves ~500 MB free, and faulting it in again is the system
time above. (A trim returns pages, not address space: the heap's free blocks count against RLIMIT_AS either
way, as glibc's own heap did before; its default already served 8 MB blocks from the heap once one was freed.)

glibc only (Linux); elsewhere both are no-ops. Set through ``mallopt``, which fixes the thresholds (glibc's
dynamic adjustment is then off).
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit): a 1024×4096 fp64 tensor
TRIM_THRESHOLD = 1 << 30  # within a case the heap top is never trimmed; ``release`` trims between cases
KEEP_SHARE = 4  # the worker keeps up to 1/KEEP_SHARE of its address-space cap free between cases


@functools.cache
def _mallinfo2() -> type[ctypes.Structure]:
    """glibc's ``struct mallinfo2``, defined on first use: a ctypes class keeps its bindings in no plain dict,
    so at module level it would be a kcgate namespace the judge's state check cannot tag (engine/torch_state)."""

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
            "keepcost",
        )]  # fmt: skip

    return MallInfo2


@functools.cache
def _libc() -> Any:
    """glibc's handle, or None (another C library, another OS)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:  # pragma: no cover - no dynamic C library to load
        return None


def keep_freed_memory() -> bool:
    """Serve this process's allocations up to 32 MB from the heap and keep freed blocks there (whether glibc
    took both settings)."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def free_bytes() -> int | None:
    """The heap's free bytes, resident or handed back (glibc's ``mallinfo2().fordblks``), or None where glibc
    cannot say (before 2.33)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = _mallinfo2()
    return int(libc.mallinfo2().fordblks)


def keep_for(cap: int) -> int | None:
    """The free heap memory a worker under address-space cap ``cap`` keeps between cases (0: no cap, keep all)."""
    return cap // KEEP_SHARE if cap > 0 else None


def release(keep: int | None) -> bool:
    """Give the heap's free memory back to the system (between cases) where more than ``keep`` bytes of it
    are free (where glibc cannot say how much, always; ``None``: never); whether it trimmed."""
    libc = _libc()
    if libc is None or keep is None:
        return False
    free = free_bytes()
    if free is not None and free <= keep:
        return False
    libc.malloc_trim(0)
    return True
