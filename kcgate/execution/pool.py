"""Several workers at once (``kcgate run --workers N``): the plan is cut into chunks, and N lanes (each an
isolated executor with its own worker process, or a router of env workers) take chunks from one queue, so a
slow chunk never holds the others back. Each lane pipelines its chunk as one worker does alone.

Results come back as cases finish, not in plan order (the run loop journals each at once and orders the
results file). A case still runs alone in its worker: its seed, inputs and verdict do not depend on which
lane ran it, but the lanes share the machine, so timing measurements (``kernel_s``) see each other.
"""

from __future__ import annotations

import os
import queue
import re
import sys
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from kcgate.devices import check_name
from kcgate.errors import UsageError
from kcgate.execution import handoff
from kcgate.execution.executors import (
    EnvRouter,
    Executor,
    InProcessExecutor,
    IsolatedExecutor,
    check_isolation,
    isolated,
)
from kcgate.plan import Case
from kcgate.results.model import CaseResult, Fingerprint
from kcgate.util import bounded

Lane = Union[IsolatedExecutor, EnvRouter]  # an Executor that can also be halted from another thread

CHUNK_MAX = 32  # cases a lane takes at once: its pipeline drains once per chunk
CHUNKS_PER_LANE = 8  # at least this many chunks per lane, when the plan is long enough: the tail balances
JOIN_S = 10.0  # how long close() waits for a lane's thread after killing its worker

# ``--workers auto`` (the default): how many workers, and when the extra ones are worth starting
AUTO_MAX = 8  # each worker holds its own torch (about 250 MB resident)
AUTO_RAM = 4 * 2**30  # each worker's share of half the RAM (its address-space cap) stays at least this
# one worker per this many cases. The workers a plan of this size uses start together with the first, before
# the plan is made (``WorkerPool.warm``), so their torch imports (about 1.1 s of CPU each) overlap one another
# on idle cores instead of following the first's. On the 2-vCPU AMD VM (benchmarks/scale.py, C-PRC-01 matmul
# cases of about 0.9 ms): two workers started together ran 400 cases in 1.51-1.54 s against one worker's
# 1.58-1.60 and 2,000 in 2.64-2.70 against 3.16-3.19, and 40 in the same 1.27 s; started after the plan, as
# before, a second worker made 2,000 cases only 5% faster.
AUTO_CASES_PER_WORKER = 250

# Device nodes of the accelerators torch backends drive (NVIDIA, AMD's ROCm, Intel GPUs, Huawei Ascend, other
# accel drivers), and macOS, where MPS may be: where any is present, ``--device auto`` may resolve to one, so
# extra workers are not started before the first worker has said which device it found.
ACCELERATOR_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia0",
    "/dev/kfd",
    "/dev/dri",
    "/dev/davinci_manager",
    "/dev/accel",
)


def accelerator_possible() -> bool:
    """Torch-free: whether ``--device auto`` could find an accelerator on this machine."""
    return sys.platform == "darwin" or any(os.path.exists(node) for node in ACCELERATOR_NODES)


def worker_count(text: str, isolation: str, device: str | None = "cpu") -> int:
    """``--workers``: a positive integer, or ``auto``: with worker processes and ``--device cpu`` (or no
    ``--device``), one per CPU this process may run on, at most AUTO_MAX and one per AUTO_RAM of half the RAM;
    else 1. Under ``auto`` a plan uses one worker per AUTO_CASES_PER_WORKER cases of these, and only one when
    the first worker found an accelerator (``WorkerPool.lanes_for``): workers on one accelerator would share
    it, a context each, and see each other's timings."""
    if text == "auto":
        on_cpu = device in (None, "auto", "cpu")
        n = auto_workers(_cpus(), half_memory()) if on_cpu and isolation != "none" else 1
    elif _DIGITS.fullmatch(text) and int(text) > 0:  # ASCII only: "²".isdigit() holds, int("²") raises
        n = int(text)
    else:
        raise UsageError(f"--workers {text!r}: give a positive number of worker processes, or 'auto'")
    if n > 1 and isolation == "none":
        raise UsageError(
            f"--workers {text} needs worker processes: drop --isolation none, or use --workers 1"
        )
    return n


