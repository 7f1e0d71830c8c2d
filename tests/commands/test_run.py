"""`kcgate run` end to end on the repo's own contracts: table, exit 0, JUnit, results schema."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from kcgate.render.schema import results_schema
from kcgate.results.model import load_run
from tests.conftest import ROOT, imported, kcgate


@pytest.fixture(scope="module")
def repo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path, Path]:
    d = tmp_path_factory.mktemp("run")
    out, junit = d / "cpu.json", d / "junit.xml"
    proc = kcgate("run", "--results", str(out), "--junit", str(junit), "--runner", "cpu-test")
    return proc, out, junit


@pytest.mark.slow  # the repo's whole contracts.toml
def test_repo_contracts_pass_on_cpu(repo_run) -> None:  # type: ignore[no-untyped-def]
    proc, out, _ = repo_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all contracts hold" in proc.stdout and "matmul-fp32/float32/64x4096x64/s0" in proc.stdout


@pytest.mark.slow  # the repo's whole contracts.toml
def test_results_validate_against_their_schema(repo_run) -> None:  # type: ignore[no-untyped-def]
    _, out, _ = repo_run
    data = json.loads(out.read_text())
    jsonschema.validate(data, results_schema())
    run = load_run(out)
    assert run.complete and run.runner == "cpu-test" and run.fingerprint.backend == "cpu"
    assert all(c.metrics.budget_used is not None and c.seed for c in run.cases)


@pytest.mark.slow  # the repo's whole contracts.toml
def test_junit_is_parseable_with_properties(repo_run) -> None:  # type: ignore[no-untyped-def]
    _, out, junit = repo_run
    root = ET.parse(junit).getroot()
    cases = list(root.iter("testcase"))
    assert len(cases) == len(load_run(out).cases)
    props = {p.get("name") for p in cases[0].iter("property")}
    assert {"budget_used", "max_ulp", "seed"} <= props
    suite_props = {p.get("name") for p in root.find("testsuite").find("properties")}  # type: ignore[union-attr]
    assert "fingerprint.key" in suite_props and "fingerprint.torch" in suite_props


@pytest.mark.slow
def test_list_filters_and_nothing_selected() -> None:
    proc = kcgate("run", "--list", "-k", "C-PRC-02", "--dtype", "float32")
    assert proc.returncode == 0 and "softmax-fp32/float32" in proc.stdout and "bfloat16" not in proc.stdout
    proc = kcgate("run", "-k", "no-such-contract")
    assert proc.returncode == 5 and "nothing selected" in proc.stderr


@pytest.mark.slow
def test_bad_flags_exit_3() -> None:
    assert kcgate("run", "--shard", "4/3").returncode == 3
    assert kcgate("run", "--bogus").returncode == 3
    assert kcgate("run", "--contracts", str(ROOT / "missing.toml")).returncode == 2


@pytest.mark.slow
def test_a_run_never_imports_sympy(tmp_path: Path) -> None:
    """torch.unravel_index and torch.broadcast_shapes import sympy on first use (0.3 + 0.4 s per worker);
    kcgate uses its own, so a run with a Freivalds case and ordinary cases stays clear of it."""
    proc = kcgate(
        "run", "-q", "--isolation", "none", "--seed", "2", "-k", "matmul-large-freivalds",
        "--results", str(tmp_path / "r.json"), python_flags=("-X", "importtime"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert imported(proc, "sympy") == []


@pytest.mark.parametrize("workers", ["auto", "1"])
def test_run_tells_the_pool_the_plans_size_before_the_worker_starts(
    monkeypatch: pytest.MonkeyPatch, workers: str
) -> None:
    """With several workers, the plan as the catalogue's default shapes make it (the repository's cases, the
    boundary shapes included) is counted before the first worker starts, so the pool can start the workers it
    will use at once; with one, nothing is counted."""
    from kcgate import plan as planning
    from kcgate.commands import _run_impl
    from kcgate.contracts.load import load_project
    from kcgate.vocab.catalogue import default_shapes

    plan = planning.make_plan(load_project(ROOT / "contracts.toml"), 0, default_shapes(), boundary=True)
    expected = len(plan) if workers == "auto" else 0
    assert len(plan) > 80

    seen: list[int] = []

    def stop(*args: object) -> None:
        seen.append(int(args[-1]))  # type: ignore[call-overload]
        raise _Stop

    monkeypatch.setattr(_run_impl, "worker_count", lambda *a: 2 if workers == "auto" else 1)
    monkeypatch.setattr(_run_impl, "make_executor", stop)
    options = _run_impl.Options(
        contracts=ROOT / "contracts.toml", results=None, runner=None, device=None, junit=None, keyword=None,
        dtypes=[], list_only=False, shard=None, resume=False, seed=0, isolation="process", timeout=None,
        memory_limit_gb=0.0, level=-1, workers=workers,
    )  # fmt: skip
    with pytest.raises(_Stop):
        _run_impl.run_command(options)
    assert seen == [expected]


class _Stop(Exception):
    pass


_HEADER = '[project]\npaths = ["{root}"]\n'
_SUM = """
[[contract]]
id = "{id}"
class = "C-ORD-02"
kernel = "kcgate.kernels.builtin:row_sum"
op = "sum"
{extra}
protocol = {{ seeds = 1, trials = 1, boundary = false }}
"""
_EVERYWHERE = _SUM.format(id="sum-everywhere", extra="")
_CUDA_ONLY = _SUM.format(id="sum-cuda-only", extra='devices = ["cuda"]')


def test_a_contract_whose_devices_leave_this_device_out_is_not_run(tmp_path: Path) -> None:
    toml, out = tmp_path / "contracts.toml", tmp_path / "cpu.json"
    toml.write_text(_HEADER.format(root=ROOT) + _EVERYWHERE + _CUDA_ONLY)
    proc = kcgate("run", "-c", str(toml), "--device", "cpu", "--results", str(out), "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {c.contract_id for c in load_run(out).cases} == {"sum-everywhere"}
    assert "not run on cpu: sum-cuda-only" in proc.stderr
    toml.write_text(_HEADER.format(root=ROOT) + _CUDA_ONLY)
    proc = kcgate("run", "-c", str(toml), "--device", "cpu", "--results", str(tmp_path / "none.json"), "-q")
    assert proc.returncode == 5 and "no contract applies to cpu" in proc.stderr, proc.stderr
