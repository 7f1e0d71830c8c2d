"""Freivalds at the right sensitivity: the sensitivity test on the residuals, protocol.freivalds_vectors, the
element count, and the comparison with the real reference (ashiba-verify, vendored verbatim)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from kcgate.contracts.load import load_project
from kcgate.devices.cpu import CpuBackend
from kcgate.engine.case import execute_case
from kcgate.numerics.oracles.freivalds import DEFAULT_VECTORS, freivalds_check
from kcgate.plan import make_plan
from tests.conftest import ROOT
from tests.testing.kernels.excess import sequential_matmul, split_k_matmul


def _reference():  # type: ignore[no-untyped-def]
    """ashiba-verify's freivalds_verify from benchmarks/_reference.py (installed or vendored), not a copy."""
    sys.path.insert(0, str(Path(ROOT) / "benchmarks"))
    spec = importlib.util.spec_from_file_location("_reference", Path(ROOT) / "benchmarks" / "_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _product(n: int, seed: int, dtype: torch.dtype = torch.float32):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)
    return a, b, a @ b, g


def test_the_default_misses_a_bad_row_with_probability_at_most_1e_3() -> None:
    assert DEFAULT_VECTORS == 10 and 2.0**-DEFAULT_VECTORS <= 1e-3


def test_c_plus_1e_3_noise_fails_though_within_the_bound() -> None:
    for seed in range(5):
        a, b, c, g = _product(512, seed)
        r = freivalds_check(a, b, c + 0.001 * torch.randn(c.shape, generator=g))
        assert r.bound_passed and not r.passed and r.rms_ratio > 5, r


@pytest.mark.parametrize(
    ("n", "dtype", "order"),
    [
        (256, torch.float32, "torch"),
        (256, torch.float32, "sequential"),
        (512, torch.float32, "split-k"),
        (256, torch.bfloat16, "torch"),
        (256, torch.float16, "torch"),
    ],
)
@pytest.mark.slow
def test_correct_products_pass_in_any_order(n: int, dtype: torch.dtype, order: str) -> None:
    for seed in range(25 if order == "torch" else 3):
        a, b, c, _ = _product(n, seed, dtype)
        if order == "sequential":
            c = sequential_matmul(a, b)
        elif order == "split-k":
            c = split_k_matmul(a, b)
        r = freivalds_check(a, b, c)
        assert r.passed and r.excess_ratio < 0.8, r


def test_single_elements_at_least_as_small_as_the_real_reference_catches() -> None:
    """fp32, n = 512: the smallest corruption the reference catches every time, halved, kcgate still
    catches every time (the reference is ashiba-verify's own code; measured 30-60x in the benchmark)."""
    ref = _reference()
    a, b, c, g = _product(512, 7)
    rms = float(c.double().square().mean().sqrt())

    def caught(check, delta: float) -> int:  # type: ignore[no-untyped-def]
        hits = 0
        for t in range(20):
            bad = c.clone()
            bad[(7 * t) % 512, (13 * t + 5) % 512] += delta if t % 2 else -delta
            hits += not check(a, b, bad)
        return hits

    ref_delta = next(f * rms for f in (0.003, 0.01, 0.03, 0.1) if caught(ref.reference_passes, f * rms) == 20)
    assert caught(lambda *x: freivalds_check(*x).passed, ref_delta / 2) == 20
    assert caught(lambda *x: freivalds_check(*x).passed, ref_delta / 20) == 20


def test_the_reference_raises_on_mixed_dtypes() -> None:
    a, b, _, _ = _product(64, 1, torch.bfloat16)
    got = _reference().reference_passes(a, b, a.float() @ b.float())
    assert isinstance(got, str) and got.startswith("raises RuntimeError")
    assert freivalds_check(a, b, a.float() @ b.float()).passed  # kcgate takes bf16 in, fp32 out


def test_the_vendored_reference_is_verbatim() -> None:
    import hashlib

    path = Path(ROOT) / "benchmarks" / "third_party" / "ashiba_verify" / "freivalds.py"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == "a16b9a67da90eec26571bc5c315c3831e2e14f1a673172a6c9e7467d42664b82"  # commit e41195e
    assert (path.parent / "LICENSE").read_text().lstrip().startswith("Apache License")


CONTRACT = """
[project]
paths = ["{root}"]

[[contract]]
id = "mm"
class = "C-PRC-01"
kernel = "tests.testing.kernels.excess:{kernel}"
op = "matmul"
oracle = "freivalds"
shapes = [[256, 512, 256]]
protocol = {{ seeds = 1, trials = 1{protocol} }}
"""


def _run(tmp_path: Path, kernel: str, protocol: str = ""):  # type: ignore[no-untyped-def]
    f = tmp_path / "c.toml"
    f.write_text(CONTRACT.format(root=ROOT, kernel=kernel, protocol=protocol))
    project = load_project(f)
    (case,) = make_plan(project, 1, {})
    return execute_case(project, case, CpuBackend())


def test_noise_fails_excess_error_through_the_harness(tmp_path: Path) -> None:
    r = _run(tmp_path, "matmul_plus_1e3_noise")
    assert r.status == "fail" and r.signature is not None and r.signature.cause == "excess-error"
    extra = dict(r.metrics.extra)
    assert r.metrics.budget_used is not None and r.metrics.budget_used <= 1.0
    assert extra["excess_ratio"] > 3 and extra["freivalds_k"] == 10
    assert "elements in the" in r.message and "flagged rows" in r.message


def test_the_failure_message_counts_elements_not_trials(tmp_path: Path) -> None:
    r = _run(tmp_path, "matmul_five_bad_elements")
    assert r.status == "fail"
    assert r.metrics.mismatches == 5 and r.metrics.elements == 2 * 256  # two flagged rows, recomputed
    assert r.metrics.worst_index[0] in (1, 7)
    assert "flagged 2 of 256 rows" in r.message and "5 of their 512 elements over the bound" in r.message


def test_freivalds_vectors_is_configurable(tmp_path: Path) -> None:
    r = _run(tmp_path, "split_k_matmul", ", freivalds_vectors = 3")
    assert r.status == "pass" and dict(r.metrics.extra)["freivalds_k"] == 3


@pytest.mark.parametrize("value", ["0", "300", '"ten"'])
def test_bad_freivalds_vectors_is_reported_with_line_and_fix(tmp_path: Path, value: str) -> None:
    from kcgate.errors import ContractsError

    f = tmp_path / "c.toml"
    f.write_text(
        CONTRACT.format(root=ROOT, kernel="split_k_matmul", protocol=f", freivalds_vectors = {value}")
    )
    with pytest.raises(ContractsError) as info:
        load_project(f)
    (p,) = info.value.problems
    assert p.line == 12 and p.where.endswith("protocol.freivalds_vectors") and p.fix
