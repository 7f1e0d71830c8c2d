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
