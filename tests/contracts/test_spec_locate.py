"""spec.locate parses each kernel module once per file version (validate of 10^4 contracts sharing a few
modules), and still sees a module that changed or appeared since."""

from __future__ import annotations

from pathlib import Path

from kcgate.contracts.locate import locate


def test_a_changed_module_is_parsed_again(tmp_path: Path) -> None:
    mod = tmp_path / "kmod_changes.py"
    mod.write_text("def k(x):\n    return x\n")
    assert locate("kmod_changes:k", (tmp_path,)) is None
    assert locate("kmod_changes:k", (tmp_path,)) is None  # cached
    mod.write_text("def renamed_kernel(x):\n    return x\n")
    problem = locate("kmod_changes:k", (tmp_path,))
    assert problem is not None and "'k'" in problem[0]


def test_a_module_that_appears_later_is_found(tmp_path: Path) -> None:
    problem = locate("kmod_later:k", (tmp_path,))
    assert problem is not None and "not installed in this environment: package 'kmod_later'" in problem[0]
    (tmp_path / "kmod_later.py").write_text("def k(x):\n    return x\n")
    assert locate("kmod_later:k", (tmp_path,)) is None
