"""``outputs`` (the names of a custom op's several outputs) is checked by validate where it can be: each a
name, each once, not empty; its count against the reference's is checked when the reference runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.contracts.load import load_project
from kcgate.errors import ContractsError
from tests.conftest import kcgate

_HEAD = (
    '[project]\n\n[[contract]]\nid = "fused"\nclass = "C-PRC-01"\nop = "custom"\nkernel = "torch:sub"\n'
    'reference = "torch:add"\ninputs = "torch:randn"\nshapes = [[4, 8]]\n'
)


def _problems(tmp_path: Path, line: str) -> list:  # type: ignore[type-arg]
    f = tmp_path / "contracts.toml"
    f.write_text(_HEAD + line + "\n", encoding="utf-8")
    with pytest.raises(ContractsError) as err:
        load_project(f)
    return list(err.value.problems)


def test_outputs_are_read_in_order(tmp_path: Path) -> None:
    f = tmp_path / "contracts.toml"
    f.write_text(_HEAD + 'outputs = ["out", "residual"]\n', encoding="utf-8")
    assert load_project(f).contracts[0].outputs == ("out", "residual")


def test_a_duplicate_empty_or_odd_output_name_is_refused_naming_the_item(tmp_path: Path) -> None:
    (dup,) = _problems(tmp_path, 'outputs = ["out", "out"]')
    assert dup.where == "contract 'fused'.outputs[1]" and "twice" in dup.message and dup.fix
    (empty,) = _problems(tmp_path, "outputs = []")
    assert empty.where == "contract 'fused'.outputs" and "remove" in empty.fix
    (odd,) = _problems(tmp_path, 'outputs = ["out", "new residual"]')
    assert odd.where == "contract 'fused'.outputs[1]" and "not a name" in odd.message


def test_validate_exits_2_on_a_bad_outputs_key(tmp_path: Path) -> None:
    (tmp_path / "contracts.toml").write_text(_HEAD + 'outputs = ["a", "a"]\n')
    proc = kcgate("validate", "contracts.toml", cwd=tmp_path)
    assert proc.returncode == 2 and "contract 'fused'.outputs[1]" in proc.stdout + proc.stderr, proc.stdout


def test_outputs_on_a_family_op_is_refused(tmp_path: Path) -> None:
    head = _HEAD.replace('op = "custom"', 'op = "softmax"').replace(
        'reference = "torch:add"\ninputs = "torch:randn"\n', ""
    )
    f = tmp_path / "contracts.toml"
    f.write_text(head + 'outputs = ["y", "lse"]\n', encoding="utf-8")
    with pytest.raises(ContractsError) as err:
        load_project(f)
    assert any(p.where == "contract 'fused'.outputs" and "custom" in p.message for p in err.value.problems)
