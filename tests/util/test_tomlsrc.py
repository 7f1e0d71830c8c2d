"""tomlsrc's line map: headers mapped at parse time, key lines scanned only when a lookup needs them."""

from __future__ import annotations

from kcgate.util import tomlsrc

TEXT = (
    '[project]\nname = "p"\n\n[[contract]]\nid = "a"\ndescription = "x\u2028y"\n'
    'tolerance = { ulp = 2 }\n\n[[contract]]\r\nid = "b"\n\n[[contract.waiver]]\nrunner = "r"\n'
)


def test_headers_answer_without_a_key_scan_and_keys_scan_once() -> None:
    _, lines = tomlsrc.parse(TEXT)
    assert lines.find("contract", 1) == 9 and lines.find("contract", 1, "waiver", 0) == 12
    assert lines.source  # no key has been looked up yet
    assert lines.find("contract", 0, "tolerance", "ulp") == 7 and not lines.source
    assert lines.find("contract", 1, "id") == 10 and lines.find("contract", 1, "nope") == 9
    assert lines.find("project", "name") == 2 and lines.find("nope") is None


def test_lines_are_counted_as_toml_counts_them() -> None:
    # a U+2028 inside a string is no line break for TOML (str.splitlines would count one)
    _, lines = tomlsrc.parse(TEXT)
    assert lines.find("contract", 0, "tolerance") == 7


# ---- multi-line strings (issue 35 #10) ----------------------------------------------------------------

HIDDEN = '''[project]
name = "p"

[[contract]]
id = "a"
description = """A kernel. Its old contract was:
[[contract]]
dtypes = ["float99"]
[contract.tolerance]
ulp = 9 \\"""
still the description"""
notes = \'\'\'literal, no escapes \\
[[contract]]
dtypes = [1]
\'\'\'
odd = """""quotes"""""
dtypes = ["float32"]

[[contract]]
id = "b"
dtypes = ["float99"]

[contract.tolerance]
ulp = 2
'''


def test_text_inside_multi_line_strings_is_not_toml() -> None:
    """A description that quotes TOML moved contract b's error into contract a's string (issue 35 #10):
    basic strings with an escaped quote, literal strings (no escapes) and a closing run of five quotes."""
    data, lines = tomlsrc.parse(HIDDEN)
    assert [c["id"] for c in data["contract"]] == ["a", "b"] and "\n[[contract]]" in data["contract"][0][
        "notes"
    ]
    assert lines.find("contract", 1) == 19 and lines.find("contract", 1, "tolerance") == 23
    assert lines.find("contract", 1, "dtypes") == 21 and lines.find("contract", 1, "tolerance", "ulp") == 24
    assert lines.find("contract", 0, "dtypes") == 17 and lines.find("contract", 0, "notes") == 12
    assert lines.find("contract", 0, "odd") == 16 and lines.find("contract", 2) is None


def test_validate_names_the_contract_whose_key_is_wrong(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """End to end: the bad dtype of contract b is reported on b's line, not inside a's description."""
    from tests.conftest import ROOT, kcgate

    text = (
        f'[project]\npaths = ["{ROOT}"]\n\n[[contract]]\nid = "a"\nclass = "C-ORD-02"\n'
        'kernel = "kcgate.kernels.builtin:matmul"\nop = "matmul"\ndtypes = ["float32"]\n'
        'description = """Was:\n[[contract]]\ndtypes = ["float99"]\n[contract.tolerance]\n"""\n\n'
        '[[contract]]\nid = "b"\nclass = "C-ORD-02"\nkernel = "kcgate.kernels.builtin:matmul"\nop = "matmul"\n'
        'dtypes = ["float99"]\n'
    )
    (tmp_path / "c.toml").write_text(text)
    proc = kcgate("validate", str(tmp_path / "c.toml"))
    assert proc.returncode == 2 and "c.toml:21: contract 'b'.dtypes" in proc.stderr, proc.stderr