def auto_workers(cpus: int, half_of_ram: int) -> int:
    """``auto``'s most workers: one per CPU, at most AUTO_MAX, each with at least AUTO_RAM of half the RAM."""
    return max(1, min(cpus, AUTO_MAX, half_of_ram // AUTO_RAM))


def auto_lanes(cases: int, most: int) -> int:
    """How many of ``most`` workers ``auto`` uses for a plan of ``cases``: one per AUTO_CASES_PER_WORKER."""
    return max(1, min(most, 1 + cases // AUTO_CASES_PER_WORKER))


def _cpus() -> int:
    """The CPUs this process may run on: its affinity, and inside a container the cgroup's CPU quota."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpus()
    return min(cpus, quota) if quota else cpus


def half_memory() -> int:
    """Half the memory this process may use, for ``auto``'s count: the RAM, or a container's cgroup
    ``memory.max`` where that is lower. (The workers' address-space cap stays ``half_ram``: a cap below the
    virtual reservations torch and GPU runtimes make would fail them, and the cgroup bounds real memory.)"""
    ram, limit = half_ram(), cgroup_memory()
    return min(ram, limit // 2) if limit else ram


# cgroup v2, where ``--workers auto`` finds a container's limits; KCGATE_CGROUP_ROOT moves it (tests)
CGROUP_ROOT = "/sys/fs/cgroup"


def _cgroup_dirs() -> list[Path]:
    """This process's cgroup v2 directory and its ancestors up to the root (limits nest: the lowest holds)."""
    root = Path(os.environ.get("KCGATE_CGROUP_ROOT") or CGROUP_ROOT)
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    rel = next((line[3:].strip("/") for line in lines if line.startswith("0::")), "")
    here = root / rel if rel and (root / rel).is_dir() else root  # in a container, "/" is its own cgroup
    return [here, *[p for p in here.parents if p.is_relative_to(root)]]


_DIGITS = re.compile(r"[0-9]{1,19}")  # a count or a byte size: ASCII digits, below 2^63
CGROUP_FILE_BYTES = 4096  # a cgroup value is one short line; anything longer is not one


def _cgroup_values(name: str) -> list[str]:
    """The file's text at each level, read as an untrusted file: a regular file only (a FIFO is never
    waited on), capped while reading, ASCII; anything else gives no value from that level."""
    values = []
    for directory in _cgroup_dirs():
        try:
            values.append(bounded.read_capped(directory / name, CGROUP_FILE_BYTES).decode("ascii").strip())
        except ValueError:  # absent, not regular, too long, not ASCII (macOS, cgroup v1): no limit from here
            continue
    return values


def cgroup_memory() -> int:
    """The lowest cgroup v2 ``memory.max`` in bytes over this process's cgroup and its ancestors; 0: none."""
    limits = [int(v) for v in _cgroup_values("memory.max") if _DIGITS.fullmatch(v)]  # "max": unlimited
    return min(limits, default=0)


def cgroup_cpus() -> int:
    """The CPUs the lowest cgroup v2 ``cpu.max`` allows ("quota period": quota / period, rounded down, at
    least 1); 0: no quota ("max period")."""
    quotas = []
    for value in _cgroup_values("cpu.max"):
        quota, _, period = value.partition(" ")
        if _DIGITS.fullmatch(quota) and _DIGITS.fullmatch(period) and int(period) > 0:
            quotas.append(max(1, int(quota) // int(period)))
    return min(quotas, default=0)


def half_ram() -> int:
    """Half this machine's RAM in bytes (0 where it cannot be read): the workers' default address-space cap."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError):
        return 0


def chunks(cases: list[Case], lanes: int) -> deque[list[Case]]:
    """``cases`` in plan order, cut into chunks of at most CHUNK_MAX, about CHUNKS_PER_LANE per lane."""
    size = max(1, min(CHUNK_MAX, len(cases) // (lanes * CHUNKS_PER_LANE)))
    return deque(cases[i : i + size] for i in range(0, len(cases), size))


@dataclass(frozen=True)
class _Failed:
    """A lane's executor raised (a worker that cannot start): the run stops with that error."""

    error: BaseException


_DONE = object()  # a lane's thread has no more chunks to take


class WorkerPool:
    """N lanes behind one ``Executor``: ``run_many`` spreads chunks over them; everything else is lane 0's."""

    def __init__(self, lanes: list[Lane], auto: bool = False) -> None:
        """``auto``: a plan uses only as many lanes as ``auto_lanes`` gives for its size."""
        self.lanes, self.auto = lanes, auto
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.lanes[0].start()  # the others start when a plan has work for them (run_many), or ``warm``

    def warm(self, cases: int) -> None:
        """Start now every worker a plan of about ``cases`` cases will use (``lanes_for``, before the first
        worker has said which device it found: only where that can only be the CPU), so that their start-ups
        overlap the first's and the parent's planning."""
        for lane in self.lanes[: auto_lanes(cases, len(self.lanes)) if self.auto else len(self.lanes)]:
            lane.start()

    def handshake(self) -> tuple[str, Fingerprint]:
        return self.lanes[0].handshake()

    def default_shapes(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        return self.lanes[0].default_shapes()

    def run(self, case: Case, kernel: str | None = None) -> CaseResult:
        return self.lanes[0].run(case, kernel)

    def lanes_for(self, cases: int) -> int:
        """How many lanes a plan of ``cases`` uses: one when the first worker found an accelerator, whatever
        ``--workers`` says (workers are not pinned to devices, so more would all run on its device 0, a CUDA
        context each, timing each other's kernels); on the CPU all, or under ``auto`` one per
        AUTO_CASES_PER_WORKER cases."""
        if len(self.lanes) == 1:
            return 1
        device, _ = self.lanes[0].handshake()  # the device the first worker resolved (it is started)
        if device != "cpu":
            return 1
        return auto_lanes(cases, len(self.lanes)) if self.auto else len(self.lanes)

    def run_many(self, cases: list[Case], kernel: str | None = None) -> Iterator[CaseResult]:
        """The results of ``cases`` as they finish, from every lane at once. A call abandons any earlier one:
        its lanes finish the chunk they hold and are waited for, so no executor serves two threads."""
        self._stop.set()
        for t in self._threads:
            t.join()
        lanes = self.lanes_for(len(cases))
        work = chunks(cases, lanes)
        if lanes == 1 or len(work) < 2:
            yield from self.lanes[0].run_many(cases, kernel)
            return
        done: queue.SimpleQueue[object] = queue.SimpleQueue()
        lock, stop = threading.Lock(), threading.Event()
        self._stop = stop  # this call's: close() sets it; a lane's error sets it for this call only

        def take() -> list[Case] | None:
            with lock:
                return work.popleft() if work and not stop.is_set() else None

        def drive(lane: Lane) -> None:
            try:
                lane.handshake()  # ready first: a chunk taken while a worker imports torch waits seconds for it
                while (chunk := take()) is not None:
                    for result in lane.run_many(chunk, kernel):
                        done.put(result)
            except BaseException as exc:  # noqa: BLE001 — the main thread raises it
                done.put(_Failed(exc))
            finally:
                done.put(_DONE)

        used = self.lanes[: min(lanes, len(work))]
        for lane in used:  # spawn every worker now: their start-ups overlap (a lane that starts lazily waits)
            lane.start()
        self._threads = [
            threading.Thread(target=drive, args=(lane,), name=f"kcgate-lane-{i}", daemon=True)
            for i, lane in enumerate(used)
        ]
        for t in self._threads:
            t.start()
        yield from _collect(done, len(self._threads), stop, len(cases))

    def close(self) -> None:
        """Stop taking chunks, kill every worker so a lane blocked on one returns, then close the lanes."""
        self._stop.set()
        if any(t.is_alive() for t in self._threads):
            for lane in self.lanes:
                lane.halt()
            for t in self._threads:
                t.join(JOIN_S)
        for lane in self.lanes:
            lane.close()


def _collect(
    done: queue.SimpleQueue[object], running: int, stop: threading.Event, total: int
) -> Iterator[CaseResult]:
    """Yield the lanes' results until every case has one or every lane is done (a lane still starting when
    the others have run every case is not waited for); a lane's error stops the others' next chunk."""
    try:
        while running and total:
            item = done.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, _Failed):
                raise item.error
            else:
                total -= 1
                yield item  # type: ignore[misc]
    except BaseException:
        stop.set()
        raise


def make_executor(
    isolation: str,
    project: Any,
    device: str | None,
    memory_limit_gb: float = 0.0,
    timeout: float | None = None,
    workers: int = 1,
    auto: bool = False,
    expected_cases: int = 0,
) -> Executor:
    """The executor for ``--isolation``; its first worker is started at once, so its start-up overlaps the
    caller's work. ``workers`` > 1: a WorkerPool of that many lanes (the others start when a plan has chunks
    for them, and with ``auto`` only as many as the plan's size and device are worth), each worker capped at
    its share of half the RAM (under ``auto`` the first at half the RAM), or at ``memory_limit_gb`` each.
    ``expected_cases``: the plan's size as far as it is known before the worker's handshake (0: unknown);
    on a machine with no accelerator, the workers a plan of that size uses all start at once."""
    check_isolation(isolation)
    device = device or "auto"
    if device != "auto":
        check_name(device)
    if isolation == "none":
        return InProcessExecutor(project, device)
    limit = int(memory_limit_gb * 2**30) if memory_limit_gb > 0 else half_ram() // workers
    # under auto the first worker starts before the plan and the device are known: it keeps one worker's cap
    first = half_ram() if auto and memory_limit_gb <= 0 else limit
    text = handoff.encode(project)  # encoded once for every worker
    lanes = [
        isolated(project, device, first if i == 0 else limit, timeout, project_text=text)
        for i in range(workers)
    ]
    executor: Executor = lanes[0] if workers == 1 else WorkerPool(lanes, auto)
    executor.start()
    if (
        isinstance(executor, WorkerPool)
        and expected_cases
        and (device == "cpu" or (device == "auto" and not accelerator_possible()))
    ):
        executor.warm(expected_cases)
    return executor
