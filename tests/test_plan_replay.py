"""kcgate.plan's replay (issue 53): the baseline's cases on its seeds, fresh cases beside them, stable ids."""

from __future__ import annotations

from kcgate import plan as planning
from kcgate.contracts.load import load_project
from kcgate.vocab.case_ids import is_fresh
from tests.conftest import ROOT

TOML = """[[contract]]
id = "mm"
class = "C-PRC-01"
kernel = "kern:matmul"
op = "matmul"
shapes = [[8, 1024, 8], [4, 512, 4]]
protocol = { seeds = 2 }

[[contract]]
id = "sm"
class = "C-PRC-01"
kernel = "kern:softmax"
op = "softmax"
shapes = [[4, 256]]
protocol = { seeds = 1, fresh = 0 }
"""


def _plan(tmp_path, fresh: bool = True):  # type: ignore[no-untyped-def]
    path = tmp_path / "contracts.toml"
    path.write_text(TOML)
    project = load_project(path, locate_kernels=False)
    return planning.make_plan(project, 7, {}, boundary=True, fresh=fresh)


def test_fresh_ids_are_stable_and_planned_per_declared_shape(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ids = [c.case_id for c in _plan(tmp_path)]
    fresh = [cid for cid in ids if is_fresh(cid)]
    assert fresh == [
        "mm/float32/8x1024x8/f0",
        "mm/float32/4x512x4/f0",
    ]  # none at the boundary, none for fresh = 0
    assert [c.case_id for c in _plan(tmp_path, fresh=False)] == [cid for cid in ids if not is_fresh(cid)]
    assert not is_fresh("mm/float32/8x1024x8/s0") and not is_fresh("a/f0x")


def test_replay_takes_the_baselines_seeds_and_keeps_fresh_cases_beside_replayed_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cases = _plan(tmp_path)
    held = {"mm/float32/8x1024x8/s0": 11, "mm/float32/8x1024x8/s1": 12, "mm/float32/8x1024x8/f0": 13}
    out = {c.case_id: c.seed for c in planning.replay(cases, held)}
    assert out["mm/float32/8x1024x8/s0"] == 11 and out["mm/float32/8x1024x8/s1"] == 12
    planned = {c.case_id: c.seed for c in cases}
    assert out["mm/float32/8x1024x8/f0"] == planned["mm/float32/8x1024x8/f0"] != 13  # never replayed
    assert "mm/float32/4x512x4/f0" not in out  # its shape is not in the baseline: its seeds are fresh already
    assert out["mm/float32/4x512x4/s0"] == planned["mm/float32/4x512x4/s0"]
    assert not any(is_fresh(c.case_id) for c in planning.replay(cases, None))


def test_the_repositorys_contracts_plan_a_fresh_case_per_dtype_and_declared_shape() -> None:
    """The cost of fresh seeds on the repository's own contracts, as docs/diff.md states it."""
    project = load_project(ROOT / "contracts.toml", locate_kernels=False)
    cases = planning.make_plan(project, 0, {}, boundary=True, fresh=True)
    fresh = sum(is_fresh(c.case_id) for c in cases)
    expected = sum(len(c.dtypes) * len(c.shapes) * c.protocol.fresh for c in project.contracts)
    assert fresh == expected > 0 and fresh < len(cases) - fresh
