"""The run loop (execution.runloop): a journal line per finished case, the results file rewritten only before
the first case and at the end (or on a signal), and every case in plan order at the end."""

from __future__ import annotations

from pathlib import Path

from kcgate.contracts.load import load_project
from kcgate.execution.executors import InProcessExecutor
from kcgate.execution.runloop import execute_plan, new_run
from kcgate.plan import make_plan
from kcgate.results.journal import journal_path
from kcgate.results.model import load_run

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
