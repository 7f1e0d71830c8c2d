"""Shrinking a failure (kcgate.engine.shrink, issue 33): a failed case searches, within its time bound, for the
smallest shape that fails with the same cause on its own seed; the results record it (``shrunk_shape``, old
files read it as empty), the console prints it with the exact ``kcgate run`` command, which reproduces the
failure, and the PR comment's reproduce line carries it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kcgate.gate.model import CaseChange
from kcgate.plan import repro_command
from kcgate.render.markdown import Group, RenderContext, reproduce_line
from kcgate.results.model import dumps_run, load_run
from tests.testing.faults import semantic as S

ROOT = Path(__file__).resolve().parents[2]


def _failing(shape: tuple[int, ...], shrink_s: float) -> tuple[object, object]:
    from kcgate.contracts.records import Contract, Protocol
    from kcgate.engine.checks import CHECKS
    from kcgate.engine.trial import CaseContext
    from kcgate.numerics.ops import OPS
    from kcgate.plan import Case

    contract = Contract(id="t", klass="C-PRC-01", kernel="x:y", op="softmax", protocol=Protocol(seeds=1))
    case = Case("t", "t", "C-PRC-01", "softmax", "float32", shape, 0, 11, shrink_s=shrink_s)
    ctx = CaseContext(contract=contract, case=case, kernel=S.softmax_other_zero, op=OPS["softmax"])
    return ctx, CHECKS["C-PRC-01"](ctx)


def test_the_tail_mask_bug_shrinks_to_a_row_of_three() -> None:
    from kcgate.engine.checks import CHECKS
    from kcgate.engine.shrink import shrink

    ctx, finding = _failing((3, 1021), 5.0)
    assert finding.status == "fail" and finding.signature.cause == "masked-tail"  # type: ignore[attr-defined]
    shape = shrink(ctx, finding, CHECKS["C-PRC-01"])
    assert shape and shape[-1] == 3  # the smallest row length with a tail: 3 lanes in a block of 4
    assert shape[0] <= 3


def test_the_tail_mask_bug_fails_on_all_zero_inputs_at_its_smallest_shape() -> None:
    # the sparsest failing input says where the bug is: a softmax reading 0 past n is wrong on all-zero rows
    # (1/4 where 1/3 is right), so the fault is the masking, not the arithmetic
    from kcgate.engine.checks import CHECKS
    from kcgate.engine.shrink import shrink_case

    ctx, finding = _failing((3, 1021), 5.0)
    shape, nonzero = shrink_case(ctx, finding, CHECKS["C-PRC-01"])
    assert shape[-1] == 3 and nonzero == (0, shape[0] * shape[1])


def test_a_bug_that_needs_its_inputs_keeps_the_ones_it_needs() -> None:
    # a softmax wrong only where the last lane is nonzero (it drops x[..., -1] from the sum): all-zero rows
    # pass, so the search keeps at least one lane and stops short of zero
    import torch

    from kcgate.contracts.records import Contract, Protocol
    from kcgate.engine.shrink import fewest_nonzero
    from kcgate.engine.trial import CaseContext
    from kcgate.numerics.ops import OPS
    from kcgate.plan import Case

    def last_lane_scaled(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[..., -1] = 2 * y[..., -1]  # a wrong value exactly where the last lane is nonzero
        return torch.softmax(y, -1)

    contract = Contract(id="t", klass="C-CMP-01", kernel="x:y", op="softmax", protocol=Protocol(seeds=1))
    case = Case("t", "t", "C-CMP-01", "softmax", "float32", (4, 64), 0, 11, shrink_s=5.0)
    ctx = CaseContext(contract=contract, case=case, kernel=last_lane_scaled, op=OPS["softmax"])
    from kcgate.engine.checks import CHECKS

    finding = CHECKS["C-CMP-01"](ctx)
    assert finding.status == "fail" and finding.signature is not None
    nonzero = fewest_nonzero(ctx, (4, 64), finding.signature.cause, 5.0)
    assert nonzero and 1 <= nonzero[0] < 256 and nonzero[1] == 256, nonzero


def test_no_time_no_search_and_passing_cases_are_not_shrunk() -> None:
    from kcgate.engine.checks import CHECKS
    from kcgate.engine.shrink import shrink

    ctx, finding = _failing((3, 1021), 0.0)
    assert shrink(ctx, finding, CHECKS["C-PRC-01"]) == ()
    ctx, finding = _failing((3, 1024), 5.0)
    assert finding.status == "pass"  # type: ignore[attr-defined]
    assert shrink(ctx, finding, CHECKS["C-PRC-01"]) == ()


def test_results_files_without_the_column_still_read(tmp_path: Path) -> None:
    from kcgate.results.model import CASE_FIELDS, CaseResult, Fingerprint, RunResult

    case = CaseResult("c/float32/3x1021/s0", "c", "C-PRC-01", "softmax", "float32", (3, 1021), 7, "fail")
    text = dumps_run(
        RunResult("r", Fingerprint("cpu"), (replace(case, shrunk_shape=(2, 3), shrunk_nonzero=(0, 6)),))
    )
    new = load_run(_write(tmp_path / "new.json", text)).cases[0]
    assert new.shrunk_shape == (2, 3) and new.shrunk_nonzero == (0, 6)
    doc = json.loads(text)  # a file written before the columns existed: they and those after them absent
    k = list(CASE_FIELDS).index("shrunk_shape")
    assert doc["case_fields"][k : k + 2] == ["shrunk_shape", "shrunk_nonzero"]
    doc["case_fields"] = doc["case_fields"][:k]
    doc["cases"] = [row[:k] for row in doc["cases"]]
    old = load_run(_write(tmp_path / "old.json", json.dumps(doc))).cases[0]
    assert old.shrunk_shape == () and old.shrunk_nonzero == ()


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_the_pr_comment_reproduce_line_names_the_smallest_shape() -> None:
    change = CaseChange(
        category="new-violation",
        runner="cpu-x86_64",
        case_id="sm/float32/3x1021/s0",
        contract_id="sm",
        status="fail",
        dtype="float32",
        seed=12345,
        shrunk_shape=(2, 3),
        shrunk_nonzero=(0, 6),
    )
    line = reproduce_line(Group((change,)), RenderContext())
    assert "smallest failing shape 2x3" in line
    assert "there it fails with 0 of its 6 input elements nonzero" in line
    # the same seed as the console's command, with the runner's contracts file and runner (issue 36)
    seed = repro_command("sm", "float32", 12345, (2, 3)).split("--seed ")[1]
    assert "-k sm/float32/2x3/s0 --seed " + seed in line and "--shape 2x3`; there it" in line


CONTRACTS = """
[project]
name = "tailmask"

