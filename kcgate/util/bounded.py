"""Bounded reads of untrusted files: regular files only, a byte cap enforced while reading (never
trusting ``st_size``: a FIFO or ``/dev/zero`` reports 0), and JSON without runaway nesting or lone
surrogates. Failures are ``Refused`` with a message; each caller names its file and exit code.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kcgate.errors import os_error

_CHUNK = 1 << 20
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # \ud800-\udfff written as a JSON escape
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_KINDS = (
    (stat.S_ISDIR, "directory"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISSOCK, "socket"),
)


class Refused(ValueError):
    """An untrusted file that is not read: what is wrong with it, without the path (the caller adds it)."""


def read_capped(path: Path | str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; anything else is Refused."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: opening a FIFO with no writer must not hang
    except OSError as exc:
        raise Refused(f"cannot read it: {os_error(exc)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "special file")
            raise Refused(f"is a {kind}, not a regular file")
        return _read_up_to(fd, max_bytes)
    except OSError as exc:
        raise Refused(f"cannot read it: {os_error(exc)}") from None
    finally:
        os.close(fd)


def _read_up_to(fd: int, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > max_bytes:
            raise Refused(f"is over the {max_bytes}-byte cap")
        chunks.append(chunk)


def loads_json(data: bytes | str, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``json.loads`` for untrusted text: nesting past the interpreter's recursion limit, lone surrogates
    (which no output can encode) and a key given twice in one object are Refused; invalid JSON raises
    ValueError as usual."""
    try:
        doc = json.loads(data, parse_constant=parse_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise Refused("is nested too deeply (arrays or objects hundreds of levels deep)") from None
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _SURROGATE_ESCAPE.search(raw):  # rare: only then walk the document
        reject_lone_surrogates(doc)
    return doc


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all different. JSON readers disagree on a key given twice (Python keeps the
    last, others the first), so such a file means one thing to kcgate and another to the next reader."""
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise Refused(
            f"has the key {twice[:100]!r} twice in one object; JSON readers disagree on which counts"
        )
    return doc


def reject_lone_surrogates(doc: Any) -> None:
    """Refuse a document with a string (or key) holding half of a UTF-16 surrogate pair."""
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found = _LONE_SURROGATE.search(item)
            if found:
                raise Refused(f"holds a lone surrogate (\\u{ord(found.group()):04x}), which is not text")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
