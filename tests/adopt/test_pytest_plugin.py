"""The pytest plugin (kcgate.adopt.plugin), run as real pytest subprocesses with real isolated workers.

The plugin is loaded with ``-p kcgate.adopt.plugin`` (the shared development venv does not carry the
entry point; test_plugin_entry_point checks the installed entry point separately).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import DATA, ROOT, kcgate

PLUGIN = ("-p", "kcgate.adopt.plugin", "-p", "no:cacheprovider", "-p", "no:randomly")
SEED = "12345"


def pytest_run(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` in ``cwd`` (no ini file there, so this repo's addopts do not apply)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def repo_contracts(tmp: Path, broken: str | None = None) -> Path:
    """The repository's contracts.toml in ``tmp`` (paths made absolute), optionally with contract
    ``matmul-fp32``'s kernel replaced by one that keeps its running sum in bf16."""
    text = (ROOT / "contracts.toml").read_text().replace('paths = ["."]', f"paths = [{str(ROOT)!r}]")
    if broken:
        text = text.replace('kernel = "kcgate.kernels.builtin:matmul"\n', f'kernel = "{broken}"\n', 1)
    path = tmp / "contracts.toml"
    path.write_text(text)
    return path


def results(path: Path) -> dict[str, tuple[str, str | None]]:
    doc = json.loads(path.read_text())
    at = {k: doc["case_fields"].index(k) for k in ("case_id", "status", "signature")}
    return {
        r[at["case_id"]]: (r[at["status"]], (r[at["signature"]] or {}).get("cause")) for r in doc["cases"]
    }


