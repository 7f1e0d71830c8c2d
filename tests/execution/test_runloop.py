"""The run loop (execution.runloop): a journal line per finished case, the results file rewritten only before
the first case and at the end (or on a signal), and every case in plan order at the end."""

from __future__ import annotations

import json
from pathlib import Path

from kcgate.contracts.load import load_project
from kcgate.execution.executors import InProcessExecutor
from kcgate.execution.runloop import execute_plan, new_run, resume_from
from kcgate.plan import make_plan
from kcgate.results.journal import journal_path, key_path
from kcgate.results.model import CaseResult, load_run, write_run

CONTRACTS = """
[[contract]]
id = "mm"
class = "C-PRC-01"
kernel = "kcgate.kernels.builtin:matmul"
op = "matmul"
dtypes = ["float32"]
shapes = [[4, 8, 4], [5, 6, 7], [8, 8, 8], [3, 9, 2], [6, 4, 5]]
protocol = { seeds = 8, trials = 1 }
"""


def test_the_journal_grows_per_case_and_the_results_file_is_written_at_the_ends(tmp_path: Path) -> None:
    (tmp_path / "contracts.toml").write_text(CONTRACTS)
    project = load_project(tmp_path / "contracts.toml")
    executor = InProcessExecutor(project, "cpu")
    cases = make_plan(project, 1, executor.default_shapes())
    assert len(cases) == 40
    out = tmp_path / "r.json"
    seen: list[tuple[int, int]] = []  # (cases in the results file, journal lines) after each case

    def progress(i: int, n: int, result: object) -> None:
        journal = journal_path(out).read_text().splitlines()
        seen.append((len(load_run(out).cases), len(journal) - 1))  # the journal's first line is its header

    final = execute_plan(
        cases, executor, new_run("cpu-x", *executor.handshake()[1:], "c"), out, None, progress
    )
    assert seen == [(0, i) for i in range(1, 41)]  # no rewrite of the results file mid-run: O(n) bytes in all
    on_disk = load_run(out)
    assert on_disk.complete and [c.case_id for c in on_disk.cases] == [c.case_id for c in cases]
    assert [(c.case_id, c.status) for c in on_disk.cases] == [(c.case_id, c.status) for c in final.cases]
    assert not journal_path(out).exists()  # compacted into the results file


def _killed_after(tmp_path: Path, n: int, contracts: str = ""):  # type: ignore[no-untyped-def]
    """The files a kill -9 after ``n`` finished cases leaves (snapshotted mid-run: results, journal, key)."""
    (tmp_path / "contracts.toml").write_text(contracts or CONTRACTS.replace("seeds = 8", "seeds = 1"))
    project = load_project(tmp_path / "contracts.toml")
    executor = InProcessExecutor(project, "cpu")
    cases = make_plan(project, 1, executor.default_shapes())
    out = tmp_path / "r.json"
    snapshot: dict[Path, bytes] = {}

    def progress(i: int, total: int, result: object) -> None:
        if i == n:
            snapshot.update({p: p.read_bytes() for p in (out, journal_path(out), key_path(out))})

    run = new_run("cpu-x", *executor.handshake()[1:], "c")
    execute_plan(cases, executor, run, out, None, progress)
    for path, data in snapshot.items():
        path.write_bytes(data)
    key_path(out).chmod(0o600)
    return out, run, cases


def test_resume_keeps_what_the_signed_journal_vouches_for_and_counts_the_rest(tmp_path: Path) -> None:
    """Issue 35 #2: rows appended or edited by anything but the run are run again, and counted."""
    out, run, cases = _killed_after(tmp_path, 3)
    kept = resume_from(out, run, cases)
    assert sorted(kept.done) == sorted(c.case_id for c in cases[:3]) and kept.unverified == 0
    journal = journal_path(out)
    lines = journal.read_bytes().split(b"\n")
    row = json.loads(lines[1].split(b" ", 2)[2])  # MAC, plan key, row
    forged = [cases[4].case_id, *row[1:]]
    edited = lines[2].replace(b'"pass"', b'"fail"') if b'"pass"' in lines[2] else lines[2] + b"x"
    journal.write_bytes(
        b"\n".join([lines[0], lines[1], edited, lines[3], json.dumps(forged).encode(), b"f" * 64 + b" []"])
        + b"\n"
    )
    tampered = resume_from(out, run, cases)
    assert (
        sorted(tampered.done) == sorted(c.case_id for c in (cases[0], cases[2])) and tampered.unverified == 3
    )
    assert "3 finished result(s)" in tampered.notice()
    # a results file given a case the journal's header does not vouch for
    write_run(out, load_run(out).with_cases((CaseResult(**{**row_case(row), "case_id": cases[3].case_id}),)))
    assert cases[3].case_id not in resume_from(out, run, cases).done


