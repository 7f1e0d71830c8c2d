"""Kernel sources are decoded as Python decodes them: a BOM or a PEP 263 coding line (#44)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.util.pysource import decode_source
from tests.conftest import kcgate

_BODY = b"import torch\n\n\ndef k(x):\n    return torch.softmax(x, -1)\n"
SOURCES = {
    "bom": b"\xef\xbb\xbf" + _BODY,
    "latin-1": b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + _BODY,
    "cp1252 vim": b"# vim: set fileencoding=cp1252 :\n# \x80\n" + _BODY,
}


@pytest.mark.parametrize("raw", SOURCES.values(), ids=list(SOURCES))
def test_decode_as_python_does(raw: bytes) -> None:
    text = decode_source(raw)
    assert not text.startswith("\ufeff") and "def k(x):" in text
    compile(text, "k.py", "exec")


def test_an_unknown_coding_is_a_syntax_error() -> None:
    with pytest.raises(SyntaxError):
        decode_source(b"# -*- coding: no-such-codec -*-\n" + _BODY)


@pytest.mark.parametrize("raw", SOURCES.values(), ids=list(SOURCES))
def test_validate_accepts_a_module_python_imports(tmp_path: Path, raw: bytes) -> None:
    (tmp_path / "enc.py").write_bytes(raw)
    (tmp_path / "contracts.toml").write_text(
        '[project]\npaths = ["."]\n\n[[contract]]\nid = "sm"\nclass = "C-PRC-01"\nop = "softmax"\n'
        'kernel = "enc:k"\nshapes = [[4, 64]]\n'
    )
    proc = kcgate("validate", "contracts.toml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
