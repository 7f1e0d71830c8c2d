"""Issue 35's attacks on the surface added since the first attack suite: discovered sources, the journal,
per-contract ``env``, ``init`` and its TOML writer. Each ran against the code before its fix and failed
there (the issue lists what each did); the shape grammar's and the line locator's are in
tests/test_shape_class.py and tests/test_tomlsrc.py, the CLI's against other typer/click versions in
tests/commands/test_cli_versions.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomli
from hypothesis import given, settings
from hypothesis import strategies as st

from kcgate.adopt import scaffold, tomlout
from kcgate.contracts.fields import ID_PATTERN
from kcgate.results.journal import journal_path
from kcgate.results.model import load_run
from tests.conftest import DATA, ROOT, kcgate

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
protocol = {{ seeds = 1, trials = 1, boundary = false }}

[[contract]]
id = "shadowed"
class = "C-ORD-02"
kernel = "kcgate.kernels.builtin:row_sum"
op = "sum"
dtypes = ["float32"]
protocol = {{ seeds = 1, trials = 1, boundary = false }}
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
    proc = kcgate(
        "run", "--contracts", str(contracts), "--results", str(tmp_path / "r.json"), "-q", cwd=tmp_path
    )
    assert proc.returncode == 7, proc.stdout + proc.stderr
    assert "contract 'shadowed'" in proc.stderr and "PYTHONPATH" in proc.stderr
    assert f"{shadow / 'torch'} shadows the real torch" in proc.stderr and "fix:" in proc.stderr
    assert "internal error" not in proc.stderr and "bug in kcgate" not in proc.stderr


# ---- discover reads bounded sources (#1) ------------------------------------------------------------------

_DECORATED = 'import kcgate\n\n@kcgate.contract(op="softmax", cls="C-PRC-02", dtypes={dtypes})\ndef softmax(x):\n    return x\n'


def _discovering(tmp_path: Path, source: str) -> Path:
    pkg = tmp_path / "src" / "big"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text(source)
    contracts = tmp_path / "contracts.toml"
    contracts.write_text('[project]\nname = "p"\npaths = ["src"]\ndiscover = ["big"]\n')
    return contracts


def test_a_huge_discovered_module_is_exit_2_naming_the_file_and_cap(tmp_path: Path) -> None:
    """A 40 MB module took 15.8 GB and 110 s, then exit 4 under a memory limit; a 3 MB one is refused
    while reading (counted, not trusted from st_size), in well under a second of parsing."""
    from kcgate.contracts import discover

    cap = getattr(discover, "MAX_SOURCE_BYTES", 2 << 20)  # (getattr: the same test ran on the code before)
    body = _DECORATED.format(dtypes='["float32"]') + "x = 1\n" * (cap // 6 + 1)
    contracts = _discovering(tmp_path, body)
    proc = kcgate("validate", str(contracts), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "ops.py" in proc.stderr and f"{cap}-byte cap" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("x = " + "-" * 100_000 + "1\n", "nested too deeply"),
        ("x = " + "+".join(["1"] * 100_000) + "\n", "nested too deeply"),
        (_DECORATED.format(dtypes="[" * 90 + "]" * 90), "nested more than 32 deep"),
    ],
    ids=["unary-chain", "binop-chain", "deep-decorator-value"],
)
def test_deeply_nested_discovered_sources_are_exit_2(tmp_path: Path, source: str, words: str) -> None:
    """MemoryError or RecursionError in ast.parse or literal_eval were exit 4 ("a bug in kcgate")."""
    proc = kcgate("validate", str(_discovering(tmp_path, source)), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and words in proc.stderr and "ops.py" in proc.stderr, proc.stderr


# ---- the journal (#2, #4, #5, and the lock) -----------------------------------------------------------------


def _run(out: Path, contracts: str, *extra: str, timeout: float = 300):  # type: ignore[no-untyped-def]
    return kcgate("run", "--contracts", contracts, "--results", str(out), *extra, cwd=DATA, timeout=timeout)


@pytest.mark.slow
def test_a_kernel_cannot_add_a_pass_row_to_the_journal(tmp_path: Path) -> None:
    """The kernel appends a ``pass`` row for the next case (whose kernel returns zeros), unsigned and with a
    made-up MAC, and SIGKILLs ``kcgate run``. Before: ``--resume`` recorded the zeros kernel as ``pass``
    (exit 0). Now both rows fail verification, the case runs (and fails), and the count is said."""
    out = tmp_path / "r.json"
    killed = _run(out, "journal_attack.toml", "-q")
    assert killed.returncode == -9, killed.stdout + killed.stderr
    resumed = _run(out, "journal_attack.toml", "--resume", "-q")
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    assert "resume: 2 finished result(s)" in resumed.stderr and "run again" in resumed.stderr
    statuses = {c.contract_id: c.status for c in load_run(out).cases}
    assert statuses == {"forge-journal": "pass", "zeros": "fail"}


def _killed_mid_run(out: Path) -> list[str]:
    """``kcgate run`` on slow.toml, SIGKILLed after two cases: the journal's case ids."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kcgate", "run", "--contracts", "slow.toml", "--results", str(out), "-q"],
        cwd=DATA,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_rows(out)) < 2:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return [re.search(rb'"(slow-[^"]+)"', r).group(1).decode() for r in _rows(out)]  # type: ignore[union-attr]


