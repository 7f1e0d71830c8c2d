"""Python source decoded as the interpreter decodes it: a UTF-8 BOM or a PEP 263 coding line names the
encoding (``tokenize.detect_encoding``), else UTF-8. validate's static lookup, discovery and mutate use it."""

from __future__ import annotations

import io
import tokenize


def source_encoding(data: bytes) -> str:
    """The encoding Python reads ``data`` in ("utf-8-sig" for a BOM); SyntaxError for an unknown one."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return encoding


def decode_source(data: bytes) -> str:
    """The module's text (a BOM dropped); SyntaxError or UnicodeDecodeError where Python would refuse it."""
    return data.decode(source_encoding(data))
