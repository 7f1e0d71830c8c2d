"""Issue 35's attacks on the surface added since the first attack suite: discovered sources, the journal,
per-contract ``env``, ``init`` and its TOML writer. Each ran against the code before its fix and failed
there (the issue lists what each did); the shape grammar's and the line locator's are in
tests/test_shape_class.py and tests/test_tomlsrc.py, the CLI's against other typer/click versions in
tests/commands/test_cli_versions.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli
from hypothesis import given, settings
from hypothesis import strategies as st

from kcgate.adopt import scaffold, tomlout
from kcgate.contracts.fields import ID_PATTERN
from tests.conftest import ROOT, kcgate

# ---- init: its ids and its TOML writer (#6, #11) --------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "cid"),
    [("pkg.k:café_matmul", "cafe-matmul"), ("pkg.k:naïve_Soft", "naive-soft"), ("pkg.k:核", "kernel")],
)
def test_init_ids_are_ascii_ids_validate_accepts(kernel: str, cid: str) -> None:
    """``café_matmul`` became ``id = "café-matmul"``, which init's own validate then rejected."""
    assert scaffold.contract_id(kernel, set()) == cid


@settings(max_examples=500, deadline=None)
@given(name=st.text(min_size=1, max_size=120), module=st.text(min_size=1, max_size=20))
def test_any_kernel_name_gives_a_valid_id(name: str, module: str) -> None:
    import re

    taken: set[str] = set()
    first = scaffold.contract_id(f"{module}:{name}", taken)
    second = scaffold.contract_id(f"{module}:{name}", taken)  # taken: a module-qualified or numbered id
    third = scaffold.contract_id(f"{module}:{name}", taken)
    assert len({first, second, third}) == 3
    assert all(re.match(ID_PATTERN, c) for c in (first, second, third)), (first, second, third)


_VALUES = st.recursive(
    st.one_of(
        st.text(),
        st.integers(-(2**63), 2**63 - 1),
        st.booleans(),
        st.floats(allow_nan=False, allow_infinity=False),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(), inner, max_size=3)),
    max_leaves=8,
)


@settings(max_examples=1000, deadline=None)
@given(keys=st.dictionaries(st.text(), _VALUES, max_size=4), note=st.text())
def test_the_toml_writer_round_trips_any_key_and_string(keys: dict, note: str) -> None:  # type: ignore[type-arg]
    """``café`` was written as a bare key and DEL raw: tomli rejected both."""
    text = tomlout.table("[t]", keys, {k: note for k in keys})
    assert tomli.loads(text)["t"] == keys, text


@pytest.mark.parametrize("text", ["café", "a\x7fb", "\x00\x1f", "x\u2028y", "\\u0041"])
def test_the_toml_writer_quotes_what_tomli_rejects_bare_or_raw(text: str) -> None:
    assert tomli.loads(tomlout.table("[t]", {text: text}))["t"] == {text: text}


def test_a_lone_surrogate_is_refused_not_written() -> None:
    with pytest.raises(ValueError, match="surrogate"):
        tomlout.value("a\ud800")


def _package(root: Path, name: str, init: str) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text(init)


@pytest.mark.slow
def test_init_on_a_package_that_exits_at_import_names_it(tmp_path: Path) -> None:
    """``sys.exit(3)`` at import: exit 4 with an empty message before; now the package is reported as not
    importable (exit 5, nothing placed), and ``os._exit(3)``, which leaves no report, is exit 7 naming it."""
    _package(tmp_path, "exitpkg", "import sys\nsys.exit(3)\n")
    _package(tmp_path, "hardexitpkg", "import os\nos._exit(3)\n")
    soft = kcgate("init", "exitpkg", "--path", str(tmp_path), "--no-run", cwd=tmp_path)
    assert soft.returncode == 5, soft.stdout + soft.stderr
    assert "cannot import exitpkg: its import called sys.exit(3)" in soft.stdout
    hard = kcgate("init", "hardexitpkg", "--path", str(tmp_path), "--no-run", cwd=tmp_path)
    assert hard.returncode == 7 and "importing hardexitpkg ended the probe process" in hard.stderr, (
        hard.stderr
    )
    assert "internal error" not in soft.stderr + hard.stderr


@pytest.mark.slow
def test_init_writes_an_ascii_id_for_a_non_ascii_kernel_and_validates_it(tmp_path: Path) -> None:
    _package(tmp_path, "accents", "import torch\n\ndef café_matmul(a, b):\n    return a @ b\n")
    proc = kcgate("init", "accents", "--path", str(tmp_path), "--no-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (tmp_path / "contracts.toml").read_text()
    assert 'id = "cafe-matmul"' in text and 'kernel = "accents:café_matmul"' in text
    assert kcgate("validate", str(tmp_path / "contracts.toml"), cwd=tmp_path).returncode == 0


# ---- a contract's env that stops its worker (#7) -----------------------------------------------------------

_ENV_CONTRACTS = """[project]
paths = ["{root}"]

[[contract]]
id = "plain"
class = "C-ORD-02"
kernel = "kcgate.kernels.builtin:row_sum"
op = "sum"
dtypes = ["float32"]
protocol = {{ seeds = 1, trials = 1 }}

[[contract]]
id = "shadowed"
class = "C-ORD-02"
kernel = "kcgate.kernels.builtin:row_sum"
op = "sum"
dtypes = ["float32"]
protocol = {{ seeds = 1, trials = 1 }}
env = {{ PYTHONPATH = "{shadow}:{root}" }}
"""


@pytest.mark.slow
@pytest.mark.parametrize("torch_init", ["", "import sys\nsys.exit(3)\n"], ids=["empty-torch", "torch-exits"])
def test_an_env_pythonpath_that_shadows_torch_is_the_contracts_fault(tmp_path: Path, torch_init: str) -> None:
    """Exit 4 ("bug in kcgate") before; now exit 7 naming the contract, the variable, the shadowing module
    and the fix."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    _package(shadow, "torch", torch_init)
    contracts = tmp_path / "env.toml"
    contracts.write_text(_ENV_CONTRACTS.format(root=ROOT, shadow=shadow))
    proc = kcgate("run", "--contracts", str(contracts), "--out", str(tmp_path / "r.json"), "-q", cwd=tmp_path)
    assert proc.returncode == 7, proc.stdout + proc.stderr
    assert "contract 'shadowed'" in proc.stderr and "PYTHONPATH" in proc.stderr
    assert f"{shadow / 'torch'} shadows the real torch" in proc.stderr and "fix:" in proc.stderr
    assert "internal error" not in proc.stderr and "bug in kcgate" not in proc.stderr
