"""Parse TOML and keep a map from key paths to source lines, so errors can name the line.

``tomllib`` returns plain dicts without positions; this module scans the text once for table
headers and ``key =`` lines. It is a locator for messages, not a second parser.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Any

try:  # tomli's wheels are compiled (mypyc): about 2.5x tomllib's speed on 10,000 contracts
    import tomli as tomllib
except ImportError:  # pragma: no cover - the same parser, pure Python, in the standard library
    import tomllib  # type: ignore[no-redef]

_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\]?\s*(#.*)?$")
_HEADER_LINE = re.compile(r"^[ \t]*\[[^\n]*", re.M)
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\"']+)\s*=")
_ERR_POS = re.compile(r"\(at line (\d+), column (\d+)\)")
# What can hide a line from the locator: comments and one-line strings (skipped whole, so a quote or # in
# them opens nothing) and the openings of multi-line strings, whose ends _CLOSE finds (escapes in basic
# strings; a closing run of up to five quotes leaves the first one or two in the string, as TOML says).
_TOKEN = re.compile(r"#[^\n]*|\"\"\"|'''|\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'")
_TRIPLE = re.compile("\"\"\"|'''")
_CLOSE = {
    '"""': re.compile(r'(?:[^"\\]|\\[\s\S]|"(?!""))*"""(?:"{0,2})'),
    "'''": re.compile(r"(?:[^']|'(?!''))*'''(?:'{0,2})"),
}


@dataclass
class LineMap:
    """Lines of tables and keys: ('contract', 3) -> header line; ('contract', 3, 'tolerance', 'lambda') -> line.

    ``parse`` maps the table headers only and keeps the text in ``source``: the key lines are scanned on
    the first lookup a header cannot answer (a problem to report), which a valid file seldom needs.
    """

    lines: dict[tuple[Any, ...], int] = field(default_factory=dict)
    source: str = ""
    strings: list[tuple[int, int]] = field(default_factory=list)  # source's multi-line strings (parse found)

    def find(self, *path: Any) -> int | None:
        """The line of the longest known prefix of ``path``."""
        if path in self.lines:
            return self.lines[path]  # a header (every contract's own line): no key scan needed
        if self.source:
            self.lines, self.source = _scan(self.source, self.strings), ""
        for n in range(len(path), 0, -1):
            if path[:n] in self.lines:
                return self.lines[path[:n]]
        return None


class TomlSyntaxError(ValueError):
    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


MAX_DEPTH = 32  # arrays and tables inside each other; a contract needs 4


def parse(text: str) -> tuple[dict[str, Any], LineMap]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _ERR_POS.search(str(exc))
        raise TomlSyntaxError(_ERR_POS.sub("", str(exc)).strip(), int(m.group(1)) if m else None) from None
    except RecursionError:
        raise TomlSyntaxError(
            f"arrays or tables nested too deeply (the limit is {MAX_DEPTH})", None
        ) from None
    if _depth(data) > MAX_DEPTH:
        raise TomlSyntaxError(f"arrays or tables nested more than {MAX_DEPTH} deep", None)
    strings = _multiline_strings(text)  # once: the header map now, the key scan if a lookup needs it
    return data, LineMap(_scan_headers(text, strings), text, strings)


def _depth(value: Any) -> int:
    """How deeply arrays and tables nest, one level at a time (no recursion on untrusted depth)."""
    depth, level = 0, [value] if isinstance(value, (dict, list)) else []
    while level:
        depth += 1
        below: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            below += [c for c in children if isinstance(c, (dict, list))]
        level = below
    return depth


def _multiline_strings(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of each multi-line string: a line that starts inside one is text, not TOML (a
    description quoting ``dtypes = [...]`` or ``[contract.tolerance]`` must not move a later key's line)."""
    if '"""' not in text and "'''" not in text:
        return []  # the common case: one substring search, no scan
    spans: list[tuple[int, int]] = []
    at = 0
    while m := _TRIPLE.search(text, at):
        # a line's start (or a string's end) is outside any string: tokenize from there to the opening, so
        # only lines holding triple quotes are read token by token (a quote inside a comment opens nothing)
        tok = _TOKEN.search(text, max(text.rfind("\n", 0, m.start()) + 1, at))
        while tok and tok.group() not in _CLOSE:
            tok = _TOKEN.search(text, tok.end())
        if tok is None:
            break
        end = _CLOSE[tok.group()].match(text, tok.end())
        at = end.end() if end else len(text)  # unterminated: tomli has refused the file already
        spans.append((tok.start(), at))
    return spans


def _inside(spans: list[tuple[int, int]], offset: int) -> bool:
    """Whether ``offset`` (where a line's text starts) lies inside one of ``spans`` (sorted, disjoint)."""
    i = bisect.bisect_left(spans, (offset, -1)) - 1
    return i >= 0 and offset < spans[i][1]


def _hidden_lines(text: str, spans: list[tuple[int, int]]) -> set[int]:
    """The lines that start inside a multi-line string (1-based), newlines counted once, in order."""
    hidden: set[int] = set()
    line, at = 1, 0
    for start, end in spans:
        line += text.count("\n", at, start)
        last = line + text.count("\n", start, end - 1)
        hidden.update(range(line + 1, last + 1))
        line, at = last, end - 1
    return hidden


def _scan(text: str, spans: list[tuple[int, int]] | None = None) -> dict[tuple[Any, ...], int]:
    """Every header's and ``key =`` line's key path -> line (lines counted by "\n", as TOML counts them)."""
    lines: dict[tuple[Any, ...], int] = {}
    counts: dict[str, int] = {}
    table: tuple[Any, ...] = ()
    hidden = _hidden_lines(text, _multiline_strings(text) if spans is None else spans)
    for no, raw in enumerate(text.split("\n"), start=1):
        if no in hidden:
            continue
        if raw.lstrip()[:1] == "[":  # a header (a key never starts with "["), else perhaps a key
            if h := _HEADER.match(raw):
                table = _header_path(h.group(1) == "[[", h.group(2), counts, table)
                lines.setdefault(table, no)
        elif k := _KEY.match(raw):
            lines.setdefault(table + (k.group(1).strip("\"'"),), no)
    return lines


def _scan_headers(text: str, spans: list[tuple[int, int]]) -> dict[tuple[Any, ...], int]:
    """The table headers' key paths -> line: what ``_scan`` finds for them, visiting only lines that start
    with "[" (10,000 contracts: 10,000 headers among 100,000 lines)."""
    lines: dict[tuple[Any, ...], int] = {}
    counts: dict[str, int] = {}
    table: tuple[Any, ...] = ()
    no, at = 1, 0
    for m in _HEADER_LINE.finditer(text):
        no, at = no + text.count("\n", at, m.start()), m.start()
        if spans and _inside(spans, m.start()):
            continue
        if h := _HEADER.match(m.group()):
            table = _header_path(h.group(1) == "[[", h.group(2), counts, table)
            lines.setdefault(table, no)
    return lines


def _header_path(
    is_array: bool, name: str, counts: dict[str, int], current: tuple[Any, ...]
) -> tuple[Any, ...]:
    parts = [p.strip().strip("\"'") for p in name.split(".")]
    if parts[0] == "contract" and len(parts) > 1:
        # [contract.tolerance] or [[contract.waiver]] belong to the latest [[contract]]
        idx = counts.get("contract", 0) - 1
        path: tuple[Any, ...] = ("contract", idx, *parts[1:])
        if is_array:
            key = f"contract.{idx}." + ".".join(parts[1:])
            counts[key] = counts.get(key, 0) + 1
            path = path + (counts[key] - 1,)
        return path
    if is_array:
        key = ".".join(parts)
        counts[key] = counts.get(key, 0) + 1
        return (*parts, counts[key] - 1)
    return tuple(parts)
