"""Real worker subprocesses: kernels that crash, hang, exit, flood or lie cost one case each."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kcgate.results.model import load_run
from tests.conftest import DATA, ROOT, imported, kcgate


@pytest.fixture(scope="module")
def crashy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("iso") / "crashy.json"
    proc = kcgate(
        "run",
        "--contracts",
        "crashy.toml",
        "--out",
        str(out),
        "--timeout",
        "4",
        "--memory-limit-gb",
        "3",
        "-q",
        "--seed",
        "1",
        cwd=DATA,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # violations, not a crash of kcgate
    return {c.contract_id: c for c in load_run(out).cases}


EXPECTED = {
    "segfault": ("error", "SIGSEGV"),
    "abort": ("error", "SIGABRT"),
    "hang": ("error", "timed out"),
    "oom": ("error", "alloc"),
    "exit0": ("error", "sys.exit(0)"),
    "hard_exit0": ("error", "exited with code 0"),
    "raises": ("error", "kernel exploded"),
    "mutate": ("fail", "modified its inputs"),
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_misbehaving_kernel_costs_one_case(crashy: dict, kind: str) -> None:  # type: ignore[type-arg]
    status, text = EXPECTED[kind]
    case = crashy[kind]
    assert case.status == status and text in case.message, case.message
    after = crashy[f"good-after-{kind}"]
    assert after.status == "pass", after.message


def test_stdout_flood_is_harmless(crashy: dict) -> None:  # type: ignore[type-arg]
    assert crashy["flood"].status == "pass" and crashy["good-after-flood"].status == "pass"


def test_stderr_tail_is_recorded_for_crashes(crashy: dict) -> None:  # type: ignore[type-arg]
    assert (
        "stderr tail" in crashy["segfault"].message and "kcgate case segfault" in crashy["segfault"].message
    )


def test_kill_9_leaves_valid_results_and_resume_completes(tmp_path: Path) -> None:
    out = tmp_path / "slow.json"
    cmd = [
        sys.executable,
        "-m",
        "kcgate",
        "run",
        "--contracts",
        "slow.toml",
        "--out",
        str(out),
        "-q",
        "--seed",
        "3",
    ]
    proc = subprocess.Popen(
        cmd, cwd=DATA, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if out.exists() and 2 <= len(load_run(out).cases) < 8:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = load_run(out)  # valid JSON, by atomic replace
    assert not partial.complete and 2 <= len(partial.cases) < 8
    done = kcgate("run", "--contracts", "slow.toml", "--out", str(out), "-q", "--resume", cwd=DATA)
    assert done.returncode == 0, done.stdout + done.stderr
    final = load_run(out)
    ids = [c.case_id for c in final.cases]
    assert final.complete and len(ids) == 8 == len(set(ids))
    assert {c.case_id: c.seed for c in partial.cases}.items() <= {
        c.case_id: c.seed for c in final.cases
    }.items()


def test_shards_merged_equal_the_unsharded_run(tmp_path: Path) -> None:
    common = ["--contracts", "small.toml", "-q", "--seed", "7", "--runner", "cpu-x"]
    assert kcgate("run", *common, "--out", str(tmp_path / "all.json"), cwd=DATA).returncode == 0
    shards = []
    for i in (1, 2, 3):
        shards.append(str(tmp_path / f"s{i}.json"))
        proc = kcgate("run", *common, "--shard", f"{i}/3", "--out", shards[-1], cwd=DATA)
        assert proc.returncode in (0, 5), proc.stderr
    merged = kcgate("merge", *[s for s in shards if Path(s).exists()], "--out", str(tmp_path / "m.json"))
    assert merged.returncode == 0, merged.stderr
    assert load_run(tmp_path / "m.json").complete
    partial = kcgate("merge", shards[0], shards[1], "--out", str(tmp_path / "p.json"))
    assert partial.returncode == 0 and not load_run(tmp_path / "p.json").complete  # shard 3/3 is missing
    twice = kcgate("merge", shards[0], shards[0], "--out", str(tmp_path / "t.json"))
    assert twice.returncode == 3 and "distinct cases" in twice.stderr
    whole = {c.case_id: c for c in load_run(tmp_path / "all.json").cases}
    parts = {c.case_id: c for c in load_run(tmp_path / "m.json").cases}
    assert whole.keys() == parts.keys() and len(whole) == 28
    for cid, c in whole.items():
        p = parts[cid]
        assert (c.status, c.seed, c.metrics.budget_used) == (p.status, p.seed, p.metrics.budget_used)


def test_merge_refuses_mixed_fingerprints(tmp_path: Path) -> None:
    import json

    src = ROOT / "tests" / "data" / "small.toml"
    out = tmp_path / "a.json"
    assert kcgate("run", "--contracts", str(src), "-q", "--out", str(out), "-k", "gather").returncode == 0
    other = json.loads(out.read_text())
    other["fingerprint"]["torch"] = "9.9.9"
    (tmp_path / "b.json").write_text(json.dumps(other))
    proc = kcgate("merge", str(out), str(tmp_path / "b.json"), "--out", str(tmp_path / "m.json"))
    assert proc.returncode == 3 and "fingerprint" in proc.stderr


def test_isolated_run_imports_torch_only_in_the_worker(tmp_path: Path) -> None:
    """The parent plans from the worker's handshake (device, fingerprint, default shapes): no torch import."""
    proc = kcgate(
        "run", "--contracts", "small.toml", "-q", "--seed", "3", "--out", str(tmp_path / "r.json"), "-k", "sum*",
        cwd=DATA, python_flags=("-X", "importtime"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert imported(proc, "torch") == []  # -X reaches the parent only, not the worker
    run = load_run(tmp_path / "r.json")
    assert run.cases and run.fingerprint.torch  # the fingerprint came from the worker's torch
    listed = kcgate("run", "--contracts", "small.toml", "--list", "-k", "sum*", cwd=DATA)  # plans in-process
    assert listed.returncode == 0 and all(c.case_id in listed.stdout for c in run.cases)


def test_an_unavailable_device_is_reported_by_the_worker(tmp_path: Path) -> None:
    proc = kcgate(
        "run", "--contracts", "small.toml", "--device", "mps", "--out", str(tmp_path / "r.json"), cwd=DATA
    )
    assert proc.returncode == 3 and "device 'mps' is not available" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r.json").exists()
