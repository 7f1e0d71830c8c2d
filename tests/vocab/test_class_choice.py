"""The class a user picks never fails a correct kernel (issue 32, Build item 3): C-PRC-04 judges rounding only
where the output is rounded from a wider computation; every family has a plain correctness class; a refused
class's fix names the classes that do apply, and ``kcgate validate --op`` says why."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from kcgate.contracts.load import load_project
from kcgate.contracts.records import Contract
from kcgate.engine.case import op_for
from kcgate.engine.checks import CHECKS
from kcgate.engine.trial import CaseContext
from kcgate.errors import ContractsError
from kcgate.plan import Case
from kcgate.vocab.catalogue import CATALOGUE
from kcgate.vocab.classes import CLASSES, PLAIN, applicable
from tests.conftest import kcgate


def _textbook_gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _prc04(kernel, dtype: str, seed: int, out_dtype: str = ""):  # type: ignore[no-untyped-def]
    c = Contract(id="t", klass="C-PRC-04", kernel="x:y", op="gelu", dtypes=(dtype,), out_dtype=out_dtype)
    case = Case("t", "t", "C-PRC-04", "gelu", dtype, (256, 1024), seed, 1000 + seed)
    return CHECKS["C-PRC-04"](CaseContext(contract=c, case=case, kernel=kernel, op=op_for(c, ())))


@pytest.mark.parametrize("seed", range(4))
def test_fp32_gelu_under_c_prc_04_is_not_biased_rounding(seed: int) -> None:
    """0.5·x·(1 + erf(x/√2)) in fp32 is a few ulps from exact with a non-zero mean (+0.2 ulp): it failed as
    biased-rounding at budget 27-52. An fp32 output of an fp32 computation is judged by the bound alone."""
    f = _prc04(_textbook_gelu, "float32", seed)
    assert f.status.value == "pass", f.message
    assert dict(f.metrics.extra)["rounding_judged"] == 0.0


def test_a_truncated_bf16_output_still_fails_as_biased_rounding() -> None:
    def truncating(x: torch.Tensor) -> torch.Tensor:
        y = _textbook_gelu(x.double()).float()  # round toward zero to bf16: clear the low 16 bits
        return (y.view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)

    f = _prc04(truncating, "float32", 0, out_dtype="bfloat16")
    assert f.status.value == "fail" and f.signature is not None and f.signature.cause == "biased-rounding"
    good = _prc04(lambda x: _textbook_gelu(x).to(torch.bfloat16), "float32", 0, out_dtype="bfloat16")
    assert good.status.value == "pass", good.message


def test_every_family_has_the_plain_correctness_class() -> None:
    assert all(PLAIN in applicable(op) for op in CATALOGUE)
    assert CLASSES[PLAIN].trait == ""


@pytest.mark.parametrize("op", ["silu", "gelu", "rope", "pointwise"])
def test_a_refused_class_names_the_classes_that_apply(tmp_path: Path, op: str) -> None:
    f = tmp_path / "c.toml"
    f.write_text(f'[[contract]]\nid = "x"\nclass = "C-PRC-01"\nkernel = "torch:sigmoid"\nop = "{op}"\n')
    with pytest.raises(ContractsError) as e:
        load_project(f)
    (p,) = [p for p in e.value.problems if "does not apply" in p.message]
    assert p.line == 5 and p.where.endswith(".op")  # the op line
    assert "sum over an axis" in p.fix and f"kcgate validate --op {op}" in p.fix
    assert all(cid in p.fix for cid in applicable(op)) and "matmul" not in p.fix


def test_validate_says_which_classes_apply_to_an_op_without_torch(no_torch_env: dict[str, str]) -> None:
    proc = kcgate("validate", "--op", "gelu", env=no_torch_env)
    assert proc.returncode == 0, proc.stderr
    lines = dict(ln.split("  ", 1) for ln in proc.stdout.splitlines())
    assert set(lines) == set(CLASSES)
    assert "does not apply" in lines["C-PRC-01"] and "sum over an axis" in lines["C-PRC-01"]
    assert "applies" in lines["C-PRC-04"] and "plain correctness" in lines["C-CMP-01"]
    bad = kcgate("validate", "--op", "gleu", env=no_torch_env)
    assert bad.returncode != 0 and "did you mean 'gelu'" in bad.stderr
