"""What only breaks on hardware, checked where the CPU can observe it: the numerics settings the worker sets
on CUDA and ROCm (and the fingerprint that records them), the address-space cap skipped where the runtime
reserves huge virtual address space, out-of-memory classified per case, the per-case time breakdown, and
one worker per accelerator. The CUDA-only halves (events, a real cuBLAS) run in benchmarks/device_check.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kcgate.contracts.load import load_project
from kcgate.devices.base import EventStopwatch, HostStopwatch, is_out_of_memory, read_attr
from kcgate.devices.cpu import CpuBackend
from kcgate.devices.cuda import CUBLAS_WORKSPACE, PRECISION, CudaBackend, blas_flags, configure_blas
from kcgate.devices.rocm import RocmBackend
from kcgate.engine.case import execute_case
from kcgate.execution.worker import _limit_memory
from kcgate.plan import make_plan
from tests.conftest import ROOT, kcgate


@pytest.fixture
def precision_restored() -> Iterator[None]:
    """The flags configure_blas writes, put back after the test (they are process-wide)."""
    before = {path: read_attr(torch, path) for path in PRECISION}
    try:
        yield
    finally:
        for path, value in before.items():
            owner, _, name = path.rpartition(".")
            setattr(read_attr(torch, owner), name, value)


def test_the_worker_sets_ieee_fp32_and_fp32_reductions_and_the_fingerprint_records_them(
    precision_restored: None,
) -> None:
    for path in PRECISION:  # torch's defaults allow reduced-precision reductions (and cuDNN TF32)
        owner, _, name = path.rpartition(".")
        setattr(read_attr(torch, owner), name, True)
    env: dict[str, str] = {}
    configure_blas(torch, env)
    assert all(read_attr(torch, path) is False for path in PRECISION)
    assert env == {"CUBLAS_WORKSPACE_CONFIG": CUBLAS_WORKSPACE}
    flags = blas_flags(torch)  # what the cuda and rocm fingerprints record
    for key in (
        "cuda_matmul_allow_tf32",
        "cudnn_allow_tf32",
        "cuda_matmul_allow_fp16_reduced_precision_reduction",
        "cuda_matmul_allow_bf16_reduced_precision_reduction",
    ):
        assert flags[key] == "False", key
    kept = {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}  # a runner's own setting is kept
    configure_blas(torch, kept)
    assert kept == {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}


def test_cuda_and_rocm_are_not_capped_and_time_with_events() -> None:
    assert not CudaBackend(torch).caps_address_space and not RocmBackend(torch).caps_address_space
    assert CpuBackend(torch).caps_address_space
    assert _limit_memory(2**40, CudaBackend(torch)) == 0  # would fail CUDA's first launch: not applied
    assert _limit_memory(0, CpuBackend(torch)) == 0
    assert isinstance(CpuBackend(torch).stopwatch(), HostStopwatch)
    assert CpuBackend(torch).fast_fp64() and not CudaBackend(torch).caps_address_space


def test_the_cpu_worker_is_capped() -> None:
    """In a child process: the cap is applied on the CPU, and an allocation past it is a MemoryError."""
    code = (
        "import resource\n"
        "from kcgate.devices.cpu import CpuBackend\n"
        "from kcgate.execution.worker import _limit_memory\n"
        "print(_limit_memory(8 * 2**30, CpuBackend()), resource.getrlimit(resource.RLIMIT_AS)[0])\n"
        "try:\n"
        "    bytearray(16 * 2**30)\n"
        "except MemoryError:\n"
        "    print('MemoryError')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert out == [str(8 * 2**30), str(8 * 2**30), "MemoryError"]


def test_out_of_memory_is_recognised_by_type_and_by_what_torch_says() -> None:
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(RuntimeError("HIP out of memory. Tried to allocate 20.00 MiB"))
    try:
        torch.empty(1 << 50, dtype=torch.uint8)  # torch's real CPU allocator failure
    except RuntimeError as exc:
        assert is_out_of_memory(exc)
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_out_of_memory(ValueError("out of memory"))  # only the allocators' own errors


OOM = """
[project]
paths = ["{root}"]

