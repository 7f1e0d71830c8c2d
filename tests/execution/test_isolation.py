"""Real worker subprocesses: kernels that crash, hang, exit, flood or lie cost one case each."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from kcgate.results.journal import journal_path
from kcgate.results.model import load_run
from tests.conftest import DATA, ROOT, imported, kcgate

pytestmark = pytest.mark.slow  # end to end: every test runs kcgate in subprocesses


@pytest.fixture(scope="module", params=["1", "2"], ids=["one-worker", "two-workers"])
def crashy(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, object]:
    out = tmp_path_factory.mktemp("iso") / "crashy.json"
    proc = kcgate(
        "run",
        "--workers",
        request.param,
        "--contracts",
        "crashy.toml",
        "--results",
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


def _journaled(out: Path) -> list[str]:
    """Case ids in the run's journal (its first line is the header; a torn last line is not a case)."""
    path = journal_path(out)
    lines = path.read_bytes().split(b"\n")[1:-1] if path.exists() else []
    return [json.loads(line.split(b" ", 2)[2])[0] for line in lines]  # each line: "<MAC> <plan key> <row>"


# these tests read the per-case progress lines, which `kcgate run` leaves out under CI with a non-tty stderr
_PROGRESS_ENV = {**os.environ, "CI": ""}


def _start_slow_run(out: Path, *extra: str, tag: str = "") -> subprocess.Popen[str]:
    """``kcgate run`` on slow.toml (8 cases of 0.4 s); ``tag``: a value of KCGATE_TEST_TAG in its environment."""
    cmd = [
        sys.executable,
        "-m",
        "kcgate",
        "run",
        "--contracts",
        "slow.toml",
        "--results",
        str(out),
        "--seed",
        "3",
    ]
    return subprocess.Popen(
        [*cmd, *extra],
        cwd=DATA,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "CI": "", "KCGATE_TEST_TAG": tag},  # now: with the session's KCGATE_CACHE_DIR
    )


def _wait_for_cases(out: Path, n: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_journaled(out)) < n:
        time.sleep(0.02)


