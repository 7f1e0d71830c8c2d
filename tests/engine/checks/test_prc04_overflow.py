"""C-PRC-04's fp8 overflow probe: overflowing outputs must give the declared result (saturate ±max,
inf, NaN); a kernel that passes assert_close on ordinary inputs but overflows to NaN is rejected."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kcgate.calibration.calibrate import BUILTIN, calibrate  # noqa: E402
from kcgate.contracts.load import load_project  # noqa: E402
from kcgate.devices.cpu import CpuBackend  # noqa: E402
from kcgate.engine.case import execute_case  # noqa: E402
from kcgate.engine.checks.c_prc_04_overflow import classify  # noqa: E402
from kcgate.errors import ContractsError  # noqa: E402
from kcgate.execution.executors import InProcessExecutor  # noqa: E402
from kcgate.kernels.calibration import c_prc_04_fp8 as cal  # noqa: E402
from kcgate.plan import make_plan  # noqa: E402
from kcgate.results.model import CaseResult  # noqa: E402
from tests.conftest import ROOT  # noqa: E402

CONTRACT = """
[project]
paths = ["{root}"]

[[contract]]
id = "fp8-out"
class = "C-PRC-04"
op = "{op}"
kernel = "{kernel}"
dtypes = ["float32"]
out_dtype = "{out}"
shapes = [{shape}]
protocol = {{ seeds = 1, trials = 2 }}
params = {{ overflow = "{overflow}" }}
"""
CAL = "kcgate.kernels.calibration.c_prc_04_fp8"
TESTS = "tests.testing.kernels.fp8"


def _run(
    tmp_path: Path,
    kernel: str,
    overflow: str = "saturate",
    out: str = "float8_e4m3fn",
    op: str = "gelu",
    shape: str = "[64, 256]",
) -> CaseResult:
    f = tmp_path / "contracts.toml"
    f.write_text(CONTRACT.format(root=ROOT, kernel=kernel, overflow=overflow, out=out, op=op, shape=shape))
    project = load_project(f)
    (case,) = make_plan(project, 1, {})
    return execute_case(project, case, CpuBackend())


def _evidence(r: CaseResult) -> dict[str, object]:
    assert r.signature is not None, r.message
    return dict(r.signature.evidence)


def test_saturating_kernel_passes_and_the_probe_ran(tmp_path: Path) -> None:
    r = _run(tmp_path, f"{CAL}:good")
    assert r.status == "pass", r.message
    extra = dict(r.metrics.extra)
    assert extra["overflow_elements"] > 1000 and extra["overflow_violations"] == 0


def test_nan_on_overflow_fails_saturate_with_the_overflow_signature(tmp_path: Path) -> None:
    r = _run(tmp_path, f"{CAL}:bad")
    assert r.status == "fail"
    assert r.signature is not None and r.signature.cause == "overflow", r.message
    ev = _evidence(r)
    assert ev["observed"] == "nan" and ev["policy"] == "saturate" and ev["format"] == "float8_e4m3fn"
    assert r.metrics.budget_used is not None and r.metrics.budget_used == 2 * ev["violations"] > 1000


def test_nan_policy_accepts_nan_and_rejects_saturation(tmp_path: Path) -> None:
    assert _run(tmp_path, f"{CAL}:bad", overflow="nan").status == "pass"
    r = _run(tmp_path, f"{CAL}:good", overflow="nan")
    assert r.status == "fail" and _evidence(r)["observed"] == "saturate", r.message


def test_e5m2_inf_policy(tmp_path: Path) -> None:
    assert _run(tmp_path, f"{TESTS}:gelu_e5m2_inf", "inf", "float8_e5m2").status == "pass"
    assert _run(tmp_path, f"{TESTS}:gelu_e5m2_saturate", "saturate", "float8_e5m2").status == "pass"
    r = _run(tmp_path, f"{TESTS}:gelu_e5m2_saturate", "inf", "float8_e5m2")
    assert r.status == "fail" and _evidence(r)["observed"] == "saturate", r.message
    r = _run(tmp_path, f"{TESTS}:gelu_e5m2_inf", "saturate", "float8_e5m2")
    assert r.status == "fail" and _evidence(r)["observed"] == "inf", r.message


def test_inf_policy_on_e4m3fn_is_a_contract_error(tmp_path: Path) -> None:
    with pytest.raises(ContractsError) as info:
        _run(tmp_path, f"{CAL}:good", overflow="inf")
    text = info.value.render()
    assert "params.overflow" in text and "no infinity" in text and 'overflow = "saturate"' in text
    assert re.search(r"contracts\.toml:\d+", text)
    assert _run(tmp_path, f"{TESTS}:gelu_e5m2_inf", overflow="inf", out="float8_e5m2").status == "pass"


def test_matmul_probe_overflows_in_both_signs(tmp_path: Path) -> None:
    good = _run(tmp_path, f"{TESTS}:matmul_e4m3_saturate", op="matmul", shape="[32, 64, 32]")
    assert good.status == "pass", good.message
    extra = dict(good.metrics.extra)
    assert extra["overflow_negative"] > 100 and extra["overflow_elements"] - extra["overflow_negative"] > 100
    bad = _run(tmp_path, f"{TESTS}:matmul_e4m3_nan", op="matmul", shape="[32, 64, 32]")
    assert bad.status == "fail" and _evidence(bad)["observed"] == "nan", bad.message


def test_bf16_outputs_are_not_probed(tmp_path: Path) -> None:
    r = _run(tmp_path, "kcgate.kernels.calibration.c_prc_04:good", out="bfloat16")
    assert r.status == "pass", r.message
    assert "overflow_elements" not in dict(r.metrics.extra)


@pytest.mark.slow
def test_basic_test_accepts_the_bad_kernel_that_the_contract_rejects() -> None:
    assert cal.basic_test(cal.good) and cal.basic_test(cal.bad)
    assert not cal.basic_test(cal.baseline)
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    assert torch.equal(cal.good(x).view(torch.uint8), cal.bad(x).view(torch.uint8))  # identical in range
    (row,) = calibrate(
        load_project(BUILTIN), InProcessExecutor(load_project(BUILTIN), "cpu"), "cal-prc-04-fp8"
    )
    assert row.state("good").accepted, row.state("good").message
    bad = row.state("bad")
    assert not bad.accepted and bad.cause == "overflow" and "gives nan" in bad.summary
    assert not row.state("baseline").accepted
    assert row.margin is not None and row.margin >= 1000


def test_classify_names_what_an_overflow_became() -> None:
    o = torch.tensor(
        [float("nan"), float("inf"), 448.0, -448.0, -float("inf"), 96.0, 0.0], dtype=torch.float64
    )
    assert classify(o, torch.ones(7, dtype=torch.float64), 448.0) == [
        "nan",
        "inf",
        "saturate",
        "wrapped",
        "wrapped",
        "finite-wrong",
        "finite-wrong",
    ]