def _rows(out: Path) -> list[bytes]:
    path = journal_path(out)
    return path.read_bytes().split(b"\n")[1:-1] if path.exists() else []


@pytest.mark.slow
def test_tampering_with_a_killed_runs_files_reruns_what_was_touched(tmp_path: Path) -> None:
    """A 100,000-deep row (exit 4 before), a row whose status was changed, and a results file edited to hold
    a case: each is rerun and counted; the rows left alone are kept."""
    out = tmp_path / "slow.json"
    journaled = _killed_mid_run(out)
    rows = _rows(out)
    header = journal_path(out).read_bytes().split(b"\n")[0]
    changed = rows[0].replace(b'"pass"', b'"fail"')
    deep = b"0" * 64 + b" " + b"[" * 100_000 + b"]" * 100_000
    journal_path(out).write_bytes(b"\n".join([header, changed, *rows[1:], deep]) + b"\n")
    resumed = kcgate(
        "run", "--contracts", "slow.toml", "--results", str(out), "--resume", cwd=DATA, env=_PROGRESS
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    ran = re.findall(r"^\[\d+/\d+\] \w+ +(\S+)", resumed.stderr, re.M)
    assert journaled[0] in ran and not set(ran) & set(journaled[1:]) and len(ran) == 8 - len(journaled) + 1
    assert "resume: 2 finished result(s)" in resumed.stderr
    assert load_run(out).complete


@pytest.mark.slow
def test_a_100000_deep_journal_row_is_not_exit_4(tmp_path: Path) -> None:
    """Before: ``--resume`` parsed the row and died of RecursionError, "a bug in kcgate" (exit 4). Now an
    unsigned row is never parsed: it is counted and the run finishes."""
    out = tmp_path / "slow.json"
    journaled = _killed_mid_run(out)
    with open(journal_path(out), "ab") as fh:
        fh.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    resumed = kcgate("run", "--contracts", "slow.toml", "--results", str(out), "--resume", "-q", cwd=DATA)
    assert resumed.returncode == 0 and "internal error" not in resumed.stderr, resumed.stderr
    assert len(journaled) >= 2 and load_run(out).complete


_PROGRESS = {**os.environ, "CI": ""}  # the per-case progress lines, which CI with a non-tty stderr leaves out


@pytest.mark.slow
def test_a_journal_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """Before: ``--resume`` blocked forever opening it. Now exit 3 at once, naming it."""
    out = tmp_path / "r.json"
    os.mkfifo(journal_path(out))
    proc = _run(out, "small.toml", "--resume", "-q", "-k", "matmul", timeout=120)
    assert proc.returncode == 3 and "FIFO" in proc.stderr and str(journal_path(out)) in proc.stderr, (
        proc.stderr
    )


@pytest.mark.slow
def test_a_second_run_on_the_same_out_does_not_truncate_the_first(tmp_path: Path) -> None:
    """Before: the second run's O_TRUNC emptied the first one's journal. Now it stops with exit 3."""
    slow = (DATA / "slow.toml").read_text().replace('paths = ["../.."]', f'paths = ["{ROOT}"]')
    contracts = tmp_path / "slow.toml"  # 40 cases of 0.4 s: the first run outlasts the second's start
    contracts.write_text(
        slow + "".join(slow.split("\n\n", 1)[1].replace('id = "slow-', f'id = "more{i}-') for i in range(4))
    )
    out = tmp_path / "slow.json"
    first = subprocess.Popen(
        [sys.executable, "-m", "kcgate", "run", "--contracts", str(contracts), "--results", str(out), "-q"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_rows(out)) < 1:
        time.sleep(0.02)
    second = kcgate("run", "--contracts", str(contracts), "--results", str(out), "-q", cwd=tmp_path)
    kept = len(_rows(out))
    _, err = first.communicate(timeout=300)
    assert second.returncode == 3 and "another kcgate run is writing it" in second.stderr, second.stderr
    assert kept >= 1 and first.returncode == 0, err
    assert load_run(out).complete and len(load_run(out).cases) == 40


# ---- numerics the fingerprint did not see (#3) ---------------------------------------------------------------

_ENV_RUN = """[project]
paths = ["{root}"]

[[contract]]
id = "gelu"
class = "C-ORD-02"
kernel = "kcgate.kernels.builtin:gelu"
op = "gelu"
dtypes = ["float32"]
protocol = {{ seeds = 1, trials = 1, boundary = false }}
{env}
"""


def _run_with(tmp_path: Path, name: str, env: str, runner_env: dict[str, str] | None = None) -> Path:
    contracts = tmp_path / f"{name}.toml"
    contracts.write_text(_ENV_RUN.format(root=ROOT, env=env))
    out = tmp_path / name / "cpu.json"
    proc = kcgate(
        "run", "--contracts", str(contracts), "--results", str(out), "--runner", "cpu", "-q", "--seed", "1",
        cwd=tmp_path, env=runner_env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.mark.slow
def test_a_contracts_env_that_changes_numerics_makes_its_cases_incomparable(tmp_path: Path) -> None:
    """The same contract run with ``env = { ATEN_CPU_CAPABILITY = "default" }`` and without: before, the
    diff called it unchanged (exit 0, same fingerprint); now its cases are incomparable, with the reason."""
    base = _run_with(tmp_path, "base", "")
    current = _run_with(
        tmp_path, "current", 'env = { ATEN_CPU_CAPABILITY = "default", OMP_NUM_THREADS = "2" }'
    )
    proc = kcgate("diff", str(base), str(current), "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # incomparable does not block by default (docs/diff.md)
    (runner,) = json.loads(proc.stdout)["runners"]
    assert {c["category"] for c in runner["changes"]} == {"incomparable"}, runner["changes"]
    assert all("the contract's env changed since the baseline" in c["message"] for c in runner["changes"])


@pytest.mark.slow
def test_a_runner_level_onednn_isa_cap_is_in_the_fingerprint(tmp_path: Path) -> None:
    """``ONEDNN_MAX_CPU_ISA`` changes fp32 gelu's bits on an AVX-512 host (runners/cpu.md) but was not
    recorded: runs with and without it compared as the same runner."""
    base = _run_with(tmp_path, "base", "")
    current = _run_with(tmp_path, "current", "", {"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert load_run(base).fingerprint.key() != load_run(current).fingerprint.key()
    proc = kcgate("diff", str(base), str(current), "--format", "json", cwd=tmp_path)
    (runner,) = json.loads(proc.stdout)["runners"]
    (change,) = runner["changes"]
    assert change["category"] == "incomparable" and "ONEDNN_MAX_CPU_ISA '' -> 'AVX2'" in change["message"]


# ---- the CLI beside a standalone click (#8, #12; other versions: test_cli_versions.py) ---------------------


def test_the_cli_runs_on_typers_click_not_a_standalone_one() -> None:
    import typer

    from kcgate import cli

    core: object = typer.core
    assert cli.click is (getattr(core, "_click", None) or core.click)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("run", "--no-such-flag", "x"), 3, "No such option: --no-such-flag"),
        (("diff", "--bogus", "a", "b"), 3, "No such option: --bogus"),
        (("--bogus",), 3, "No such option: --bogus"),
        ((), 0, "Usage:"),
    ],
)
def test_a_standalone_click_beside_typer_changes_nothing(
    tmp_path: Path, args: tuple[str, ...], code: int, words: str
) -> None:
    """A click installed beside a typer that vendors its own (typer 0.29 with click 8.5 in an ML venv):
    ``cli.py`` imported it first, so typer's usage errors were "internal error ... bug in kcgate" (exit 4)
    or a traceback. Here the standalone click is a stand-in with click's names, first on the path."""
    fake = tmp_path / "click"
    fake.mkdir()
    (fake / "__init__.py").write_text("from click import exceptions\nfrom click.exceptions import *\n")
    (fake / "exceptions.py").write_text(
        "class ClickException(Exception):\n    pass\n\nclass UsageError(ClickException):\n    pass\n\n"
        "class NoArgsIsHelpError(UsageError):\n    pass\n"
    )
    proc = kcgate(*args, env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}, cwd=tmp_path)
    said = proc.stdout + proc.stderr
    assert proc.returncode == code and words in said, said
    assert "Traceback" not in said and "internal error:" not in said