def _resume_runs(out: Path) -> list[str]:
    """Resume the run; the ids of the cases it ran (from its progress lines)."""
    done = kcgate(
        "run", "--contracts", "slow.toml", "--results", str(out), "--resume", cwd=DATA, env=_PROGRESS_ENV
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return re.findall(r"^\[\d+/\d+\] \w+ +(\S+)", done.stderr, re.M)


def test_kill_9_loses_no_finished_case_and_resume_repeats_none(tmp_path: Path) -> None:
    out = tmp_path / "slow.json"
    proc = _start_slow_run(out, "-q")
    _wait_for_cases(out, 2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    journaled = _journaled(out)
    assert 2 <= len(journaled) < 8
    assert not load_run(out).complete  # valid JSON, by atomic replace: the cases are in the journal
    ran = _resume_runs(out)
    final = load_run(out)
    ids = [c.case_id for c in final.cases]
    assert final.complete and len(ids) == 8 == len(set(ids))
    assert not set(ran) & set(journaled) and len(ran) == 8 - len(journaled)
    assert not journal_path(out).exists()  # compacted into the results file at the end


def _tagged(tag: str) -> list[int]:
    """Processes whose environment carries KCGATE_TEST_TAG=tag: the run and every worker it started."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"KCGATE_TEST_TAG={tag}".encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_saves_finished_cases_and_resume_repeats_none(tmp_path: Path, workers: str) -> None:
    out, tag = tmp_path / "slow.json", uuid.uuid4().hex
    proc = _start_slow_run(out, "--workers", workers, tag=tag)
    _wait_for_cases(out, 2)
    proc.send_signal(signal.SIGTERM)  # the kcgate process only, as a CI runner cancelling a job does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "interrupted by SIGTERM" in err and "--resume" in err
    finished = re.findall(r"^\[\d+/\d+\] \w+ +(\S+)", err, re.M)
    partial = load_run(out)  # compacted on the signal: every finished case is in the results file itself
    assert not partial.complete and {c.case_id for c in partial.cases} >= set(finished) and len(finished) >= 2
    if sys.platform.startswith("linux"):
        assert _tagged(tag) == []  # every worker's process group was killed and reaped
    ran = _resume_runs(out)
    assert not set(ran) & {c.case_id for c in partial.cases} and len(ran) == 8 - len(partial.cases)
    assert load_run(out).complete


def test_shards_merged_equal_the_unsharded_run(tmp_path: Path) -> None:
    common = ["--contracts", "small.toml", "-q", "--seed", "7", "--runner", "cpu-x"]
    assert kcgate("run", *common, "--results", str(tmp_path / "all.json"), cwd=DATA).returncode == 0
    shards = []
    for i in (1, 2, 3):
        shards.append(str(tmp_path / f"s{i}.json"))
        proc = kcgate("run", *common, "--shard", f"{i}/3", "--results", shards[-1], cwd=DATA)
        assert proc.returncode in (0, 5), proc.stderr
    merged = kcgate("merge", *[s for s in shards if Path(s).exists()], "--results", str(tmp_path / "m.json"))
    assert merged.returncode == 0, merged.stderr
    assert load_run(tmp_path / "m.json").complete
    partial = kcgate("merge", shards[0], shards[1], "--results", str(tmp_path / "p.json"))
    assert partial.returncode == 0 and not load_run(tmp_path / "p.json").complete  # shard 3/3 is missing
    twice = kcgate("merge", shards[0], shards[0], "--results", str(tmp_path / "t.json"))
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
    assert kcgate("run", "--contracts", str(src), "-q", "--results", str(out), "-k", "gather").returncode == 0
    other = json.loads(out.read_text())
    other["fingerprint"]["torch"] = "9.9.9"
    (tmp_path / "b.json").write_text(json.dumps(other))
    proc = kcgate("merge", str(out), str(tmp_path / "b.json"), "--results", str(tmp_path / "m.json"))
    assert proc.returncode == 3 and "fingerprint" in proc.stderr


def test_isolated_run_imports_torch_only_in_the_worker(tmp_path: Path) -> None:
    """The parent plans from the worker's handshake (device, fingerprint, default shapes): no torch import."""
    proc = kcgate(
        "run", "--contracts", "small.toml", "-q", "--seed", "3", "--results", str(tmp_path / "r.json"), "-k", "sum*",
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
        "run", "--contracts", "small.toml", "--device", "mps", "--results", str(tmp_path / "r.json"), cwd=DATA
    )
    assert proc.returncode == 3 and "device 'mps' is not available" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r.json").exists()


# ---- attacks on the harness (tests/testing/kernels/attacks.py) ---------------------------------------------


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("attacks")
    out, pids = tmp / "attacks.json", tmp / "pids.txt"
    args = (
        "run",
        "--contracts",
        "attacks.toml",
        "--results",
        str(out),
        "--timeout",
        "60",
        "-q",
        "--seed",
        "1",
    )
    proc = kcgate(*args, cwd=DATA, env={"KCGATE_TEST_PIDFILE": str(pids)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = load_run(out)
    return {
        "cases": {c.contract_id: c for c in run.cases},
        "ids": [c.case_id for c in run.cases],
        "pids": pids,
    }


@pytest.mark.parametrize("attack", ["forge-pass", "garbage", "forged-object"])
def test_a_kernel_cannot_reach_the_result_pipe(attacked: dict, attack: str) -> None:  # type: ignore[type-arg]
    """The result pipe is the judge's, in another process than the kernel's sandbox (kcgate.sandbox): forge-pass
    finds no case in its frames to forge (it raises: an error of its own case), garbage and forged-object write
    to no pipe of the judge's and are judged on the product they return. Nothing is filed under another case,
    and the case after each passes."""
    cases = attacked["cases"]
    expected = {"forge-pass": "error", "garbage": "pass", "forged-object": "pass"}[attack]
    assert cases[attack].status == expected and "forged" not in cases[attack].message, cases[attack].message
    after = cases[f"after-{attack}"]
    assert after.status == "pass" and after.case_id.startswith(f"after-{attack}/"), after.message


def test_every_case_is_recorded_once_under_its_own_id(attacked: dict) -> None:  # type: ignore[type-arg]
    ids = attacked["ids"]
    assert len(ids) == len(set(ids)) == 17
    assert all(i.split("/")[0] == c for i, c in zip(ids, attacked["cases"]))


def test_patched_matmul_is_global_state_and_later_cases_see_the_real_operator(attacked: dict) -> None:  # type: ignore[type-arg]
    cases = attacked["cases"]
    patched = cases["patch-matmul"]
    assert patched.status == "fail" and patched.signature.cause == "global-state"
    assert "torch.matmul" in patched.message and "torch.Tensor.__matmul__" in patched.message
    assert cases["honest-after-patch"].status == "pass", cases["honest-after-patch"].message
    wrong = cases["wrong-after-patch"]
    assert wrong.status == "fail" and wrong.signature.cause != "global-state", wrong.message


def test_changed_torch_flags_are_global_state(attacked: dict) -> None:  # type: ignore[type-arg]
    changed = attacked["cases"]["change-flags"]
    assert changed.status == "fail" and changed.signature.cause == "global-state"
    for name in ("default dtype", "thread count", "deterministic algorithms", "matmul precision"):
        assert name in changed.message, changed.message
    assert attacked["cases"]["honest-after-flags"].status == "pass"


@pytest.mark.parametrize("attack", ["close-stdio", "close-std-streams"])
def test_a_kernel_closing_stdio_spoils_no_other_case(attacked: dict, attack: str) -> None:  # type: ignore[type-arg]
    cases = attacked["cases"]
    assert cases[attack].status == "pass", cases[attack].message
    assert cases[f"after-{attack}"].status == "pass", cases[f"after-{attack}"].message


def test_a_forked_child_is_killed_when_the_run_ends(attacked: dict) -> None:  # type: ignore[type-arg]
    [pid] = [int(p) for p in attacked["pids"].read_text().split()]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.05)
    assert not _running(pid), f"the kernel's child {pid} outlived the run"


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie waiting for init to reap it is dead


def test_the_worker_exits_by_itself_once_its_commands_end() -> None:
    """The worker leaves with os._exit(0) after its last answer: close() finds it exited (status 0, not the
    group kill's SIGKILL) without waiting out torch's interpreter teardown."""
    from kcgate.contracts.load import load_project
    from kcgate.execution.executors import IsolatedExecutor
    from kcgate.plan import make_plan

    project = load_project(ROOT / "contracts.toml")
    executor = IsolatedExecutor(project)
    executor.start()
    case = make_plan(project, 1, executor.default_shapes())[0]
    assert executor.run(case).status == "pass"
    worker = executor.worker
    assert worker is not None
    executor.close()
    assert worker.proc.returncode == 0
