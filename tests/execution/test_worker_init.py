"""The worker runs the parent's parse of contracts.toml (sent in its init line), never the file itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcgate.contracts.load import load_project
from kcgate.execution import handoff
from kcgate.execution.executors import EnvRouter, _init_line
from kcgate.execution.pool import make_executor
from kcgate.plan import make_plan

pytestmark = pytest.mark.slow  # real worker subprocesses

CONTRACTS = """\
[[contract]]
id = "sum"
class = "C-ORD-02"
kernel = "kcgate.kernels.builtin:row_sum"
op = "sum"
shapes = [[4, 64]]
protocol = { seeds = 1, trials = 1 }

[[contract]]
id = "sum-in-its-own-env"
class = "C-ORD-02"
kernel = "kcgate.kernels.builtin:row_sum"
op = "sum"
shapes = [[4, 64]]
protocol = { seeds = 1, trials = 1 }
env = { KCGATE_TEST_OWN_ENV = "1" }
"""


def test_workers_run_the_parents_parse_after_the_file_changed(tmp_path: Path) -> None:
    """The file is broken after the parent parsed it: a worker that read it would refuse to start (an error
    handshake); the first worker and the one started later for the env contract both run the cases."""
    path = tmp_path / "contracts.toml"
    path.write_text(CONTRACTS, encoding="utf-8")
    project = load_project(path)
    path.write_text("this is [not TOML\n", encoding="utf-8")
    executor = make_executor("process", project, "cpu")
    assert isinstance(executor, EnvRouter)  # the env contract gets a worker of its own
    try:
        cases = make_plan(project, 1, executor.default_shapes())
        results = {r.contract_id: r for r in executor.run_many(cases)}
    finally:
        executor.close()
    assert {cid: r.status for cid, r in results.items()} == {"sum": "pass", "sum-in-its-own-env": "pass"}, [
        r.message for r in results.values()
    ]


def test_the_init_line_carries_the_project_in_one_json_line(tmp_path: Path) -> None:
    path = tmp_path / "contracts.toml"
    path.write_text(CONTRACTS, encoding="utf-8")
    project = load_project(path)
    line = _init_line({"fd": 5, "key": "k", "nonce": "n"}, handoff.encode(project))
    assert line.endswith("\n") and line.count("\n") == 1
    init = json.loads(line)
    assert {k: init[k] for k in ("fd", "key", "nonce")} == {"fd": 5, "key": "k", "nonce": "n"}
    assert handoff.decode(init["project"]) == project


def test_the_handoff_accepts_only_a_project() -> None:
    import base64
    import pickle

    with pytest.raises(TypeError, match="not a Project"):
        handoff.decode(base64.b64encode(pickle.dumps({"name": "p"})).decode("ascii"))
