"""The Python API (kcgate.check, kcgate.assert_contract, @kcgate.contract) and [project].discover."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import kcgate
from kcgate.contracts.load import load_project
from kcgate.contracts.policy import Policy
from kcgate.errors import ContractsError
from kcgate.gate.diff import diff_runs
from kcgate.gate.model import Diff
from kcgate.kernels import builtin as builtin_kernels
from kcgate.render.annotations import make_annotations
from kcgate.results.model import load_run
from tests.conftest import ROOT
from tests.conftest import kcgate as kcgate_cli
from tests.testing.kernels import accumulate

SMALL = {"protocol": {"seeds": 1, "trials": 2}}


def test_assert_contract_in_an_ordinary_test() -> None:
    """How a kernel repository uses kcgate inside its own pytest suite."""
    kcgate.assert_contract(
        builtin_kernels.rmsnorm,
        op="rmsnorm",
        cls="C-PRC-01",
        dtypes=["float32", "bfloat16"],
        shapes=[[8, 512]],
        **SMALL,
    )
    result = kcgate.assert_contract(
        builtin_kernels.softmax, op="softmax", cls="C-PRC-02", shapes=[[4, 256]], **SMALL
    )
    assert result.ok and [c.case_id for c in result] == ["softmax/float32/4x256/s0"]
    assert result.contract.tolerance.method == "error-bound"  # the class defaults apply as in TOML


def test_a_violation_raises_assertion_error_with_kcgates_summary() -> None:
    with pytest.raises(AssertionError) as info:
        kcgate.assert_contract(
            accumulate.bf16_blocks, op="matmul", cls="C-PRC-01", id="gemm", shapes=[[16, 2048, 16]], **SMALL
        )
    text = str(info.value)
    assert "kcgate: contract gemm violated: gemm/float32/16x2048x16/s0 (C-PRC-01, op matmul, float32)" in text
    assert "budget used" in text and "max ULP" in text and "worst element at index" in text
    # the summary names the violation signature: the K sweep fits a bf16 running sum rounded every 128 terms
    # (tests/engine/checks/test_accumulator_naming.py holds it on 24 seeds)
    assert "signature: low-precision-accumulator" in text and "bf16" in text


def test_check_returns_results_and_never_raises_for_a_violation() -> None:
    result = kcgate.check(
        lambda a, b: torch.zeros(a.shape[0], b.shape[1]),
        op="matmul",
        cls="C-PRC-01",
        shapes=[[8, 64, 8]],
        seed=7,
        **SMALL,
    )
    assert not result.ok and result.seed == 7 and [c.status for c in result.failed] == ["fail"]


def test_a_contract_whose_devices_leave_this_device_out_runs_no_case_and_says_so() -> None:
    result = kcgate.check(
        builtin_kernels.softmax,
        op="softmax",
        cls="C-PRC-02",
        shapes=[[4, 256]],
        devices=["cuda"],
        device="cpu",
    )
    assert result.cases == () and not result.ok
    assert "no case ran on this device (the contract's devices: cuda)" in result.summary()


@pytest.mark.slow
def test_process_isolation_runs_an_importable_kernel_in_a_worker() -> None:
    result = kcgate.check(
        "tests.testing.kernels.crashy:segfault",
        op="matmul",
        cls="C-PRC-01",
        shapes=[[8, 64, 8]],
        isolation="process",
        **SMALL,
    )
    assert [c.status for c in result] == ["error"] and "SIGSEGV" in result.cases[0].message
    routed = kcgate.check(
        "tests.testing.kernels.envprobe:matmul",
        op="matmul",
        cls="C-PRC-01",
        shapes=[[8, 64, 8]],
        env={"KCGATE_TEST_ENV_PROBE": "on"},  # set in its worker before the kernel is imported
        isolation="process",
        **SMALL,
    )
    assert routed.ok, routed.summary()
    with pytest.raises(kcgate.ContractError, match="cannot be imported by name"):
        kcgate.check(lambda a, b: a @ b, op="matmul", cls="C-PRC-01", isolation="process")


BAD = {"op": "matmull", "cls": "C-PRC-1", "dtypes": ["bf16x"], "tolerance": {"lamda": 3.0}}
BAD_TOML = """
[[contract]]
id = "k"
class = "C-PRC-1"
kernel = "kcgate.kernels.builtin:matmul"
op = "matmull"
dtypes = ["bf16x"]
tolerance = { lamda = 3.0 }
"""


def test_keyword_errors_are_validates_messages_without_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(kcgate.ContractError) as info:
        kcgate.check("kcgate.kernels.builtin:matmul", id="k", **BAD)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    path = tmp_path / "contracts.toml"
    path.write_text(BAD_TOML)
    with pytest.raises(ContractsError) as toml_info:
        load_project(path)
    from_toml = sorted((p.where, p.message, p.fix) for p in toml_info.value.problems)
    from_api = sorted((p.where, p.message, p.fix) for p in info.value.problems)
    assert from_api == from_toml and len(from_api) == 4
    text = str(info.value)
    assert "contract 'k'.op: unknown op 'matmull'\n    fix: did you mean 'matmul'?" in text
    assert str(path) not in text and ":4:" not in text


def test_import_kcgate_is_torch_free() -> None:
    code = "import sys, kcgate; kcgate.check; kcgate.contract; assert 'torch' not in sys.modules, 'torch'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


KERNELS = '''
"""Scratch kernels declaring their contracts."""
import torch

import kcgate
from kcgate import contract


@contract(op="softmax", cls="C-PRC-02", shapes=[[8, 256]], protocol={"seeds": 1})
def softmax(x):
    return torch.softmax(x, dim=-1)


@kcgate.contract(
    id="gemm-bf16acc",
    op="matmul",
    cls="C-PRC-01",
    shapes=[[16, 2048, 16]],
    protocol={"seeds": 1},
)
def gemm(a, b):
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.bfloat16)
    for k in range(0, a.shape[1], 128):
        acc = (acc.float() + a[:, k : k + 128] @ b[k : k + 128]).to(torch.bfloat16)
    return acc.float()
'''


def scratch(tmp_path: Path, kernels: str = KERNELS) -> Path:
    pkg = tmp_path / "src" / "scratchk"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text(textwrap.dedent(kernels))
    contracts = tmp_path / "contracts.toml"
    contracts.write_text('[project]\nname = "scratch"\npaths = ["src"]\ndiscover = ["scratchk"]\n')
    return contracts


@pytest.mark.slow
def test_discover_finds_decorated_kernels_without_importing_them(
    tmp_path: Path, no_torch_env: dict[str, str]
) -> None:
    contracts = scratch(tmp_path)
    project = load_project(contracts)
    assert [(c.id, c.kernel, c.klass, c.line) for c in project.contracts] == [
        ("softmax", "scratchk.ops:softmax", "C-PRC-02", 9),
        ("gemm-bf16acc", "scratchk.ops:gemm", "C-PRC-01", 14),
    ]
    assert kcgate_cli("validate", str(contracts), env=no_torch_env).returncode == 0


@pytest.mark.slow
def test_discovered_contracts_run_and_fail_like_toml_ones(tmp_path: Path) -> None:
    contracts = scratch(tmp_path)
    proc = kcgate_cli("run", "-c", str(contracts), "--results", str(tmp_path / "r.json"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "PASS    softmax/float32/8x256/s0" in proc.stdout
    assert "FAIL    gemm-bf16acc/float32/16x2048x16/s0" in proc.stdout
    # annotations point at the .py line that declares the contract, not at contracts.toml
    run = load_run(tmp_path / "r.json")
    gemm = next(c for c in run.cases if c.contract_id == "gemm-bf16acc")
    assert (gemm.source, gemm.line) == ("src/scratchk/ops.py", 14)
    base = run.with_cases([replace(c, status="pass") for c in run.cases])
    verdict = Diff((diff_runs(base, run, "cpu", Policy(), dt.date(2026, 1, 1)),))
    (note,) = make_annotations(verdict, contracts_file="contracts.toml")
    assert (note.file, note.line, note.level) == ("src/scratchk/ops.py", 14, "error")


def test_a_bad_declaration_names_the_python_file_and_line(tmp_path: Path) -> None:
    bad = KERNELS.replace("shapes=[[16, 2048, 16]],", "shapes=SHAPES,").replace(
        'op="softmax"', 'op="softmaxx"'
    )
    contracts = scratch(tmp_path, bad)
    proc = kcgate_cli("validate", str(contracts))
    assert proc.returncode == 2
    ops = tmp_path / "src" / "scratchk" / "ops.py"
    assert f"{ops}:9: contract 'softmax'.op: unknown op 'softmaxx'" in proc.stderr
    assert f"{ops}:18: @contract on gemm.shapes: must be a literal" in proc.stderr


def test_the_decorator_validates_at_import_and_registers() -> None:
    with pytest.raises(kcgate.ContractError, match="unknown class 'C-PRC-9'"):

        @kcgate.contract(op="matmul", cls="C-PRC-9")
        def k(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a @ b

    @kcgate.contract(op="gelu", cls="C-ORD-02", dtypes=["bfloat16"])
    def gelu(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x)

    assert gelu(torch.zeros(2)).shape == (2,)  # returned unchanged
    declared = kcgate.registered()[-1]
    assert (declared.id, declared.op, declared.dtypes) == ("gelu", "gelu", ("bfloat16",))
