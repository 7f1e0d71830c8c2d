"""A crash is the crashing case's (issue 53, item 4): every case's kernel runs in a sandbox child forked fresh
for it, so a kernel that corrupts its heap or changes its process's state leaves nothing for a later case. An
honest case after such a kernel, in the same run and worker, gets the verdict it gets alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.results.model import load_run
from tests.conftest import DATA, kcgate

pytestmark = pytest.mark.slow

CONTRACTS = """
[[contract]]
id = "{id}"
class = "C-PRC-01"
kernel = "tests.testing.kernels.judge_attacks:{kernel}"
op = "softmax"
dtypes = ["float32"]
shapes = [[8, 64]]
protocol = {{ seeds = 2, trials = 3, boundary = false, timeout_s = 60 }}
"""
DAMAGE = (("corrupt-heap", "corrupt_heap"), ("change-state", "change_state"))
HONEST = (("honest", "honest"), ("honest-off", "honest_off"))


def _run(tmp: Path, kernels: tuple[tuple[str, str], ...]) -> dict[str, tuple[str, float | None, str]]:
    toml = tmp / "c.toml"
    toml.write_text(
        f'[project]\npaths = ["{DATA.parent.parent}"]\n'
        + "".join(CONTRACTS.format(id=i, kernel=k) for i, k in kernels)
    )
    out = tmp / "cpu.json"
    proc = kcgate(
        "run", "-c", str(toml), "--results", str(out), "--seed", "3", "--shrink-s", "0", "-q", cwd=tmp
    )
    assert "internal error" not in proc.stderr, proc.stderr
    return {c.case_id: (c.status, c.metrics.budget_used, c.message) for c in load_run(out).cases}


@pytest.fixture(scope="module")
def together(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, float | None, str]]:
    return _run(tmp_path_factory.mktemp("together"), (*DAMAGE, *HONEST))


def test_an_honest_case_after_damage_gets_its_verdict_alone(
    together: dict[str, tuple[str, float | None, str]], tmp_path: Path
) -> None:
    alone = _run(tmp_path, HONEST)
    assert {k: v[:2] for k, v in together.items() if k in alone} == {k: v[:2] for k, v in alone.items()}
    assert {v[0] for k, v in alone.items() if k.startswith("honest/")} == {"pass"}
    assert {v[0] for k, v in alone.items() if k.startswith("honest-off/")} == {"fail"}


def test_the_crash_is_charged_to_the_case_that_crashed(
    together: dict[str, tuple[str, float | None, str]],
) -> None:
    """The heap-corrupting kernel's own next call crashes its child: its case is an error that says the case
    ran alone in a sandbox forked for it."""
    crashed = [v for k, v in together.items() if k.startswith("corrupt-heap/")]
    assert crashed and {s for s, _, _ in crashed} == {"error"}, crashed
    assert all("forked fresh for it" in m and "SIGSEGV" in m for _, _, m in crashed), crashed
