"""Kernels that lie (#44, the second attack suite), run by ``kcgate run`` in real workers: each returns a
wrong softmax (1.5x) and hides it by caching, a Tensor subclass, patching numpy, builtins, json, kcgate's
classes or torch from a thread, or takes the worker down. None may be recorded as a pass, and the run's
exit code is 1 (a violation), never 4."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.results.model import load_run
from tests.conftest import DATA, kcgate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def statuses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    out = tmp_path_factory.mktemp("lying") / "cpu.json"
    proc = kcgate(
        "run", "-c", "lying.toml", "--results", str(out), "--seed", "1", "--shrink-s", "0", cwd=DATA,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "internal error" not in proc.stderr
    found: dict[str, set[str]] = {}
    for case in load_run(out).cases:
        found.setdefault(case.contract_id, set()).add(case.status)
    found["<output>"] = {proc.stdout + proc.stderr}
    return found


def _contracts() -> list[str]:
    import tomli

    return [c["id"] for c in tomli.loads((DATA / "lying.toml").read_text())["contract"]]


def test_a_kernels_message_starts_no_workflow_command_in_runs_output(statuses: dict[str, set[str]]) -> None:
    """The kernel prints ``::error::`` and raises with ``::add-mask::`` after CR, LF, U+2028 and NEL."""
    import re

    (said,) = statuses["<output>"]
    assert "boom" in said
    lines = re.split(r"\r\n|\r|\n|\u2028|\u2029|\x85", said)
    assert not [line for line in lines if line.lstrip().startswith("::")], said


@pytest.mark.parametrize("contract", _contracts())
def test_a_lying_kernel_is_never_recorded_as_a_pass(statuses: dict[str, set[str]], contract: str) -> None:
    assert statuses[contract] and "pass" not in statuses[contract], statuses


@pytest.mark.parametrize(
    ("contract", "status"),
    [
        ("subclass", "fail"),  # judged on its own data, not what its __torch_function__ says
        ("patch-numpy", "fail"),  # numpy's functions are restored before the comparison
        ("patch-builtins", "fail"),
        ("patch-json", "fail"),  # json is restored before the result is signed
        ("patch-encoder", "fail"),
        ("patch-record-class", "fail"),  # kcgate's classes are restored at the case's end
    ],
)
def test_the_patches_are_named_as_failures(statuses: dict[str, set[str]], contract: str, status: str) -> None:
    assert statuses[contract] == {status}, statuses


def test_the_worker_is_not_spoiled_for_the_next_contract(tmp_path: Path) -> None:
    """builtins.max patched by one kernel made every later case an error in the same worker."""
    text = (DATA / "lying.toml").read_text()
    honest = (
        '\n[[contract]]\nid = "honest"\nclass = "C-PRC-01"\nkernel = "tests.testing.kernels.lying:honest"\n'
    )
    honest += 'op = "softmax"\ndtypes = ["float32"]\nshapes = [[8, 64]]\nprotocol = { seeds = 1, trials = 1, boundary = false }\n'
    head, _, _ = text.partition("\n[[contract]]")
    patched = text[text.index('[[contract]]\nid = "patch-builtins"') :].split("\n\n")[0]
    (tmp_path / "c.toml").write_text(
        head.replace("../..", str(DATA.parent.parent)) + "\n" + patched + "\n" + honest
    )
    out = tmp_path / "cpu.json"
    proc = kcgate(
        "run", "-c", str(tmp_path / "c.toml"), "--results", str(out), "--shrink-s", "0", "-q", cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert {c.contract_id: c.status for c in load_run(out).cases}["honest"] == "pass"
