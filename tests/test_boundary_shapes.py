"""Boundary shapes (kcgate.plan.boundary_shapes, issue 33): beside its declared shapes every contract runs a
derived one (the last dimension and the reduction length at a prime near n, off powers of two and tiles, the
other dimensions small), respecting the family's and the contract's shape constraints and the
relations of the declared shape; ``protocol.boundary = false`` and C-CMP-03 have none. A softmax whose masked
tail is wrong fails under the class a user picks with one power-of-two shape."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kcgate.contracts import shape_class
from kcgate.contracts.records import Contract, Protocol
from kcgate.plan import _cases, boundary_shapes
from kcgate.vocab.catalogue import dims_of, family_constraints

ROOT = Path(__file__).resolve().parents[1]


def _contract(op: str, shape: tuple[int, ...], **kw: object) -> Contract:
    return Contract(id="c", klass="C-PRC-01", kernel="x:y", op=op, shapes=(shape,), **kw)  # type: ignore[arg-type]


def test_softmax_gets_a_prime_row_length_and_few_rows() -> None:
    c = _contract("softmax", (64, 1024))
    assert boundary_shapes(c, c.shapes) == [(3, 1021)]


def test_matmul_probes_k_and_n_and_keeps_m_small() -> None:
    c = _contract("matmul", (128, 4096, 256))
    assert boundary_shapes(c, c.shapes) == [(3, 4093, 251)]
    assert boundary_shapes(_contract("gelu", (1000,)), ((1000,),)) == [(997,)]


@pytest.mark.parametrize(
    ("op", "shape"),
    [
        ("rope", (2, 8, 2, 128, 64)),
        ("attention", (2, 8, 2, 128, 64)),
        ("scaled_mm", (64, 512, 64)),
        ("quant_gemm", (32, 1024, 64)),
    ],
)
def test_boundary_shapes_respect_the_family_constraints(op: str, shape: tuple[int, ...]) -> None:
    c = _contract(op, shape)
    cons = shape_class.parse({str(i): t for i, t in family_constraints(op).items()}, dims_of(op), None)
    got = boundary_shapes(c, c.shapes)
    assert got and shape not in got
    assert all(not shape_class.violations(s, cons) for s in got), got


def test_gqa_ratio_of_the_declared_shape_is_kept() -> None:
    c = _contract("attention", (2, 8, 2, 128, 64))
    assert all(s[1] == 4 * s[2] for s in boundary_shapes(c, c.shapes))


def test_contract_constraints_are_respected() -> None:
    c = _contract("softmax", (64, 1024), shape_constraints=((1, "multiple_of(16)"),))
    got = boundary_shapes(c, c.shapes)
    assert got == [(3, 1040)]  # off the tiles larger than the grid


def test_off_switch_and_cmp03() -> None:
    c = _contract("softmax", (64, 1024), protocol=Protocol(boundary=False))
    assert boundary_shapes(c, c.shapes) == []
    assert boundary_shapes(replace(_contract("softmax", (64, 1024)), klass="C-CMP-03"), ((64, 1024),)) == []


def test_boundary_cases_run_one_seed_and_have_stable_ids() -> None:
    c = _contract("softmax", (64, 1024), protocol=Protocol(seeds=3))
    ids = [k.case_id for k in _cases(c, 7, {})]
    assert ids[:3] == ["c/float32/64x1024/s0", "c/float32/64x1024/s1", "c/float32/64x1024/s2"]
    assert ids[3:] == ["c/float32/3x1021/s0"]
    assert [k.case_id for k in _cases(c, 8, {})] == ids


CONTRACTS = """
[project]
name = "tailmask"

[[contract]]
id = "softmax-other-zero"
class = "C-PRC-01"
kernel = "tests.testing.faults.semantic:softmax_other_zero"
op = "softmax"
shapes = [[64, 1024]]

[[contract]]
id = "softmax-padded-sum"
class = "C-PRC-01"
kernel = "tests.testing.faults.semantic:softmax_padded_sum"
op = "softmax"
shapes = [[64, 1024]]

[[contract]]
id = "softmax-no-boundary"
class = "C-PRC-01"
kernel = "tests.testing.faults.semantic:softmax_other_zero"
op = "softmax"
shapes = [[64, 1024]]
protocol = { boundary = false }
"""


@pytest.mark.slow
def test_tail_mask_bugs_fail_with_one_power_of_two_shape(tmp_path: Path) -> None:
    from kcgate.results.model import load_run

    (tmp_path / "contracts.toml").write_text(CONTRACTS, encoding="utf-8")
    out = tmp_path / "results.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "kcgate", "run", "--contracts", str(tmp_path / "contracts.toml")]
    proc = subprocess.run([*cmd, "--results", str(out)], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    cases = {c.case_id: c for c in load_run(out).cases}
    for cid in ("softmax-other-zero", "softmax-padded-sum"):
        assert cases[f"{cid}/float32/64x1024/s0"].status == "pass"  # no tail at a power of two
        tail = cases[f"{cid}/float32/3x1021/s0"]
        assert tail.status == "fail"
        assert tail.signature is not None and tail.signature.cause == "masked-tail"
    assert all(c.status == "pass" for k, c in cases.items() if k.startswith("softmax-no-boundary/"))