[[contract]]
id = "softmax-other-zero"
class = "C-PRC-01"
kernel = "tests.testing.faults.semantic:softmax_other_zero"
op = "softmax"
shapes = [[64, 1024]]
"""


@pytest.mark.slow
def test_kcgate_run_prints_a_command_that_reproduces_the_shrunk_failure(tmp_path: Path) -> None:
    (tmp_path / "contracts.toml").write_text(CONTRACTS, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    base = [sys.executable, "-m", "kcgate", "run", "--contracts", str(tmp_path / "contracts.toml")]
    proc = subprocess.run(
        [*base, "--results", str(tmp_path / "r.json"), "--seed", "3"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    (case,) = [c for c in load_run(tmp_path / "r.json").cases if c.status == "fail"]
    assert case.case_id == "softmax-other-zero/float32/3x1021/s0"
    assert case.shrunk_shape[-1] == 3 and case.shrunk_nonzero == (0, case.shrunk_shape[0] * 3)
    found = re.search(
        r"smallest failing shape (\S+) \(same cause, masked-tail\): (kcgate run .*?); there it fails with 0 of",
        proc.stdout,
    )
    assert found, proc.stdout[-3000:]
    cmd = shlex.split(found.group(2))[2:]  # after "kcgate run"
    again = subprocess.run(
        [*base[:4], *cmd, "--results", str(tmp_path / "again.json"), "--shrink-s", "0"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert again.returncode == 1, again.stdout[-2000:] + again.stderr[-2000:]
    (rerun,) = load_run(tmp_path / "again.json").cases
    assert rerun.shape == case.shrunk_shape and rerun.seed == case.seed
    assert rerun.signature is not None and rerun.signature.cause == "masked-tail"


@pytest.mark.slow
def test_a_kernel_that_crashes_at_a_smaller_shape_keeps_its_verdict(tmp_path: Path) -> None:
    """The shrink tries smaller shapes in the worker; a kernel that segfaults there takes the worker with it.
    The case's own verdict is not lost: it runs again without shrinking, and says why it is not shrunk."""
    (tmp_path / "contracts.toml").write_text(
        '[project]\nname = "t"\n\n[[contract]]\nid = "mm"\nclass = "C-PRC-01"\n'
        'kernel = "tests.testing.kernels.crashy:wrong_then_segfault_when_small"\nop = "matmul"\n'
        'dtypes = ["float32"]\nshapes = [[64, 64, 64]]\nprotocol = { seeds = 1 }\n',
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "kcgate", "run", "--contracts", str(tmp_path / "contracts.toml"),
         "--results", str(tmp_path / "r.json"), "--shrink-s", "5", "-k", "64x64x64"],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (case,) = load_run(tmp_path / "r.json").cases
    assert case.status == "fail" and case.shrunk_shape == (), case.message
    assert "not shrunk: the search for a smaller failing shape ended the kernel's process" in case.message
    assert "SIGSEGV" in case.message or "signal" in case.message, case.message
