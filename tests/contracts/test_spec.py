"""The contract language: every malformed file gets exit 2 and a located, fixable message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kcgate.contracts.fields import CONTRACT_FIELD
from kcgate.contracts.load import load_project
from kcgate.contracts.policy import DriftRule
from kcgate.errors import ContractsError
from kcgate.vocab.classes import CLASSES
from tests.conftest import DATA, ROOT, kcgate

BAD = sorted((DATA / "bad_contracts").glob("*.toml"))


def _expectation(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: ...'"
    return first.removeprefix("# expect: ")


def test_corpus_is_large_enough() -> None:
    assert len(BAD) >= 25


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_malformed_file_is_rejected_with_location(path: Path) -> None:
    with pytest.raises(ContractsError) as info:
        load_project(path)
    text = info.value.render()
    assert _expectation(path) in text
    assert str(path) in text
    assert re.search(re.escape(str(path)) + r":\d+", text), f"no line number in:\n{text}"


@pytest.mark.parametrize("path", BAD[:6], ids=[p.stem for p in BAD[:6]])
@pytest.mark.slow
def test_cli_validate_exit_code_and_no_traceback(path: Path) -> None:
    proc = kcgate("validate", str(path))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert _expectation(path) in proc.stderr


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ContractsError) as info:
        load_project(DATA / "bad_contracts" / "30_many_errors_at_once.toml")
    assert len(info.value.problems) == 3
    assert all(p.fix for p in info.value.problems)


def test_repo_contracts_cover_every_op_family_and_are_valid() -> None:
    OPS = CONTRACT_FIELD["op"].choices

    project = load_project(ROOT / "contracts.toml")
    assert {c.op for c in project.contracts} >= set(OPS) - {"custom"}
    assert all(c.line for c in project.contracts)


def test_line_numbers_point_at_the_contract(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text(
        '[[contract]]\nid = "x"\nclass = "C-PRC-01"\nkernel = "kcgate.kernels.builtin:matmul"\n'
        'op = "matmul"\n\n[[contract]]\nid = "y"\nclass = "C-PRC-01"\n'
        'kernel = "kcgate.kernels.builtin:matmul"\nop = "matmul"\ntolerance = { ulp = -1 }\n'
    )
    with pytest.raises(ContractsError) as info:
        load_project(f)
    (problem,) = info.value.problems
    assert problem.line == 12 and "contract 'y'.tolerance.ulp" in problem.where


def test_class_defaults_apply_and_overrides_win(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text(
        '[[contract]]\nid = "g"\nclass = "C-EXC-02"\nkernel = "kcgate.kernels.builtin:gather"\n'
        'op = "gather"\nparams = { oob = "clamp" }\n\n[[contract]]\nid = "m"\nclass = "C-PRC-01"\n'
        'kernel = "kcgate.kernels.builtin:matmul"\nop = "matmul"\ntolerance = { lambda = 4 }\n'
    )
    g, m = load_project(f).contracts
    assert g.tolerance.method == "exact" and g.param("oob") == "clamp" and g.postcondition == "policy"
    assert m.tolerance.lam == 4.0 and m.tolerance.method == "error-bound" and m.oracle == "fp64"


def test_all_twelve_classes_are_accepted(tmp_path: Path) -> None:
    blocks = []
    for cid, cls in CLASSES.items():
        op = "gather" if "gather" in cls.ops else cls.ops[0]
        blocks.append(
            f'[[contract]]\nid = "{cid}"\nclass = "{cid}"\nkernel = "kcgate.kernels.builtin:{op}"\n'
            f'op = "{op}"\n'
        )
    (tmp_path / "c.toml").write_text("\n".join(blocks).replace("kernels:sum", "kernels:row_sum"))
    assert len(load_project(tmp_path / "c.toml").contracts) == 12


def test_waivers_and_policy_are_loaded(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text(
        '[policy]\nrequired_runners = ["cpu-*"]\nbudget_drift = 0.3\n\n[[contract]]\nid = "m"\n'
        'class = "C-PRC-01"\nkernel = "kcgate.kernels.builtin:matmul"\nop = "matmul"\n\n'
        '[[contract.waiver]]\nrunner = "apple-*"\nuntil = 2027-03-01\nreason = "MPS bf16, issue 123"\n'
    )
    p = load_project(f)
    (w,) = p.policy.waivers
    assert w.contract_id == "m" and w.matches("m", "apple-m4") and not w.matches("m", "cpu-x")
    assert (
        w.line == 11
        and p.policy.budget_drift == DriftRule(ratio=None, absolute=0.3)
        and p.policy.is_required("cpu-avx2")
    )


@pytest.mark.parametrize("depth", [100_000, 40])
@pytest.mark.slow
def test_deep_nesting_in_contracts_is_exit_2(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "contracts.toml"
    path.write_text("x = " + "[" * depth + "]" * depth + "\n")
    proc = kcgate("validate", str(path), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "nested" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_fifo_as_contracts_is_refused_without_hanging(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "contracts.toml"
    os.mkfifo(fifo)
    for target in (fifo, Path("/dev/zero")):
        proc = kcgate("validate", str(target), timeout=60)
        assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr


def test_an_error_waiver_is_loaded_and_a_bad_kind_names_the_fix(tmp_path: Path) -> None:
    head = '[[contract]]\nid = "m"\nclass = "C-PRC-01"\nkernel = "kcgate.kernels.builtin:matmul"\nop = "matmul"\n\n'
    waiver = (
        '[[contract.waiver]]\nkind = "{}"\nrunner = "intel-*"\nuntil = 2027-03-01\nreason = "no XPU build"\n'
    )
    f = tmp_path / "c.toml"
    f.write_text(head + waiver.format("error"))
    (w,) = load_project(f).policy.waivers
    assert w.kind == "error" and w.matches("m", "intel-max", "error") and not w.matches("m", "intel-max")
    f.write_text(head + waiver.format("crash"))
    with pytest.raises(ContractsError) as exc:
        load_project(f)
    text = exc.value.render()
    assert "c.toml:8: contract 'm'.waiver[0].kind" in text and 'fix: kind = "error"' in text


@pytest.mark.parametrize(
    ("tolerance", "method"),
    [
        ("", "error-bound"),
        ("tolerance = { rtol = 1e-2 }", "abs-rel"),
        ('tolerance = { method = "ulp" }', "ulp"),
    ],
)
def test_a_custom_op_needs_no_tolerance_and_a_written_one_wins(
    tmp_path: Path, tolerance: str, method: str
) -> None:
    """No tolerance: the bound derived from the reference (method error-bound); rtol/atol alone: abs-rel."""
    (tmp_path / "k.py").write_text("def f(x): ...\ndef r(x): ...\ndef g(s, d, gen): ...\n")
    p = tmp_path / "contracts.toml"
    p.write_text(
        '[project]\npaths = ["."]\n\n[[contract]]\nid = "c"\nclass = "C-CMP-03"\nop = "custom"\nkernel = "k:f"\nreference = "k:r"\n'
        f'inputs = "k:g"\nshapes = [[4, 8]]\n{tolerance}\n'
    )
    assert load_project(p).contracts[0].tolerance.method == method
