"""Kernels that edit the judge (issue 54's D1 and its kind), run by ``kcgate run`` in real workers: each returns a
softmax 5% off and rewrites, in its own process, kcgate's error function's code, the names it is bound to, or
torch's, numpy's or builtins' functions. The kernel runs in a sandbox process of its own (kcgate.sandbox), so
none of it reaches the process that computes the verdict: every one fails, as an honest 5%-off kernel does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kcgate.results.model import load_run
from tests.conftest import DATA, kcgate

pytestmark = pytest.mark.slow

ATTACKS = ("code-swap", "rebind", "patch-torch", "patch-numpy", "patch-builtins")


def _run(out: Path, *contracts: str, env: dict[str, str] | None = None) -> dict[str, list[tuple[str, float]]]:
    only = [a for c in contracts for a in ("-k", f"{c}/*")]
    proc = kcgate(
        "run", "-c", "judge_attacks.toml", *only, "--results", str(out), "--seed", "1", "--shrink-s", "0", "-q",
        cwd=DATA, env=env,
    )  # fmt: skip
    assert "internal error" not in proc.stderr, proc.stderr
    found: dict[str, list[tuple[str, float]]] = {}
    for case in load_run(out).cases:
        found.setdefault(case.contract_id, []).append((case.status, case.metrics.budget_used or 0.0))
    return found


@pytest.fixture(scope="module")
def statuses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, float]]]:
    return _run(tmp_path_factory.mktemp("attacks") / "cpu.json")


@pytest.mark.parametrize("contract", ATTACKS)
def test_a_kernel_that_edits_the_judge_fails(
    statuses: dict[str, list[tuple[str, float]]], contract: str
) -> None:
    assert statuses[contract] and {s for s, _ in statuses[contract]} == {"fail"}, statuses[contract]


def test_d1_changes_nothing_about_the_verdict(statuses: dict[str, list[tuple[str, float]]]) -> None:
    """kcgate's error function with another __code__ in the kernel's process: the error is measured as for an
    honest kernel 5% off (budgets within 0.01%: each contract draws its own inputs), and the later honest
    5%-off contract fails too."""
    for (s, b), (s_honest, b_honest) in zip(statuses["code-swap"], statuses["honest-off"], strict=True):
        assert s == s_honest == "fail" and abs(b - b_honest) <= 1e-4 * b_honest, statuses


def test_without_the_sandbox_d1_passes(tmp_path: Path) -> None:
    """The attack is real: with the kernel in the judge's process (KCGATE_SANDBOX=0) it is recorded as a pass.
    If this starts failing, the in-process path grew a defence; the test above still holds without it."""
    found = _run(tmp_path / "cpu.json", "code-swap", env={"KCGATE_SANDBOX": "0"})
    assert {s for s, _ in found["code-swap"]} == {"pass"}, found


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any process's memory, dumpable or not")
def test_the_kernel_cannot_open_the_judges_memory(statuses: dict[str, list[tuple[str, float]]]) -> None:
    assert {s for s, _ in statuses["judge-memory"]} == {"error"}, statuses["judge-memory"]


def test_the_judge_is_undumpable() -> None:
    """No process of the same user may ptrace the judge or write it through /proc/PID/mem (no Yama here)."""
    code = (
        "import ctypes; from kcgate.sandbox.process import shield; shield(); "
        "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"  # PR_GET_DUMPABLE
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0", out


def test_a_kernel_that_writes_its_own_answer_on_the_sandboxs_socket_is_an_error(
    statuses: dict[str, list[tuple[str, float]]],
) -> None:
    """A forged `{"result": null}` and garbage on the child's socket: the judge sees a broken protocol, never a
    result; the case is an error, and the next contract (honest-off, after it in the file) is judged as ever."""
    assert {s for s, _ in statuses["socket-garbage"]} == {"error"}, statuses["socket-garbage"]
