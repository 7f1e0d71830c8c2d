"""The op catalogue (kcgate.vocab.catalogue) is the one torch-free record of each family's facts."""

from __future__ import annotations

import pytest

from kcgate.vocab.catalogue import CATALOGUE, MATMUL_LIKE, default_shapes
from tests.conftest import ROOT, kcgate

torch = pytest.importorskip("torch")

from kcgate.contracts.records import Contract  # noqa: E402
from kcgate.engine.harness import _wants_freivalds  # noqa: E402
from kcgate.engine.trial import CaseContext  # noqa: E402
from kcgate.numerics.ops import OPS  # noqa: E402
from kcgate.plan import Case  # noqa: E402


def test_the_catalogue_and_the_torch_families_name_the_same_facts() -> None:
    assert set(CATALOGUE) == {*OPS, "custom"}
    for name, family in OPS.items():
        op = CATALOGUE[name]
        assert family.default_shapes == op.default_shapes, name
        assert family.tolerance == op.tolerance, name
        assert (family.grad_bound is not None) == op.backward, name
        for shape in op.default_shapes:
            assert op.dims is None or len(shape) == len(op.dims), name
    assert default_shapes() == {name: family.default_shapes for name, family in OPS.items()}


def test_matmul_sizes_of_each_matmul_like_family() -> None:
    assert MATMUL_LIKE == ("matmul", "bmm", "linear")
    assert CATALOGUE["matmul"].matmul_mkn((64, 1024, 32)) == (64, 1024, 32)
    assert CATALOGUE["linear"].matmul_mkn((64, 512, 96)) == (64, 512, 96)
    assert CATALOGUE["bmm"].matmul_mkn((4, 32, 512, 16)) == (128, 512, 16)


def _wants(op: str, shape: tuple[int, ...]) -> bool:
    contract = Contract(id="t", klass="C-PRC-01", kernel="x:y", op=op, oracle="auto")
    case = Case("t", "t", "C-PRC-01", op, "float32", shape, 0, 7)
    return _wants_freivalds(CaseContext(contract=contract, case=case, kernel=None, op=OPS[op]), shape)


def test_auto_oracle_sizes_bmm_as_batch_times_m_k_n() -> None:
    # 4 x 256 x 1024 x 256 = 2^28 multiply-adds: under the 2^30 threshold. The old sizing counted M twice
    # (4*256*256 rows) and chose Freivalds here.
    assert not _wants("bmm", (4, 256, 1024, 256))
    assert _wants("bmm", (16, 256, 1024, 256))  # 2^30
    assert not _wants("matmul", (1024, 1024, 512)) and _wants("matmul", (1024, 1024, 1024))


@pytest.mark.slow
def test_run_list_plans_without_torch(no_torch_env: dict[str, str]) -> None:
    proc = kcgate("run", "-c", str(ROOT / "contracts.toml"), "--list", env=no_torch_env)
    assert proc.returncode == 0, proc.stderr
    assert "matmul" in proc.stdout


def test_a_family_trait_is_read_from_the_catalogue_only() -> None:
    # the classes, the C-PRC-02 probes, signatures and the backward fit read traits through families/has
    from kcgate.engine.checks import stability
    from kcgate.vocab.catalogue import CATALOGUE, families, has
    from kcgate.vocab.classes import CLASSES

    assert CLASSES["C-PRC-02"].ops == families("offset_probes") + ("custom",)
    assert CLASSES["C-EXC-02"].ops == families("indexed") + ("custom",)
    assert "rope" not in CLASSES["C-ORD-03"].ops and "gelu" in CLASSES["C-ORD-03"].ops
    assert stability.EXP_FAMILIES == families("exp") and stability.NORM_FAMILIES == ("layernorm", "rmsnorm")
    assert has("bmm", "plain_product") and not has("linear", "plain_product") and not has("nope", "exp")
    assert {n for n, op in CATALOGUE.items() if op.grad_reduction} == {
        "matmul",
        "bmm",
        "linear",
        "layernorm",
        "rmsnorm",
    }