def test_resume_trusts_nothing_when_the_key_is_not_the_runs_own(tmp_path: Path) -> None:
    out, run, cases = _killed_after(tmp_path, 3)
    key_path(out).chmod(0o644)  # readable by others: not a key kcgate wrote
    resumed = resume_from(out, run, cases)
    assert resumed.done == {} and resumed.unverified == 0  # an unverifiable header: nothing to count
    key_path(out).chmod(0o600)
    key_path(out).write_text("00" * 32)  # another key: the header does not verify
    assert resume_from(out, run, cases).done == {}


def row_case(row: list) -> dict:  # type: ignore[type-arg]
    from kcgate.results.model import CaseResult as C

    return {f: getattr(C.from_row(row), f) for f in C.__dataclass_fields__}


# ---- a changed plan runs again (#44) ------------------------------------------------------------------

_KERNEL = "import torch\n\n\ndef mm(a, b):\n    return a @ b\n"


def _killed_with_module(tmp_path: Path, contracts: str):  # type: ignore[no-untyped-def]
    (tmp_path / "kmod.py").write_text(_KERNEL)
    return _killed_after(tmp_path, 3, contracts)


def _replan(tmp_path: Path, contracts: str):  # type: ignore[no-untyped-def]
    import sys

    sys.modules.pop("kmod", None)
    (tmp_path / "contracts.toml").write_text(contracts)
    project = load_project(tmp_path / "contracts.toml")
    return make_plan(project, 1, InProcessExecutor(project, "cpu").default_shapes())


_OWN = '[project]\npaths = ["."]\n\n' + CONTRACTS.replace("seeds = 8", "seeds = 1").replace(
    "kcgate.kernels.builtin:matmul", "kmod:mm"
)


def test_resume_reruns_cases_whose_contract_kernel_changed(tmp_path: Path) -> None:
    """The attack: kill a run, point the contract at a zeros kernel, resume: the old passes were kept."""
    out, run, _cases = _killed_with_module(tmp_path, _OWN)
    (tmp_path / "kmod.py").write_text(_KERNEL + "\n\ndef zeros(a, b):\n    return (a @ b) * 0\n")
    cases = _replan(tmp_path, _OWN.replace("kmod:mm", "kmod:zeros"))
    resumed = resume_from(out, run, cases)
    assert resumed.done == {} and resumed.unverified == 3, resumed


def test_resume_reruns_cases_whose_kernel_source_changed(tmp_path: Path) -> None:
    out, run, _cases = _killed_with_module(tmp_path, _OWN)
    (tmp_path / "kmod.py").write_text(_KERNEL.replace("a @ b", "(a @ b) * 0"))
    assert resume_from(out, run, _replan(tmp_path, _OWN)).done == {}


def test_resume_reruns_cases_whose_kernels_helper_module_changed(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("def mm(a, b):\n    return a @ b\n")
    out, run, _cases = _killed_with_module(tmp_path, _OWN)
    (tmp_path / "kmod.py").write_text("import helper\n\n\ndef mm(a, b):\n    return helper.mm(a, b)\n")
    out, run, _cases = _killed_after(tmp_path, 3, _OWN)
    assert resume_from(out, run, _replan(tmp_path, _OWN)).done  # unchanged: kept
    (tmp_path / "helper.py").write_text("def mm(a, b):\n    return (a @ b) * 0\n")
    assert resume_from(out, run, _replan(tmp_path, _OWN)).done == {}


def test_resume_reruns_cases_whose_tolerance_or_env_changed(tmp_path: Path) -> None:
    out, run, _cases = _killed_with_module(tmp_path, _OWN)
    loose = _OWN.replace("protocol =", 'tolerance = { method = "relative", rtol = 0.5 }\nprotocol =')
    assert resume_from(out, run, _replan(tmp_path, loose)).done == {}
    env = _OWN.replace("protocol =", 'env = { ANY = "1" }\nprotocol =')
    assert resume_from(out, run, _replan(tmp_path, env)).done == {}


def test_resume_keeps_the_cases_of_an_unchanged_plan(tmp_path: Path) -> None:
    out, run, cases = _killed_with_module(tmp_path, _OWN)
    kept = resume_from(out, run, _replan(tmp_path, _OWN))
    assert sorted(kept.done) == sorted(c.case_id for c in cases[:3]) and kept.unverified == 0


def test_resume_reruns_what_another_kcgate_version_ran(tmp_path: Path) -> None:
    from dataclasses import replace

    out, run, _cases = _killed_with_module(tmp_path, _OWN)
    assert resume_from(out, replace(run, kcgate_version="0.0.0-other"), _replan(tmp_path, _OWN)).done == {}