@pytest.mark.slow
def test_without_the_flag_the_plugin_is_inert(tmp_path: Path) -> None:
    """No torch, no kcgate machinery, no extra items, even with a contracts.toml beside the tests."""
    (tmp_path / "contracts.toml").write_text((DATA / "small.toml").read_text())
    (tmp_path / "test_plain.py").write_text(
        "import sys\n\n"
        "def test_plain():\n"
        "    loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith('kcgate'))\n"
        "    assert loaded == ['kcgate', 'kcgate.adopt', 'kcgate.adopt.plugin'], loaded\n"
    )
    proc = pytest_run(*PLUGIN, "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    help_text = pytest_run(*PLUGIN, "--help", cwd=tmp_path).stdout
    assert "--kcgate=[CONTRACTS]" in help_text and "--kcgate-results=PATH" in help_text


@pytest.mark.slow
def test_collects_as_many_items_as_run_list_has_cases(tmp_path: Path) -> None:
    listed = kcgate("run", "--list", "-c", str(ROOT / "contracts.toml"))
    n_cases = int(re.search(r"^(\d+) cases$", listed.stdout, re.M).group(1))  # type: ignore[union-attr]
    repo_contracts(tmp_path)
    proc = pytest_run(*PLUGIN, "--kcgate", str(tmp_path), "--collect-only", "-q", cwd=tmp_path.parent)
    items = [ln for ln in proc.stdout.splitlines() if "contracts.toml::" in ln]
    assert len(items) == n_cases > 30, proc.stdout + proc.stderr
    assert "contracts.toml::matmul-fp32[float32-64x4096x64-s0]" in items[0]


@pytest.mark.slow
def test_repo_contracts_pass_under_xdist(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    contracts = repo_contracts(tmp_path)
    out = tmp_path / "pytest.json"
    proc = pytest_run(
        *PLUGIN, "--kcgate", str(contracts), "--kcgate-results", str(out), "-n", "2", "-q", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["complete"] and len(doc["cases"]) == len(results(out)) > 30
    assert {status for status, _ in results(out).values()} == {"pass"}
    assert re.search(r"\d+ passed", proc.stdout) and "failed" not in proc.stdout


@pytest.mark.slow
def test_a_broken_kernel_fails_exactly_its_contract_with_kcgates_message(tmp_path: Path) -> None:
    """The results file equals `kcgate run`'s case for case; JUnit carries the metrics."""
    contracts = repo_contracts(tmp_path, broken="tests.testing.kernels.accumulate:bf16_blocks")
    out, junit = tmp_path / "pytest.json", tmp_path / "junit.xml"
    proc = pytest_run(
        *PLUGIN,
        "--kcgate",
        str(contracts),
        "--kcgate-seed",
        SEED,
        "--kcgate-results",
        str(out),
        f"--junitxml={junit}",
        "-rf",
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)
    assert sorted(failed) == sorted(
        [
            *(
                f"contracts.toml::matmul-fp32[float32-{s}-s{i}]"
                for s in ("64x4096x64", "33x257x65")
                for i in (0, 1)
            ),
            "contracts.toml::matmul-fp32[float32-3x4093x61-s0]",  # its boundary shape (kcgate.plan)
        ]
    )
    assert "kcgate: contract matmul-fp32 violated: matmul-fp32/float32/64x4096x64/s0" in proc.stdout
    assert (
        "budget used" in proc.stdout and "max ULP" in proc.stdout and "worst element at index" in proc.stdout
    )
    assert "signature: " in proc.stdout and "Traceback" not in proc.stdout
    assert f"--seed {SEED}" in proc.stdout  # the reproduce line
    assert f"run seed {SEED} (what `kcgate run --seed` takes" in proc.stdout  # each seed says which it is
    xml = junit.read_text()
    assert '<property name="kcgate.budget_used"' in xml and '<property name="kcgate.signature"' in xml

    run_out = tmp_path / "run.json"
    ran = kcgate("run", "-c", str(contracts), "--seed", SEED, "--results", str(run_out), "-q", cwd=tmp_path)
    assert ran.returncode == 1, ran.stderr
    assert results(out) == results(run_out)
    assert list(results(out)) == list(results(run_out))  # the same order, too


@pytest.mark.slow
def test_a_segfaulting_kernel_fails_one_item(tmp_path: Path) -> None:
    contracts = tmp_path / "crashy.toml"
    contracts.write_text((DATA / "crashy.toml").read_text().replace('["../.."]', f"[{str(ROOT)!r}]"))
    proc = pytest_run(*PLUGIN, "--kcgate", str(contracts), "-k", "segfault", "-rf", "-q", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.findall(r"^FAILED (\S+)", proc.stdout, re.M) == ["crashy.toml::segfault[float32-16x64x16-s0]"]
    assert "SIGSEGV" in proc.stdout
    assert "1 failed, 1 passed" in proc.stdout  # good-after-segfault ran in a fresh worker


@pytest.mark.slow
def test_an_invalid_contracts_file_is_a_collection_error_with_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "contracts.toml"
    bad.write_text('[[contract]]\nid = "x"\nclass = "C-PRC-01"\nop = "matmull"\nkernel = "m:f"\n')
    proc = pytest_run(*PLUGIN, "--kcgate", "-q", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert "contracts.toml:4: contract 'x'.op: unknown op 'matmull'" in proc.stdout
    assert "Traceback" not in proc.stdout


@pytest.mark.slow
def test_the_installed_entry_point_loads_the_plugin(tmp_path: Path) -> None:
    """pip installs kcgate (a wheel built from this tree) into a target directory; pytest then finds the
    plugin through the pytest11 entry point alone (no -p), and it stays inert without --kcgate."""
    src, target, work = tmp_path / "src", tmp_path / "site", tmp_path / "work"
    src.mkdir()
    work.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (src / name).write_text((ROOT / name).read_text())
    shutil.copytree(ROOT / "kcgate", src / "kcgate", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    installed = subprocess.run([*pip, "--target", str(target), str(src)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr[-2000:]
    entry = next(target.glob("kcgate-*.dist-info")) / "entry_points.txt"
    assert "[pytest11]\nkcgate.adopt.plugin = kcgate.adopt.plugin" in entry.read_text()

    (work / "contracts.toml").write_text((DATA / "small.toml").read_text().replace('["../.."]', '["."]'))
    (work / "test_plain.py").write_text(
        "import sys\n\ndef test_plain():\n    assert 'kcgate.adopt.plugin' in sys.modules and 'torch' not in sys.modules\n"
    )
    env = {"PYTHONPATH": str(target)}  # the installed copy, not this tree
    plain = pytest_run("-p", "no:cacheprovider", "-q", cwd=work, env=env)
    assert plain.returncode == 0 and "1 passed" in plain.stdout, plain.stdout + plain.stderr
    collected = pytest_run("-p", "no:cacheprovider", "--kcgate", "--collect-only", "-q", cwd=work, env=env)
    assert "contracts.toml::matmul[float32-" in collected.stdout, collected.stdout + collected.stderr
    assert "test_plain.py" not in collected.stdout  # the contracts file replaces the default test paths


@pytest.mark.slow
def test_last_failed_and_markers_select_cases(tmp_path: Path) -> None:
    contracts = tmp_path / "crashy.toml"
    contracts.write_text((DATA / "crashy.toml").read_text().replace('["../.."]', f"[{str(ROOT)!r}]"))
    cache = ("-p", "kcgate.adopt.plugin", "-p", "no:randomly", "--kcgate", str(contracts))
    first = pytest_run(*cache, "-m", "kcgate", "-k", "raises or good", "-q", cwd=tmp_path)
    assert re.search(r"\b1 failed, \d+ passed", first.stdout), first.stdout + first.stderr
    assert pytest_run(*cache, "-m", "not kcgate", "-q", cwd=tmp_path).returncode == 5  # nothing else
    again = pytest_run(*cache, "--lf", "-q", "-rf", cwd=tmp_path)
    assert re.findall(r"^FAILED (\S+)", again.stdout, re.M) == ["crashy.toml::raises[float32-16x64x16-s0]"]
    assert "1 failed" in again.stdout and "passed" not in again.stdout, again.stdout


@pytest.mark.slow
def test_decorated_kernels_are_items_too(tmp_path: Path) -> None:
    from tests.adopt.test_api import scratch

    contracts = scratch(tmp_path)
    proc = pytest_run(*PLUGIN, "--kcgate", "--collect-only", "-q", cwd=contracts.parent)
    assert "contracts.toml::softmax[float32-8x256-s0]" in proc.stdout, proc.stdout + proc.stderr
    assert "contracts.toml::gemm-bf16acc[float32-16x2048x16-s0]" in proc.stdout
    # an item's location is the decorator's file and line, not contracts.toml (xunit1 JUnit reports it)
    junit = tmp_path / "junit.xml"
    args = ("--kcgate", "-k", "gemm", "--junitxml", str(junit), "-o", "junit_family=xunit1")
    pytest_run(*PLUGIN, *args, cwd=contracts.parent)
    case = next(ET.parse(junit).getroot().iter("testcase"))  # the declared shape, then the boundary one
    assert case.get("file", "").endswith("src/scratchk/ops.py") and case.get("line") == "13", case.attrib


@pytest.mark.slow
def test_a_contract_whose_devices_leave_this_device_out_is_skipped(tmp_path: Path) -> None:
    contracts = tmp_path / "scoped.toml"
    contracts.write_text(
        (DATA / "small.toml").read_text().replace('["../.."]', f"[{str(ROOT)!r}]")
        + '\n[[contract]]\nid = "sum-cuda-only"\nclass = "C-ORD-02"\nkernel = "kcgate.kernels.builtin:row_sum"\n'
        'op = "sum"\ndevices = ["cuda"]\nprotocol = { seeds = 1, trials = 1, boundary = false }\n'
    )
    proc = pytest_run(
        *PLUGIN, "--kcgate", str(contracts), "--kcgate-device", "cpu", "-k", "sum", "-rs", "-q", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sum-cuda-only: its contract's devices leaves cpu out" in proc.stdout
    assert re.search(r"\d+ passed, 1 skipped", proc.stdout), proc.stdout
