"""Each of the twelve classes: the bad kernel passes its basic functional test, yet the class's
built-in contract rejects it (with margin ≥ 10), accepts the good kernel and rejects the baseline."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from kcgate.calibrate import BUILTIN, calibrate  # noqa: E402
from kcgate.checks import CHECKS  # noqa: E402
from kcgate.classes import CLASSES  # noqa: E402
from kcgate.devices import get_backend  # noqa: E402
from kcgate.kernels.calibration import module_name  # noqa: E402
from kcgate.spec import load_project  # noqa: E402

MIN_MARGIN = 10.0


@pytest.fixture(scope="module")
def matrix():
    rows = calibrate(load_project(BUILTIN), get_backend("cpu"))
    return {r.klass: r for r in rows}


def test_every_class_has_kernels_a_check_and_a_contract(matrix):
    assert set(matrix) == set(CLASSES)
    for cid in CLASSES:
        mod = importlib.import_module(module_name(cid))
        assert all(callable(getattr(mod, s)) for s in ("good", "bad", "baseline", "basic_test"))
        assert mod.BASIC_TEST
        assert CHECKS[cid].__name__.startswith(cid.lower().replace("-", "_")), "class check registered"


@pytest.mark.parametrize("cid", sorted(CLASSES))
def test_bad_passes_the_basic_test_but_not_the_contract(cid, matrix):
    mod = importlib.import_module(module_name(cid))
    assert mod.basic_test(mod.good), f"{cid}: good fails its own basic test"
    assert mod.basic_test(mod.bad), f"{cid}: bad should pass '{mod.BASIC_TEST}'"
    row = matrix[cid]
    assert row.state("good").accepted, row.state("good").message
    assert not row.state("bad").accepted
    assert not row.state("baseline").accepted, "baseline must fail visibly"
    assert row.margin is not None and row.margin >= MIN_MARGIN, f"{cid}: detection margin {row.margin}"


def test_baselines_fail_visibly_even_to_the_basic_test():
    for cid in CLASSES:
        mod = importlib.import_module(module_name(cid))
        try:
            assert not mod.basic_test(mod.baseline), cid
        except (RuntimeError, IndexError):
            pass  # raising is failing visibly


def test_bad_failures_carry_the_class_signature(matrix):
    expected = {
        "C-PRC-01": "low-precision-accumulator",
        "C-PRC-02": "cancellation",
        "C-PRC-03": "operand-truncation",
        "C-PRC-04": "biased-rounding",
        "C-ORD-02": "nondeterminism",
        "C-ORD-03": "batch-dependence",
        "C-CMP-01": "approximation",
        "C-CMP-02": "tail-pattern",
        "C-CMP-03": "stale-output",
        "C-EXC-01": "nan-pattern",
        "C-EXC-02": "out-of-bounds",
    }
    for cid, cause in expected.items():
        assert matrix[cid].state("bad").cause == cause, (cid, matrix[cid].state("bad").summary)
