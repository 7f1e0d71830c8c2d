"""The package as released: one version source, the data files kcgate reads inside the wheel, a LICENSE,
a changelog with an Unreleased section, and a release workflow that publishes by trusted publishing.

The wheel is built for real, with setuptools' own build backend (no isolation, so offline), from a copy of
the sources in a temporary directory: the worktree gets no build/ or egg-info.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import kcgate

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

BUILD_WHEEL = """
import sys
from setuptools import build_meta
print(build_meta.build_wheel(sys.argv[1]))
"""
BUILD_SDIST = BUILD_WHEEL.replace("build_wheel", "build_sdist")


def _copy_sources(dest: Path) -> Path:
    """The files a build reads: pyproject.toml, README.md, LICENSE and the kcgate package."""
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(ROOT / name, dest / name)
    shutil.copytree(ROOT / "kcgate", dest / "kcgate", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _build_wheel(src: Path, out: Path) -> zipfile.ZipFile:
    proc = subprocess.run(
        [sys.executable, "-c", BUILD_WHEEL, str(out)],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return zipfile.ZipFile(out / proc.stdout.strip().splitlines()[-1])


def _metadata(wheel: zipfile.ZipFile) -> str:
    [name] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return wheel.read(name).decode()


def test_the_version_is_written_once() -> None:
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "kcgate.vocab.version.__version__"
    }
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?", kcgate.__version__)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    src = _copy_sources(tmp_path_factory.mktemp("src"))
    return _build_wheel(src, tmp_path_factory.mktemp("dist"))


def test_the_wheel_carries_kcgates_version_license_and_urls(wheel: zipfile.ZipFile) -> None:
    meta = _metadata(wheel)
    assert f"\nVersion: {kcgate.__version__}\n" in meta
    assert "License-Expression: Apache-2.0" in meta
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in wheel.namelist())
    assert "Project-URL: Changelog," in meta and "Classifier: Typing :: Typed" in meta


def test_the_wheel_carries_every_data_file_kcgate_reads(wheel: zipfile.ZipFile) -> None:
    """Every file under kcgate/ that is not Python (py.typed, the calibration contracts, native.c)."""
    tracked = subprocess.run(
        ["git", "ls-files", "kcgate"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    data = set()
    for p in tracked:
        if (ROOT / p).is_dir():  # kcgate/templates: a link to docs/templates, carried as its files
            data |= {f"{p}/{f.name}" for f in (ROOT / p).iterdir() if f.suffix == ".yml"}
        elif not p.endswith(".py"):
            data.add(p)
    assert data >= {"kcgate/py.typed", "kcgate/numerics/oracles/native.c", "kcgate/templates/kcgate-run.yml"}
    assert data <= set(wheel.namelist())
    for pattern in PYPROJECT["tool"]["setuptools"]["package-data"]["kcgate"]:  # no stale entries
        assert list((ROOT / "kcgate").glob(pattern)), f"package-data {pattern!r} matches nothing"


def test_init_github_finds_the_templates_in_an_installed_wheel(
    wheel: zipfile.ZipFile, tmp_path: Path
) -> None:
    """`kcgate init --github` writes the workflows from the templates the wheel carries (no checkout)."""
    wheel.extractall(tmp_path / "site")
    code = "from kcgate.adopt.scaffold import templates_dir; print(templates_dir())"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == tmp_path / "site" / "kcgate" / "templates"


def test_a_changed_version_reaches_the_wheel(tmp_path: Path) -> None:
    """The version test fails when the two would differ: the wheel follows kcgate.vocab.version alone."""
    (tmp_path / "src").mkdir()
    src = _copy_sources(tmp_path / "src")
    init = src / "kcgate" / "vocab" / "version.py"
    init.write_text(init.read_text().replace(f'"{kcgate.__version__}"', '"9.8.7"', 1))
    (tmp_path / "dist").mkdir()
    assert "\nVersion: 9.8.7\n" in _metadata(_build_wheel(src, tmp_path / "dist"))


def test_license_and_changelog() -> None:
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text  # the full text, not a pointer to it
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog and "Keep a Changelog" in changelog
    # before its tag the version is described by Unreleased; release.yml refuses a tag without its section
    assert f"## [{kcgate.__version__}]" in changelog or f"released as {kcgate.__version__}" in changelog


def test_the_release_workflow_publishes_by_trusted_publishing() -> None:
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    on = wf[True] if True in wf else wf["on"]  # PyYAML reads a bare `on:` as True
    assert on["push"]["tags"] == ["v*"]
    assert wf["permissions"] == {}
    publish = wf["jobs"]["publish"]
    assert publish["permissions"] == {"id-token": "write"} and publish["environment"]["name"] == "pypi"
    text = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert "pypa/gh-action-pypi-publish@" in text and "password:" not in text
    assert "twine check" in text and "python -m build" in text


# A module a test skips without, and why the dev extra leaves it out; every other one the dev extra installs,
# so the README's set-up, .ci/run and ci.yml run those tests (compare --png's skipped everywhere before).
NOT_IN_DEV = {
    "torch": "installed first: the CPU build or the machine's vendor build (README, Set-up)",
    "liger_kernel": "the liger extra: Triton's interpreter, minutes of CPU",
    "triton": "the liger extra",
}
DISTRIBUTIONS = {"yaml": "pyyaml", "xdist": "pytest-xdist"}  # module name -> the name pip installs


def test_every_module_a_test_skips_without_is_in_the_dev_extra() -> None:
    dev = {
        re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower()
        for req in PYPROJECT["project"]["optional-dependencies"]["dev"]
    }
    skipped = set()
    for path in (ROOT / "tests").rglob("*.py"):
        skipped |= set(re.findall(r"importorskip\(\s*[\"']([\w.]+)[\"']", path.read_text()))
    assert {"matplotlib", "yaml", "torch"} <= skipped, skipped
    missing = {m for m in skipped - NOT_IN_DEV.keys() if DISTRIBUTIONS.get(m, m).replace("_", "-") not in dev}
    assert not missing, f"tests skip without {sorted(missing)}; add them to the dev extra or to NOT_IN_DEV"


def test_the_sdist_carries_no_partial_test_tree(tmp_path: Path) -> None:
    """The sdist builds the wheel and holds no tests (setuptools' default took tests/test*.py without the
    conftest and helpers they import): MANIFEST.in prunes them; the data files are there."""
    src = _copy_sources(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("")  # what setuptools would pick up by default
    (tmp_path / "dist").mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", BUILD_SDIST, str(tmp_path / "dist")],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import tarfile

    with tarfile.open(tmp_path / "dist" / proc.stdout.strip().splitlines()[-1]) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    assert not [n for n in names if n.startswith("tests")], names
    assert {"pyproject.toml", "README.md", "LICENSE", "kcgate/templates/kcgate-run.yml"} <= set(names)
    assert "kcgate/kernels/calibration/contracts.toml" in names


def test_the_pre_commit_hook_runs_kcgate_validate(tmp_path: Path) -> None:
    """The hook's entry, as pre-commit runs it (no file names): exit 0 on a valid contracts.toml, 2 with the
    problem at its line on a broken one."""
    yaml = pytest.importorskip("yaml")
    hook, system = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert (
        hook["id"] == "kcgate-validate" and hook["language"] == "python" and hook["pass_filenames"] is False
    )
    assert system["id"] == "kcgate-validate-system" and system["language"] == "system"
    assert system["entry"] == "kcgate validate --strict-imports" and system["files"] == hook["files"]
    assert re.search(hook["files"], "contracts.toml") and re.search(hook["files"], "src/ops/gemm.py")
    program, *args = hook["entry"].split()
    assert program == "kcgate" and PYPROJECT["project"]["scripts"]["kcgate"] == "kcgate.cli:main"
    cmd = [sys.executable, "-m", "kcgate", *args]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    shutil.copy(
        ROOT / "tests" / "data" / "bad_contracts" / "02_unknown_class.toml", tmp_path / "contracts.toml"
    )
    bad = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "contracts.toml:7: contract 'a'.class: unknown class" in bad.stderr
    (tmp_path / "contracts.toml").write_text(
        '[[contract]]\nid = "mm"\nclass = "C-ORD-02"\nkernel = "kcgate.kernels.builtin:matmul"\nop = "matmul"\n'
    )
    good = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert good.returncode == 0 and "contracts.toml: OK: 1 contract" in good.stdout, good.stderr


@pytest.mark.slow
def test_the_pre_commit_hook_passes_on_the_repositorys_own_contracts(tmp_path: Path) -> None:
    """``pre-commit try-repo`` with this checkout as the hook's repository, on this repository's own
    contracts.toml: pre-commit builds the hook's environment (kcgate and its dependencies, no torch), so the
    kernels in torch are a stated limit (warnings) and the hook passes."""
    if importlib.util.find_spec("pre_commit") is None:
        pytest.skip(
            "SKIPPED LOUDLY: pre-commit is not installed (it is in the dev extra: pip install -e '.[dev]')"
        )
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "PYTHONPATH": ""}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pre_commit",
            "try-repo",
            str(ROOT),
            "kcgate-validate",
            "--all-files",
            "--verbose",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 and "CalledProcessError" in out and "pip" in out:
        pytest.skip(
            f"SKIPPED LOUDLY: pre-commit could not install the hook's environment (no index?): {out[-600:]}"
        )
    assert proc.returncode == 0, out[-3000:]
    assert "kcgate validate" in out and "Passed" in out
    assert "contracts.toml: OK:" in out and "not installed in this environment: package 'torch'" in out
