"""A real local runner matrix on the CPU: ATen kernel sets and thread counts that genuinely differ,
run as two runners and pushed through compare and report, the multi-runner path CI exercises."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kcgate.results.model import load_run
from tests.conftest import DATA, ROOT, kcgate

pytestmark = pytest.mark.slow  # two full runner matrices, compare and report end to end

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

VARIANTS = tomllib.loads((ROOT / "runners" / "cpu-variants.toml").read_text())["runner"]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("matrix")
    for v in VARIANTS:
        proc = kcgate(
            "run",
            "--contracts",
            "small.toml",
            "--runner",
            v["name"],
            "--results",
            str(d / f"{v['name']}.json"),
            "-q",
            "--seed",
            "5",
            "--isolation",
            "none",
            cwd=DATA,
            env=v["env"],
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return d


def test_variants_have_distinct_fingerprints(matrix: Path) -> None:
    runs = [load_run(matrix / f"{v['name']}.json") for v in VARIANTS]
    caps = [dict(r.fingerprint.flags)["cpu_capability"] for r in runs]
    assert caps == [v["expect_capability"] for v in VARIANTS]
    assert len({r.fingerprint.key() for r in runs}) == len(runs)


def test_variants_compute_different_bits_somewhere(matrix: Path) -> None:
    a, b = (load_run(matrix / f"{v['name']}.json") for v in VARIANTS)
    errs_a = {c.case_id: c.metrics.max_abs_err for c in a.cases}
    assert any(errs_a[c.case_id] != c.metrics.max_abs_err for c in b.cases), (
        "the variants ran identical kernels"
    )


def test_compare_and_report_over_the_matrix(matrix: Path, tmp_path: Path) -> None:
    proc = kcgate("compare", *[str(p) for p in sorted(matrix.glob("*.json"))], "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert set(json.dumps(json.loads(proc.stdout))) and all(v["name"] in proc.stdout for v in VARIANTS)
    out = tmp_path / "comment.md"
    proc = kcgate(
        "report",
        str(matrix),
        "--baseline",
        str(matrix),
        "--contracts",
        str(DATA / "small.toml"),
        "--comment-out",
        str(out),
        *[a for v in VARIANTS for a in ("--expect-runner", v["name"])],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(v["name"] in out.read_text() for v in VARIANTS)