[[contract]]
id = "oom-host"
class = "C-PRC-01"
kernel = "tests.testing.kernels.oom:host_oom"
op = "matmul"
shapes = [[8, 64, 8]]
protocol = {{ seeds = 1, trials = 1, boundary = false }}

[[contract]]
id = "oom-torch"
class = "C-PRC-01"
kernel = "tests.testing.kernels.oom:torch_oom"
op = "matmul"
shapes = [[8, 64, 8]]
protocol = {{ seeds = 1, trials = 1, boundary = false }}

[[contract]]
id = "fine"
class = "C-PRC-01"
kernel = "kcgate.kernels.builtin:matmul"
op = "matmul"
shapes = [[8, 64, 8]]
protocol = {{ seeds = 1, trials = 1, boundary = false }}
"""


def test_out_of_memory_costs_one_case_with_a_clear_message_never_the_run(tmp_path: Path) -> None:
    """Real allocation failures (Python's MemoryError, torch's allocator) in worker subprocesses: each is an
    error naming the shape and the fix, and the next case runs in the same worker."""
    contracts = tmp_path / "contracts.toml"
    contracts.write_text(OOM.format(root=ROOT))
    out = tmp_path / "r.json"
    proc = kcgate("run", "-c", str(contracts), "--results", str(out), "--device", "cpu", "--seed", "1", "-q")
    assert proc.returncode == 1, proc.stderr  # an error blocks, as any unevaluated case does
    cases = {c["contract_id"]: c for c in _objects(out)}
    assert cases["fine"]["status"] == "pass"
    for cid in ("oom-host", "oom-torch"):
        c = cases[cid]
        assert c["status"] == "error", c
        assert "out of memory on cpu with inputs (8, 64), (64, 8)" in c["message"], c["message"]
        assert "fix: a smaller shape" in c["message"]


def _objects(path: Path) -> list[dict[str, object]]:
    doc = json.loads(path.read_text())
    return [dict(zip(doc["case_fields"], row)) for row in doc["cases"]]


def test_each_case_records_kernel_oracle_and_harness_time(tmp_path: Path) -> None:
    contracts = tmp_path / "c.toml"
    contracts.write_text(OOM.format(root=ROOT))
    project = load_project(contracts)
    case = next(c for c in make_plan(project, 1, {}) if c.contract_id == "fine")
    r = execute_case(project, case, CpuBackend())
    assert r.status == "pass" and r.kernel_s > 0 and r.oracle_s > 0 and r.harness_s > 0
    assert r.harness_s == pytest.approx(r.duration_s - r.kernel_s - r.oracle_s, abs=1e-9)


def test_host_stopwatch_times_after_synchronizing() -> None:
    synced: list[float] = []
    watch = HostStopwatch(lambda: synced.append(time.perf_counter()))
    watch.start()
    time.sleep(0.02)
    took = watch.stop()
    assert len(synced) == 1 and 0.02 <= took < 1.0


def test_the_event_stopwatch_reads_device_time_between_its_two_events() -> None:
    """CUDA and ROCm time a kernel with a pair of ``torch.cuda.Event(enable_timing=True)``: recorded around it,
    the end waited for, and the elapsed milliseconds read as seconds. Not exercised on hardware yet (no GPU
    here, runners/nvidia.md): a stand-in runtime with the documented Event API checks the calls and units."""

    calls: list[str] = []

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing
            self.at = 0.0

        def record(self) -> None:
            self.at = 1.25 if calls else 0.5  # ms on the device's clock
            calls.append("record")

        def synchronize(self) -> None:
            calls.append("synchronize")

        def elapsed_time(self, end: Event) -> float:
            return end.at - self.at

    watch = EventStopwatch(SimpleNamespace(Event=Event))
    watch.start()
    assert watch.stop() == pytest.approx(0.75e-3) and calls == ["record", "record", "synchronize"]
