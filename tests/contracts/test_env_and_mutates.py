"""``env`` and ``mutates`` are checked by validate, not discovered by a failing run (#44)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.contracts.load import load_project
from kcgate.errors import ContractsError
from tests.conftest import kcgate

_HEAD = '[project]\n\n[[contract]]\nid = "mm"\nclass = "C-PRC-01"\nkernel = "torch:matmul"\nop = "matmul"\n'


def _problems(tmp_path: Path, line: str) -> list:  # type: ignore[type-arg]
    f = tmp_path / "contracts.toml"
    f.write_text(_HEAD + line + "\n", encoding="utf-8")
    with pytest.raises(ContractsError) as err:
        load_project(f)
    return list(err.value.problems)


def test_an_env_value_with_a_nul_byte_is_refused(tmp_path: Path) -> None:
    (p,) = _problems(tmp_path, 'env = { ANY = "a\\u0000b" }')
    assert (p.where, p.line) == ("contract 'mm'.env.ANY", 8) and "NUL" in p.message and p.fix


def test_a_huge_env_value_is_refused_naming_the_variable_and_cap(tmp_path: Path) -> None:
    (p,) = _problems(tmp_path, f'env = {{ BIG = "{"x" * 200_000}" }}')
    assert p.where == "contract 'mm'.env.BIG" and "32768" in p.message and p.fix


def test_many_env_values_over_the_total_cap_are_refused(tmp_path: Path) -> None:
    values = ", ".join(f'V{i} = "{"x" * 30_000}"' for i in range(6))
    problems = _problems(tmp_path, f"env = {{ {values} }}")
    assert [p.where for p in problems] == ["contract 'mm'.env"] and "131072" in problems[0].message


def test_a_duplicate_or_empty_mutates_is_refused(tmp_path: Path) -> None:
    (dup,) = _problems(tmp_path, 'mutates = ["a", "a"]')
    assert dup.where == "contract 'mm'.mutates[1]" and "twice" in dup.message
    (empty,) = _problems(tmp_path, "mutates = []")
    assert empty.where == "contract 'mm'.mutates" and "remove" in empty.fix


def test_validate_exits_2_on_a_nul_in_env_never_4(tmp_path: Path) -> None:
    (tmp_path / "contracts.toml").write_text(_HEAD + 'env = { ANY = "a\\u0000b" }\n')
    proc = kcgate("validate", "contracts.toml", cwd=tmp_path)
    assert proc.returncode == 2 and "contract 'mm'.env.ANY" in proc.stdout + proc.stderr, (
        proc.stdout + proc.stderr
    )
