"""The worker's next case waits on its command pipe while one runs (executors.IsolatedExecutor.run_many):
the worker starts it the moment it has answered, while this process records the answer."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kcgate.contracts.load import load_project
from kcgate.execution.channel import CASE_MARKER
from kcgate.execution.executors import IsolatedExecutor
from kcgate.plan import make_plan

DATA = Path(__file__).resolve().parent.parent / "data"
pytestmark = pytest.mark.slow  # real worker processes

SLEEP_S = 0.4  # tests.testing.kernels.crashy:slow sleeps this long per call (one trial per case in slow.toml)


def _log(executor: IsolatedExecutor) -> str:
    worker = executor.worker
    assert worker is not None
    worker.log.seek(0)
    return worker.log.read().decode()


def test_the_next_case_starts_before_the_parent_asks_for_it() -> None:
    project = load_project(DATA / "slow.toml")
    executor = IsolatedExecutor(project, "cpu")
    try:
        cases = make_plan(project, 1, executor.default_shapes())[:3]
        results = executor.run_many(cases)
        first = next(results)
        time.sleep(SLEEP_S / 2)  # the parent is busy; the worker is not
        assert f"{CASE_MARKER}{cases[1].case_id}" in _log(executor)
        assert f"{CASE_MARKER}{cases[2].case_id}" not in _log(executor)  # one queued, not all
        ids = [first.case_id, *(r.case_id for r in results)]
    finally:
        executor.close()
    assert ids == [c.case_id for c in cases]


def test_a_queued_case_is_timed_from_when_it_could_start() -> None:
    """Each case takes 1 s (KCGATE_TEST_SLOW_S); the limit is 1.5x that plus 0.15 s. Every case is sent a case
    ahead, so timing from the send would count its predecessor's run too (2x) and time it out; a slow parent
    does not either. (1 s, not SLEEP_S: a case's fork into its sandbox and the crossing take up to 0.2 s of a
    loaded 2-core machine, more than 0.15 s.)"""
    project = load_project(DATA / "slow.toml")
    env = {**os.environ, "KCGATE_TEST_SLOW_S": "1.0"}
    executor = IsolatedExecutor(project, "cpu", timeout=1.5 * 1.0 + 0.15, env=env)
    try:
        cases = make_plan(project, 1, executor.default_shapes())[:3]
        statuses = []
        for result in executor.run_many(cases):
            statuses.append((result.status, result.message[:200]))
            time.sleep(0.3)  # recording the result takes a while: the next case's clock is its own
    finally:
        executor.close()
    assert statuses == [("pass", "")] * 3


def test_a_queued_case_goes_to_the_fresh_worker_after_a_crash() -> None:
    project = load_project(DATA / "crashy.toml")
    wanted = ["segfault", "good-after-segfault"]
    executor = IsolatedExecutor(project, "cpu")
    try:
        plan = make_plan(project, 1, executor.default_shapes())
        cases = [next(c for c in plan if c.contract_id == w) for w in wanted]
        results = list(executor.run_many(cases))
    finally:
        executor.close()
    assert [r.case_id for r in results] == [c.case_id for c in cases]
    assert results[0].status == "error" and "SIGSEGV" in results[0].message
    assert results[1].status == "pass", results[1].message


def test_one_timeout_rule_the_override_else_the_contracts() -> None:
    from kcgate.execution.executors import case_timeout

    project = load_project(DATA / "crashy.toml")
    case = make_plan(project, 1, {})[0]
    own = project.contract(case.contract_id).protocol.timeout_s
    assert case_timeout(project, case, None) == own
    assert case_timeout(project, case, 7.0) == 7.0 != own


def test_a_case_queued_to_a_worker_that_died_between_answers_runs_on_the_fresh_one() -> None:
    """The first kernel's thread ends the worker 0.5 s after its call, while the second case (queued to
    that worker) runs and this process is still busy with the first answer. The fresh worker runs the
    second case again, as if it had never been queued; no case reads another worker's channel."""
    project = load_project(DATA / "late.toml")
    executor = IsolatedExecutor(project, "cpu")
    try:
        cases = make_plan(project, 1, executor.default_shapes())
        results = []
        for result in executor.run_many(cases):
            results.append(result)
            if len(results) == 1:
                time.sleep(1.0)  # the worker dies meanwhile (during or just after the queued case)
    finally:
        executor.close()
    assert [(r.contract_id, r.status) for r in results] == [
        ("late-exit", "pass"),
        ("slow-after-late", "pass"),
        ("good-after-late", "pass"),
    ], [r.message[:300] for r in results]
