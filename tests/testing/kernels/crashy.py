"""Kernels that crash, hang, exit, flood or lie, each in its own way. Used through real subprocess workers."""

from __future__ import annotations

import ctypes
import os
import sys
import time

import torch


def good(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def segfault(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    ctypes.string_at(0)  # reads address 0: SIGSEGV
    return a @ b


def abort(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    os.abort()


def hang(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    time.sleep(3600)
    return a @ b


def oom(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    hoard = []
    while True:
        hoard.append(torch.empty(2**28))  # 1 GiB at a time: address space runs out fast under the cap


def exit0(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    sys.exit(0)


def hard_exit0(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    os._exit(0)


def flood(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    sys.stdout.write("x" * (10 * 1024 * 1024))
    sys.stdout.flush()
    return a @ b


def mutate(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = a @ b
    a.mul_(0.5)  # scribbles on its input
    return out


def raises(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("kernel exploded")


def slow(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    time.sleep(float(os.environ.get("KCGATE_TEST_SLOW_S", "0.4")))
    return a @ b


def sleepy(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A kernel far slower than the progress interval: KCGATE_TEST_SLEEP_S seconds a call (default 2.5)."""
    time.sleep(float(os.environ.get("KCGATE_TEST_SLEEP_S", "2.5")))
    return a @ b


_LATE: list[object] = []


def late_exit(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Returns a correct result, and leaves a thread that ends the worker 0.5 s later (late damage)."""
    if not _LATE:
        import threading

        _LATE.append(threading.Timer(0.5, os._exit, (3,)))
        _LATE[0].start()  # type: ignore[attr-defined]
    return a @ b


def wrong_then_segfault_when_small(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A wrong matmul (an offset) at its declared shapes that crashes the process at any smaller M: what a
    kernel whose launch grid assumes a minimum size does when a shrink tries a smaller shape."""
    if a.shape[0] < 32:
        ctypes.string_at(0)  # SIGSEGV
    return a @ b + 1.0
