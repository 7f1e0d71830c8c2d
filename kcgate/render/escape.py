"""Escaping for untrusted text rendered into GitHub Markdown (PR comments, summaries, annotations).

Everything that came from a results file is hostile until escaped: no @-mention pings, no raw HTML,
no spoofed links or images (``www.`` and bare domains included), nothing that breaks out of a table
cell or a code span, and no GitHub workflow command in console output (``console_text``).
"""

from __future__ import annotations

import re

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|<>~])")
# What no renderer passes through (the one table of it): C0 and C1 controls (tab and newline are each
# format's own business), zero-width and bidi marks, a BOM, and the Unicode line and paragraph separators
# (U+2028, U+2029, NEL), which editors, terminals and some log viewers break lines on.
UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff]")
_CONTROL = UNSAFE
_MENTION = re.compile(r"@(?=[A-Za-z0-9_-])")
_URL = re.compile(r"(?i)\b(https?|ftp|mailto|javascript|data):")
_WWW = re.compile(r"(?i)\bwww\.")
_DOMAIN_DOT = re.compile(r"(?i)(?<=[a-z0-9-])\.(?=[a-z][a-z0-9-]*)")  # "evil.com", "a.b.io"
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_LINE_BREAK = re.compile(r"(\r\n|\r|\n)")  # how the Actions runner splits a step's output into lines
ZWSP = "\u200b"


def strip_unsafe(value: object, replacement: str = "") -> str:
    """``value`` as text with every ``UNSAFE`` character replaced."""
    return UNSAFE.sub(replacement, str(value))


def md_text(value: object, limit: int = 300) -> str:
    """Inline Markdown text: one line, specials backslash-escaped, HTML and mentions neutralised."""
    s = _CONTROL.sub("", str(value)).replace("\r", " ").replace("\n", " ")
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    s = s.replace("&", "&amp;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    s = _MENTION.sub("@\u200b", s)  # a zero-width space after @ stops the ping
    s = _URL.sub(lambda m: m.group(1) + "\u200b:", s)  # no autolinks
    s = _WWW.sub(lambda m: m.group(0)[:3] + ZWSP + ".", s)  # GitHub autolinks "www.x" without a scheme
    return _DOMAIN_DOT.sub("." + ZWSP, s)  # and no bare domain reads as a link either


def md_cell(value: object, limit: int = 120) -> str:
    """A table cell: like md_text, and never empty (an empty cell can shift columns in some renderers)."""
    return md_text(value, limit) or " "


def md_fenced(lines: list[str], info: str = "", indent: str = "") -> list[str]:
    """A fenced code block no line can close: the fence is one backtick longer than any run of backticks
    in ``lines`` (CommonMark), and ``UNSAFE`` characters are dropped (a tab stays)."""
    body = [strip_unsafe(line.replace("\t", "    ")) for line in lines]
    longest = max((len(run) for line in body for run in _BACKTICKS.findall(line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{indent}{fence}{info}", *(f"{indent}{line}" for line in body), f"{indent}{fence}"]


_BACKTICKS = re.compile(r"`+")


def md_code(value: object, limit: int = 120) -> str:
    """An inline code span that cannot be broken out of: backticks and pipes are replaced."""
    s = _CONTROL.sub("", str(value)).replace("\n", " ").replace("\r", " ")
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return "`" + s.replace("`", "ˋ").replace("|", "¦") + "`"


def annotation_text(value: object, limit: int = 1000) -> str:
    """Escape for a workflow command message (::error ...::message)."""
    s = _CONTROL.sub("", str(value))[:limit]
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def annotation_property(value: object, limit: int = 200) -> str:
    """Escape for a workflow command property (file=..., title=...)."""
    return annotation_text(value, limit).replace(":", "%3A").replace(",", "%2C")


def console_text(text: str) -> str:
    """Console output with no GitHub workflow command in it, whatever untrusted field it shows.

    The Actions runner reads a step's stdout and stderr line by line (``\\r`` ends a line too): a line
    whose first non-blank characters are ``::`` is a command (``::error``, ``::stop-commands::``,
    ``::add-mask::``), and so is ``##[`` anywhere in a line (the old syntax). A zero-width space
    breaks both and is invisible in the log.
    """
    parts = _LINE_BREAK.split(text)
    parts[::2] = [_console_line(line) for line in parts[::2]]
    return "".join(parts)


def _console_line(line: str) -> str:
    line = line.replace("##[", "#" + ZWSP + "#[")
    body = line.lstrip()
    if body.startswith("::"):
        at = len(line) - len(body)
        line = line[: at + 1] + ZWSP + line[at + 1 :]
    return line


def json_console_text(text: str) -> str:
    """JSON for a console: ``##[`` (only ever inside a string) written as ``\\u0023#[``, which decodes
    to the same value; a JSON line cannot start with ``::``."""
    return text.replace("##[", "\\u0023#[")


def is_sha(value: object) -> bool:
    """A full hex commit id (SHA-1 or SHA-256): safe to put in markers and URLs."""
    return isinstance(value, str) and bool(_SHA.match(value))
