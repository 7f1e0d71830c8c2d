"""The runner's step files: GITHUB_OUTPUT (name=value pairs) and GITHUB_STEP_SUMMARY (Markdown)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path


def output_text(values: Mapping[str, str]) -> str:
    """GITHUB_OUTPUT syntax; a value with a newline uses a random heredoc delimiter it cannot contain."""
    out = []
    for name, value in values.items():
        if "\n" in value or "\r" in value:
            delim = f"kcgate_{secrets.token_hex(12)}"
            out.append(f"{name}<<{delim}\n{value}\n{delim}\n")
        else:
            out.append(f"{name}={value}\n")
    return "".join(out)


def append_text(path: str, text: str) -> None:
    """Append to a step file (the runner creates it; several steps may share it)."""
    with Path(path).open("a", encoding="utf-8") as fh:
        fh.write(text)
