"""The frozen records stay plain data: a parsed project survives ``json.dumps``/``json.loads`` field for
field, type for type (``kcgate.util.frozen_json.encode``, and the test-only decoder in tests/testing/)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from kcgate.contracts.load import load_project
from kcgate.contracts.policy import DriftRule, Policy, Waiver
from kcgate.contracts.records import Contract, Project, Protocol, Tolerance
from kcgate.errors import Problem
from tests.conftest import DATA, ROOT
from tests.testing import frozen_json

CONTRACT_FILES = sorted(
    [
        ROOT / "contracts.toml",
        ROOT / "kcgate" / "kernels" / "calibration" / "contracts.toml",
        *ROOT.glob("examples/*/*/contracts.toml"),
        *DATA.glob("*.toml"),
        *DATA.glob("realistic/*.toml"),
    ]
)


def _through_json(project: Project) -> Project:
    return frozen_json.decode(Project, json.loads(json.dumps(frozen_json.encode(project))))


def assert_same(a: Any, b: Any, where: str = "project") -> None:
    """Equal and of the same types all the way down (``==`` alone takes 60 for 60.0 and True for 1)."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} became {type(b).__name__}"
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), f"{where}: {len(a)} items became {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b, f"{where}: {a!r} became {b!r}"


@pytest.mark.parametrize("path", CONTRACT_FILES, ids=[str(p.relative_to(ROOT)) for p in CONTRACT_FILES])
def test_every_contracts_file_survives_the_round_trip(path: Path) -> None:
    project = load_project(path)
    assert_same(project, _through_json(project))
    assert _through_json(project) == project


def test_the_files_cover_nested_values() -> None:
    """The corpus above holds the values that need care: a list of tables in params, call args, paths."""
    contracts = [c for p in CONTRACT_FILES for c in load_project(p).contracts]
    assert any(isinstance(v, tuple) and v and isinstance(v[0], dict) for c in contracts for _, v in c.params)
    assert any(c.call_args for c in contracts) and any(c.call_kwargs for c in contracts)
    assert len(CONTRACT_FILES) >= 10


def _everything_set() -> Project:
    """A project whose every field (nested records too) differs from its default."""
    tolerance = Tolerance("abs-rel", 2.5, 3.0, 1e-5, 1e-6, 3.0, "m:base", 0.0, "sequential")
    protocol = Protocol(
        3, 4, False, 8, 60, (16, 64), 7, 5, False, False, 2
    )  # timeout_s given as the int 60, as TOML may
    contract = Contract(
        id="c",
        klass="C-ORD-02",
        kernel="m:k",
        op="matmul",
        description="d",
        devices=("cpu",),
        dtypes=("float16", "bfloat16"),
        accumulate="float64",
        out_dtype="float32",
        shapes=((2, 3, 4), (5, 6, 7)),
        distribution="uniform",
        layout="transposed",
        postcondition="exact",
        tolerance=tolerance,
        oracle="freivalds",
        reference="m:ref",
        inputs="m:inputs",
        protocol=protocol,
        signature=("ordering",),
        params=(("configs", ({"block_n": 32, "sizes": [1, 2]}, {"block_n": 64})), ("nan", "propagate")),
        call="out",
        good="m:good",
        bad="m:bad",
        baseline="m:baseline",
        direction="both",
        shape_constraints=((0, "multiple_of_16"),),
        shape_class=((1, "pow2"),),
        max_elements=4096,
        call_args=("x", ("{n}", 2), 1.5, True, None),
        call_kwargs=(("alpha", 0.5), ("dims", (0, 1))),
        init=(("width", 8),),
        env=(("TRITON_INTERPRET", "1"),),
        mutates=("a",),
        no_grad=("b",),
        outputs=("out", "residual"),
        stability=(("x", (("offset", 1e4), ("scale", 8.0))), ("h", ())),
        line=12,
        source="pkg/kernels.py",
    )
    waiver = Waiver("c", "apple-*", dt.date(2031, 1, 2), "known", "me", 40, "error")
    policy = Policy(("violation",), DriftRule(None, 0.5, 0.25, 0.05), ("cpu-*",), ("gone",), (waiver,))
    return Project(
        path=Path("/x/contracts.toml"),
        name="p",
        contracts=(contract, dataclasses.replace(contract, id="d", call_args=None, line=None)),
        policy=policy,
        paths=(Path("/x"), Path("rel/dir")),
        baselines_dir=Path("/x/baselines"),
        results_dir=Path("/x/out"),
        warnings=(Problem("/x/contracts.toml", 3, "contract 'c'", "m", "f"),),
    )


def _defaults_left(obj: Any, where: str = "project") -> list[str]:
    """The fields of ``obj`` (nested records too) still at their default."""
    left = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if value == default and type(value) is type(default):
            left.append(f"{where}.{f.name}")
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item):
                left += _defaults_left(item, f"{where}.{f.name}")
    return left


def test_every_field_survives_the_round_trip() -> None:
    project = _everything_set()
    assert not _defaults_left(project.contracts[0], "contract") and not _defaults_left(project.policy)
    assert_same(project, _through_json(project))
    assert_same(
        project, frozen_json.decode(Project, frozen_json.encode(project))
    )  # without json too (tuples are read as lists)


def test_a_default_is_left_out_of_the_json_and_comes_back() -> None:
    contract = load_project(DATA / "small.toml").contracts[0]
    data = frozen_json.encode(contract)
    assert "layout" not in data and data["id"] == contract.id  # most fields are their default
    assert_same(contract, frozen_json.decode(Contract, json.loads(json.dumps(data))))


def test_a_value_equal_to_its_default_but_of_another_type_is_kept() -> None:
    """TOML's ``timeout_s = 120`` is the int 120, equal to the default 120.0: it comes back an int."""
    contract = load_project(DATA / "small.toml").contracts[0]
    contract = dataclasses.replace(contract, protocol=Protocol(timeout_s=120), tolerance=Tolerance(atol=0))
    assert_same(contract, frozen_json.decode(Contract, json.loads(json.dumps(frozen_json.encode(contract)))))


def test_data_that_does_not_fit_is_a_value_error_naming_the_record() -> None:
    good = frozen_json.encode(load_project(DATA / "small.toml"))
    for broken in (
        {**good, "contracts": [{"id": "x"}]},  # required fields missing
        {**good, "name": 3},
        {**good, "contracts": {"id": "x"}},
        {**good, "surprise": 1},
    ):
        with pytest.raises(ValueError, match="Project|Contract"):
            frozen_json.decode(Project, broken)


def test_freeze_is_the_loaders() -> None:
    assert frozen_json.freeze([1, [2, {"a": [3]}]]) == (1, (2, {"a": [3]}))
