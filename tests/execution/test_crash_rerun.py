"""ClusterFuzz's rule in the executor (issue 53, item 4): a case whose worker dies after the worker ran earlier
cases is run again alone in a fresh worker before it is charged, and its result says so. A kernel that kills
its judge is charged after its rerun; the honest case after it is untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.results.model import load_run
from tests.conftest import DATA, kcgate

pytestmark = pytest.mark.slow

CONTRACT = """
[[contract]]
id = "{id}"
class = "C-PRC-01"
kernel = "tests.testing.kernels.judge_attacks:{kernel}"
op = "softmax"
dtypes = ["float32"]
shapes = [[8, 64]]
protocol = {{ seeds = 1, trials = 1, boundary = false, timeout_s = 120 }}
"""


def test_a_crash_after_earlier_cases_is_rerun_alone_before_it_is_charged(tmp_path: Path) -> None:
    kernels = (("first", "honest"), ("killer", "kill_judge"), ("after", "honest"))
    toml = tmp_path / "c.toml"
    toml.write_text(
        f'[project]\npaths = ["{DATA.parent.parent}"]\n'
        + "".join(CONTRACT.format(id=i, kernel=k) for i, k in kernels)
    )
    out = tmp_path / "cpu.json"
    proc = kcgate(
        "run", "-c", str(toml), "--results", str(out), "--seed", "1", "--shrink-s", "0", "-q", cwd=tmp_path
    )
    assert "internal error" not in proc.stderr, proc.stderr
    cases = {c.contract_id: c for c in load_run(out).cases}
    assert cases["first"].status == "pass" and cases["after"].status == "pass", cases
    killer = cases["killer"]
    assert killer.status == "error", killer
    assert "rerun alone in a fresh worker" in killer.message and "after 1 earlier cases" in killer.message, (
        killer
    )
