"""Escaping for untrusted text rendered into GitHub Markdown (PR comments, summaries, annotations).

Everything that came from a results file is hostile until escaped: no @-mention pings, no raw HTML,
no spoofed links or images, nothing that breaks out of a table cell or a code span.
"""

from __future__ import annotations

import re

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|<>~])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")
_MENTION = re.compile(r"@(?=[A-Za-z0-9_-])")
_URL = re.compile(r"(?i)\b(https?|ftp|mailto|javascript|data):")


def md_text(value: object, limit: int = 300) -> str:
    """Inline Markdown text: one line, specials backslash-escaped, HTML and mentions neutralised."""
    s = _CONTROL.sub("", str(value)).replace("\r", " ").replace("\n", " ")
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    s = s.replace("&", "&amp;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    s = _MENTION.sub("@\u200b", s)  # a zero-width space after @ stops the ping
    return _URL.sub(lambda m: m.group(1) + "\u200b:", s)  # no autolinks


def md_cell(value: object, limit: int = 120) -> str:
    """A table cell: like md_text, and never empty (an empty cell can shift columns in some renderers)."""
    return md_text(value, limit) or " "


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
