"""The crossing changes no verdict: each case run with its kernel in a sandbox child (kcgate.sandbox) and in
this process gives the same status, metrics (every budget, to the last digit) and signature. Module kernels
with ``init`` and a backward, an ``out`` buffer, the families of small.toml in fp32 and bf16, and custom ops of
several outputs (tuples, dicts, named inputs) with their backward through the judge's autograd bridge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kcgate.contracts.load import load_project
from kcgate.devices.cpu import CpuBackend
from kcgate.engine.case import execute_case
from kcgate.plan import make_plan
from kcgate.sandbox.process import Sandbox
from tests.conftest import DATA, ROOT
from tests.engine import test_multi_outputs as multi

pytestmark = pytest.mark.slow

SHIPPED = f"""
[project]
paths = ["{ROOT}"]

[[contract]]
id = "module-both"
class = "C-PRC-01"
kernel = "tests.testing.kernels.norms:LlamaRMSNorm"
op = "rmsnorm"
init = {{ hidden_size = "{{n}}" }}
direction = "both"
dtypes = ["float32", "bfloat16"]
shapes = [[4, 64]]
protocol = {{ seeds = 2, trials = 2, boundary = false }}

[[contract]]
id = "out-buffer"
class = "C-PRC-01"
kernel = "tests.testing.kernels.outbuf:overrun"
op = "matmul"
call = "out"
shapes = [[8, 64, 8]]
protocol = {{ seeds = 1, trials = 1, boundary = false }}
"""


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox()
    box.setup("cpu", 1, 0)
    yield box
    box.close()


def _projects(tmp: Path) -> list[Path]:
    (tmp / "kk.py").write_text(multi.KERNELS)
    body = "\n".join(multi._contract(cid, *row) for cid, row in multi.CONTRACTS.items())
    (tmp / "multi.toml").write_text(f'[project]\npaths = ["{tmp}"]\n\n{body}')
    (tmp / "shipped.toml").write_text(SHIPPED)
    return [tmp / "multi.toml", tmp / "shipped.toml", DATA / "small.toml"]


def test_a_case_in_the_sandbox_gets_the_verdict_it_gets_in_process(sandbox: Sandbox, tmp_path: Path) -> None:
    backend = CpuBackend()
    backend.configure()
    compared = 0
    for path in _projects(tmp_path):
        project = load_project(path)
        for case in make_plan(project, 7, {}):
            code = sandbox.case("cpu")
            try:
                there = execute_case(project, case, backend, code=code)
            finally:
                code.close()
            here = execute_case(project, case, backend)
            assert (there.status, there.metrics, there.signature, there.message) == (
                here.status, here.metrics, here.signature, here.message,
            ), case.case_id  # fmt: skip
            compared += 1
    assert compared >= 15
