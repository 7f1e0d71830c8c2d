"""kcgate.util.heap: freed tensor memory kept in the heap within a case, handed back between cases past a share
of the worker's cap. Each test runs in a fresh interpreter: the settings are process-wide."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kcgate.util import heap

glibc = pytest.mark.skipif(heap.free_bytes() is None, reason="glibc 2.33+ (mallinfo2) only")


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip()


def test_keep_share_of_the_cap() -> None:
    assert heap.keep_for(8 * 2**30) == 2 * 2**30  # a quarter of the cap
    assert heap.keep_for(0) is None  # no cap (a CUDA worker): nothing to hand back for


def test_release_without_a_limit_keeps_everything() -> None:
    assert heap.release(None) is False


@glibc
def test_freed_tensors_stay_in_the_heap_until_released() -> None:
    out = _run(
        """
        import resource, torch
        from kcgate.util import heap
        assert heap.keep_freed_memory()
        for _ in range(4):  # later rounds reuse the first's pages (after a round or two of fitting): no new faults
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            xs = [torch.ones(2**20, dtype=torch.float64) for _ in range(16)]  # 16 x 8 MB
            del xs
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        resident = lambda: int(open("/proc/self/statm").read().split()[1]) * 4096
        free, before = heap.free_bytes(), resident()
        kept = heap.release(2 * free)  # under the share kept: not trimmed
        trimmed = heap.release(2**20)  # past it: the free pages handed back
        print(free, faults, kept, trimmed, before - resident())
        """
    )
    free, faults, kept, trimmed, returned = out.split()
    assert int(free) >= 16 * 2**23  # the 16 freed tensors, kept
    assert int(faults) < 16 * 2**23 // 4096 // 4  # reused, not faulted in again (a page a fault)
    assert (kept, trimmed) == ("False", "True")
    assert int(returned) >= 8 * 2**23  # most of the 128 MB no longer resident
