"""A contract's ``env`` that loads code at a process's start (PYTHONPATH with a sitecustomize.py, PYTHONWARNINGS,
LD_PRELOAD) reaches the kernel's side only: the sandbox servers start under it, the judge never does
(kcgate.sandbox.process.judge_env; docs/security.md#the-judge-and-the-sandbox)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcgate.sandbox.process import KERNEL_SIDE_ENV, SANDBOX_ENV, judge_env
from tests.conftest import kcgate

pytestmark = pytest.mark.slow  # real workers and sandbox servers

# Runs in every interpreter started with the contract's PYTHONPATH: records which process it is, and tries to
# blind the judge (kcgate's error function returns zeros), as a hostile repository's contract would.
SITECUSTOMIZE = """
import os, sys
with open(os.environ["KCGATE_TEST_MARKER"], "a") as f:
    f.write(open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode() + "\\n")
def _zeros(a, b):
    import torch
    return torch.zeros_like(a, dtype=torch.float64)
import importlib.abc, importlib.machinery
class _Patch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "kcgate.numerics.metrics":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            module.minus = _zeros
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, _Patch())
"""

KERNELS = """
import torch

def softmax_5pc_off(x, dim=-1):
    return torch.softmax(x, dim) * 1.05
"""


def test_code_loading_variables_travel_as_data_to_the_sandbox_only() -> None:
    env = judge_env(
        {"PATH": "/bin", SANDBOX_ENV: "stale"}, {"PYTHONPATH": "/x", "LD_PRELOAD": "/y.so", "A": "1"}
    )
    assert env["A"] == "1" and env["PATH"] == "/bin"
    assert not KERNEL_SIDE_ENV & set(env)
    assert json.loads(env[SANDBOX_ENV]) == {"PYTHONPATH": "/x", "LD_PRELOAD": "/y.so"}
    assert SANDBOX_ENV not in judge_env({SANDBOX_ENV: "stale"}, {"A": "1"})


def test_a_contracts_pythonpath_runs_its_sitecustomize_beside_the_kernel_never_in_the_judge(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (site / "offkernels.py").write_text(KERNELS)  # importable only through the contract's PYTHONPATH
    marker = tmp_path / "marker.txt"
    (tmp_path / "contracts.toml").write_text(
        '[[contract]]\nid = "off"\nclass = "C-PRC-01"\nop = "softmax"\nkernel = "offkernels:softmax_5pc_off"\n'
        'dtypes = ["float32"]\nshapes = [[4, 64]]\nprotocol = { seeds = 1, boundary = false }\n'
        f'env = {{ PYTHONPATH = "{site}", KCGATE_TEST_MARKER = "{marker}" }}\n'
    )
    proc = kcgate("run", "--results", str(tmp_path / "out.json"), "--seed", "1", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the 5%-off kernel fails: the judge is not blind
    data = json.loads((tmp_path / "out.json").read_text())
    statuses = {dict(zip(data["case_fields"], r))["status"] for r in data["cases"]}
    assert statuses == {"fail"}, data["cases"]
    started = marker.read_text().splitlines()
    assert any("kcgate.sandbox.server" in line for line in started), started  # the kernel's side got it
    assert not any("kcgate.execution.worker" in line for line in started), started  # the judge never
