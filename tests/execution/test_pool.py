"""``kcgate run --workers N`` (execution.pool): chunks of the plan spread over N real worker processes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from kcgate.contracts.load import load_project
from kcgate.errors import UsageError
from kcgate.execution import pool as pooling
from kcgate.execution.executors import isolated
from kcgate.execution.pool import (
    AUTO_CASES_PER_WORKER,
    AUTO_MAX,
    CHUNK_MAX,
    WorkerPool,
    auto_lanes,
    auto_workers,
    chunks,
    half_ram,
    make_executor,
    worker_count,
)
from kcgate.plan import Case, make_plan
from kcgate.results.model import load_run
from tests.conftest import DATA, kcgate

RUNNABLE = "probe or segv or after"  # pool.toml's contracts that run (nostart's worker cannot start)


def _case(i: int) -> Case:
    return Case(f"c{i}", "c", "C-PRC-01", "matmul", "float32", (8, 8, 8), 0, i)


def test_worker_count_reads_numbers_and_auto() -> None:
    assert worker_count("3", "process") == 3
    most = auto_workers(pooling._cpus(), pooling.half_memory())
    assert worker_count("auto", "process", "cpu") == worker_count("auto", "process", None) == most
    assert worker_count("auto", "process", "cuda") == worker_count("auto", "process", "mps") == 1
    assert worker_count("auto", "none", "cpu") == 1  # the default never refuses --isolation none
    assert worker_count("1", "none") == 1


@pytest.mark.parametrize(
    ("cpus", "half_gib", "most"),
    [(2, 12, 2), (64, 256, AUTO_MAX), (16, 8, 2), (4, 3.5, 1), (1, 64, 1), (8, 0, 1)],
)
def test_auto_takes_a_worker_per_cpu_within_the_ram_and_the_ceiling(
    cpus: int, half_gib: float, most: int
) -> None:
    assert auto_workers(cpus, int(half_gib * 2**30)) == most


def _cgroup(root: Path, memory_max: str, cpu_max: str) -> Path:
    """A cgroup v2 tree as a container sees it: its own cgroup at the root of /sys/fs/cgroup."""
    root.mkdir(exist_ok=True)
    (root / "memory.max").write_text(memory_max + "\n")
    (root / "cpu.max").write_text(cpu_max + "\n")
    return root


def test_auto_inside_a_container_with_2_gib_and_one_cpu_picks_one_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KCGATE_CGROUP_ROOT", str(_cgroup(tmp_path / "cg", str(2 * 2**30), "100000 100000")))
    assert pooling.cgroup_memory() == 2 * 2**30 and pooling.cgroup_cpus() == 1
    assert pooling.half_memory() == min(half_ram(), 2**30) and pooling._cpus() == 1
    assert worker_count("auto", "process", "cpu") == 1
    assert half_ram() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2  # the cap: the host's


@pytest.mark.parametrize(
    ("memory_max", "cpu_max", "cpus", "half_gib"),
    [
        ("max", "max 100000", None, None),  # no limits: the host's CPUs and RAM
        (str(64 * 2**30), "150000 100000", 1, 32),  # 1.5 CPUs: one (rounded down)
        (str(3 * 2**30), "400000 100000", 4, 1.5),  # four CPUs, but 1.5 GiB of half the memory: one worker
    ],
)
def test_auto_reads_cgroup_v2_limits_where_set(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    memory_max: str,
    cpu_max: str,
    cpus: int | None,
    half_gib: float | None,
) -> None:
    host_cpus = len(os.sched_getaffinity(0))
    monkeypatch.setenv("KCGATE_CGROUP_ROOT", str(_cgroup(tmp_path / "cg", memory_max, cpu_max)))
    assert pooling._cpus() == (host_cpus if cpus is None else min(cpus, host_cpus))
    half = half_ram() if half_gib is None else min(half_ram(), int(half_gib * 2**30))
    assert pooling.half_memory() == half
    assert worker_count("auto", "process", "cpu") == auto_workers(pooling._cpus(), half)


def test_no_cgroup_v2_means_no_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KCGATE_CGROUP_ROOT", str(tmp_path / "absent"))  # macOS, cgroup v1: no files
    assert pooling.cgroup_memory() == 0 and pooling.cgroup_cpus() == 0
    assert pooling._cpus() == len(os.sched_getaffinity(0)) and pooling.half_memory() == half_ram()


@pytest.mark.parametrize(
    ("cases", "most", "lanes"), [(1, 4, 1), (249, 4, 1), (250, 4, 2), (2000, 2, 2), (1250, 8, 6), (50, 1, 1)]
)
def test_auto_adds_a_worker_per_250_cases(cases: int, most: int, lanes: int) -> None:
    assert AUTO_CASES_PER_WORKER == 250 and auto_lanes(cases, most) == lanes


@pytest.mark.parametrize(
    ("expected", "accelerator", "started"),
    [(6, False, [True, True]), (6, True, [True, False]), (0, False, [True, False])],
)
def test_auto_starts_the_workers_a_plan_will_use_together_with_the_first(
    monkeypatch: pytest.MonkeyPatch, expected: int, accelerator: bool, started: list[bool]
) -> None:
    """A plan of AUTO_CASES_PER_WORKER cases or more (here made 4) starts its second worker with the first, before
    the plan is made, so their start-ups overlap; not where --device auto may find an accelerator (the first
    worker's handshake decides there), nor when the plan's size is unknown."""
    monkeypatch.setattr(pooling, "AUTO_CASES_PER_WORKER", 4)
    monkeypatch.setattr(pooling, "accelerator_possible", lambda: accelerator)
    pool = make_executor(
        "process", load_project(DATA / "pool.toml"), None, workers=2, auto=True, expected_cases=expected
    )
    try:
        assert [_started(lane) for lane in pool.lanes] == started  # type: ignore[attr-defined]
    finally:
        pool.close()


def test_a_named_accelerator_never_starts_workers_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """--device cuda on a machine with no device node kcgate knows: the first worker alone (it then reports
    the device it could not find)."""
    monkeypatch.setattr(pooling, "accelerator_possible", lambda: False)
    started: list[int] = []
    monkeypatch.setattr(pooling.WorkerPool, "warm", lambda self, cases: started.append(cases))
    monkeypatch.setattr(pooling.WorkerPool, "start", lambda self: None)
    project = load_project(DATA / "pool.toml")
    for device, expect in (("cuda", []), ("cpu", [600]), (None, [600, 600])):
        make_executor("process", project, device, workers=2, auto=True, expected_cases=600)
        assert started == expect, device


def test_accelerator_possible_reads_device_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pooling.sys, "platform", "linux")
    monkeypatch.setattr(pooling.os.path, "exists", lambda p: p == "/dev/kfd")
    assert pooling.accelerator_possible()
    monkeypatch.setattr(pooling.os.path, "exists", lambda p: False)
    assert not pooling.accelerator_possible()
    monkeypatch.setattr(pooling.sys, "platform", "darwin")  # MPS
    assert pooling.accelerator_possible()


@pytest.mark.parametrize("bad", ["0", "-2", "two", "1.5", ""])
def test_worker_count_refuses_what_is_not_a_positive_count(bad: str) -> None:
    with pytest.raises(UsageError, match="positive number of worker processes"):
        worker_count(bad, "process")


def test_several_workers_need_worker_processes() -> None:
    with pytest.raises(UsageError, match="drop --isolation none"):
        worker_count("2", "none")


@pytest.mark.parametrize(("n", "lanes"), [(1, 2), (5, 2), (16, 2), (100, 2), (2000, 2), (2000, 8), (7, 16)])
def test_chunks_keep_plan_order_and_balance_the_tail(n: int, lanes: int) -> None:
    cases = [_case(i) for i in range(n)]
    cut = chunks(cases, lanes)
    assert [c for chunk in cut for c in chunk] == cases  # every case once, in plan order
    sizes = {len(chunk) for chunk in list(cut)[:-1]}
    assert len(sizes) <= 1 and max(sizes | {1}) <= CHUNK_MAX  # equal chunks, the last may be short
    if n >= 2 * lanes * 8:
        assert len(cut) >= lanes * 8 or max(sizes) == CHUNK_MAX


def test_cli_refuses_a_bad_worker_count_with_exit_3() -> None:
    proc = kcgate("run", "--contracts", "pool.toml", "--workers", "0", cwd=DATA)
    assert proc.returncode == 3 and "--workers '0'" in proc.stderr and "Traceback" not in proc.stderr
    proc = kcgate("run", "--contracts", "pool.toml", "--workers", "2", "--isolation", "none", cwd=DATA)
    assert proc.returncode == 3 and "drop --isolation none" in proc.stderr


def _run(tmp: Path, workers: str, name: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    pids = tmp / f"{name}.pids"
    out = tmp / f"{name}.json"
    args = ("run", "--contracts", "pool.toml", "-k", RUNNABLE, "--results", str(out), "--seed", "5", "-q")
    env = {"KCGATE_TEST_PID_FILE": str(pids), "KCGATE_TEST_PEERS": workers}  # the probe waits for N workers
    proc = kcgate(*args, "--workers", workers, cwd=DATA, env=env)
    return proc, pids.read_text().split() if pids.exists() else []


@pytest.mark.slow
def test_two_workers_give_one_workers_results_and_share_the_cases(tmp_path: Path) -> None:
    one, one_pids = _run(tmp_path, "1", "one")
    two, two_pids = _run(tmp_path, "2", "two")
    assert one.returncode == two.returncode == 1, two.stderr  # the segfault is a violation, not a crash
    a, b = load_run(tmp_path / "one.json"), load_run(tmp_path / "two.json")
    assert a.complete and b.complete and len(b.cases) == 23
    assert [c.case_id for c in a.cases] == [c.case_id for c in b.cases]  # the file keeps plan order

    def verdicts(run):  # type: ignore[no-untyped-def]
        return [(c.case_id, c.status, c.seed, c.metrics.budget_used, c.metrics.max_ulp) for c in run.cases]

    assert verdicts(a) == verdicts(b)
    segv = next(c for c in b.cases if c.contract_id == "segv")
    assert segv.status == "error" and "SIGSEGV" in segv.message  # one case, and the others went on
    assert sum(c.status == "pass" for c in b.cases) == 22
    # a kernel call each (the 30-element shape's cases add pooled trials for the sensitivity gate: 16 calls)
    assert len(set(one_pids)) == 1 and len(one_pids) >= 12
    assert len(two_pids) == len(one_pids) and len(set(two_pids)) == 2  # the probe's cases ran in both workers


@pytest.mark.slow
def test_a_lane_whose_worker_cannot_start_stops_the_run_as_one_worker_does(tmp_path: Path) -> None:
    results = {}
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}.json"
        args = ("run", "--contracts", "pool.toml", "-k", "nostart or segv", "--results", str(out), "-q")
        proc = kcgate(*args, "--workers", workers, cwd=DATA)  # two cases: each lane gets one
        results[workers] = proc
        assert "failed to start" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    # the contract's env (a broken PYTHONHOME) stops its worker: exit 7 naming it, not kcgate's exit 4
    assert results["1"].returncode == results["2"].returncode == 7
    assert "contract 'nostart'" in results["2"].stderr and "PYTHONHOME" in results["2"].stderr


@pytest.mark.slow
def test_workers_start_when_needed_and_the_pool_runs_plans_after_an_abandoned_one() -> None:
    project = load_project(DATA / "pool.toml")
    pool = make_executor("process", project, "cpu", workers=3)
    try:
        cases = [c for c in make_plan(project, 3, pool.default_shapes()) if c.contract_id == "after"]
        assert [r.status for r in pool.run_many(cases[:1])] == ["pass"]
        assert [_started(lane) for lane in pool.lanes] == [True, False, False]  # one case: one worker
        abandoned = pool.run_many(cases)
        next(abandoned)
        abandoned.close()  # as a caller that stops reading does: that call's lanes stop after their chunk
        assert all(_started(lane) for lane in pool.lanes)
        first = sorted(r.case_id for r in pool.run_many(cases))
        second = sorted(r.case_id for r in pool.run_many(cases[:4]))
    finally:
        pool.close()
    assert first == sorted(c.case_id for c in cases) and second == sorted(c.case_id for c in cases[:4])


@pytest.mark.slow
def test_auto_starts_a_second_worker_only_for_a_plan_worth_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under auto a small plan runs on the first worker alone; a plan of AUTO_CASES_PER_WORKER cases or more
    (here made 4) spreads over the second too, with the same results."""
    project = load_project(DATA / "pool.toml")
    pool = make_executor("process", project, "cpu", workers=2, auto=True)
    try:
        cases = [c for c in make_plan(project, 3, pool.default_shapes()) if c.contract_id == "after"][:6]
        small = sorted(r.case_id for r in pool.run_many(cases))
        assert [_started(lane) for lane in pool.lanes] == [True, False]  # 6 cases < 1000: one worker
        monkeypatch.setattr(pooling, "AUTO_CASES_PER_WORKER", 4)
        large = sorted(r.case_id for r in pool.run_many(cases))
        assert [_started(lane) for lane in pool.lanes] == [True, True]  # 6 cases >= 4: two workers
    finally:
        pool.close()
    assert small == large == sorted(c.case_id for c in cases)


class _AcceleratorLane:
    """A lane whose worker resolved an accelerator (none can run here): what the pool reads of it."""

    def __init__(self, device: str) -> None:
        self.device, self.ran = device, 0

    def handshake(self) -> tuple[str, None]:
        return self.device, None

    def start(self) -> None:
        raise AssertionError("auto started a second worker beside an accelerator's")

    def run_many(self, cases: list[Case], kernel: str | None = None) -> list[Case]:
        self.ran += len(cases)
        return []


@pytest.mark.parametrize("device", ["cuda", "xpu"])
def test_auto_keeps_one_worker_when_the_first_found_an_accelerator(device: str) -> None:
    first, second = _AcceleratorLane(device), _AcceleratorLane(device)
    pool = WorkerPool([first, second], auto=True)  # type: ignore[list-item]
    assert pool.lanes_for(50_000) == 1
    assert list(pool.run_many([_case(i) for i in range(3000)])) == [] and (first.ran, second.ran) == (3000, 0)
    assert WorkerPool([_AcceleratorLane("cpu"), second], auto=True).lanes_for(3000) == 2  # type: ignore[list-item]
    # a number of workers too: they are not pinned to devices, so they would all share this one
    assert WorkerPool([_AcceleratorLane(device), second], auto=False).lanes_for(3000) == 1  # type: ignore[list-item]


def test_auto_keeps_the_first_workers_memory_cap_and_shares_the_rest() -> None:
    """The first worker starts before the device is known (it may be a GPU's): it keeps one worker's cap."""
    project = load_project(DATA / "pool.toml")
    caps = {}
    for auto in (False, True):
        pool = make_executor("process", project, "cpu", workers=2, auto=auto)
        try:
            caps[auto] = [getattr(lane, "first", lane).memory_limit for lane in pool.lanes]  # type: ignore[attr-defined]
        finally:
            pool.close()
    assert caps == {False: [half_ram() // 2] * 2, True: [half_ram(), half_ram() // 2]}


def _started(lane: object) -> bool:
    """Whether a lane's (first) worker process was started: pool.toml's env contract makes lanes EnvRouters."""
    return getattr(getattr(lane, "first", lane), "worker", None) is not None


@pytest.mark.slow
def test_a_lane_takes_work_only_once_its_worker_is_ready(tmp_path: Path) -> None:
    """A lane whose worker is still starting holds no chunk: the ready lane runs every case, and the run does
    not wait for the other (which used to take a chunk at once and make the run wait for its start-up)."""
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(30)\n")  # a worker that starts in 30 s
    project = load_project(DATA / "pool.toml")
    env = {**os.environ, "PYTHONPATH": f"{slow}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    pool = WorkerPool([isolated(project, "cpu", 0, None), isolated(project, "cpu", 0, None, env=env)])
    try:
        pool.start()
        cases = [c for c in make_plan(project, 3, pool.default_shapes()) if c.contract_id == "after"]
        t0 = time.monotonic()
        results = list(pool.run_many(cases))
        took = time.monotonic() - t0
    finally:
        pool.close()
    assert sorted(r.case_id for r in results) == sorted(c.case_id for c in cases)
    assert all(r.status == "pass" for r in results)
    assert took < 20, f"the run waited {took:.1f} s for a worker that was still starting"
