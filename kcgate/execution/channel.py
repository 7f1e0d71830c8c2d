"""The worker's result channel: every line is authenticated, so a kernel cannot forge a result.

The parent makes a secret key per worker and a fresh nonce per message, and sends both over the
worker's command pipe (never in argv or the environment). Each line the worker writes is
``<hex HMAC-SHA256(key, nonce + payload)> <payload JSON>``. A line that does not verify, names
another case or is not JSON is a ``ChannelError``: the parent treats the worker as dead (an error for
that case, a fresh worker, the run continues). No torch here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any

MAX_LINE_BYTES = 64 * 1024 * 1024
CASE_MARKER = (
    "--- kcgate case "  # the worker's stderr line as each case starts (the tail of a failure is cut there)
)


class ChannelError(Exception):
    """A line on the result channel that is not the worker's answer to this message."""


def new_key() -> str:
    return secrets.token_hex(32)


def new_nonce() -> str:
    return secrets.token_hex(16)


def _mac(key: str, nonce: str, payload: bytes) -> str:
    return hmac.new(bytes.fromhex(key), nonce.encode() + b"\0" + payload, hashlib.sha256).hexdigest()


def sign(key: str, nonce: str, message: dict[str, Any]) -> bytes:
    """One line for the channel (the worker's side)."""
    payload = json.dumps(message, allow_nan=False).encode()
    return _mac(key, nonce, payload).encode() + b" " + payload + b"\n"


def verify(key: str, nonce: str, line: bytes) -> dict[str, Any]:
    """The message of a signed line (the parent's side); anything else is a ChannelError."""
    mac, _, payload = line.partition(b" ")
    try:
        given = mac.decode("ascii")
    except UnicodeDecodeError:
        given = ""
    if not hmac.compare_digest(given, _mac(key, nonce, payload)):
        raise ChannelError(f"a line that is not the worker's signed answer: {_preview(line)}")
    try:
        message = json.loads(payload)
    except (ValueError, RecursionError):
        raise ChannelError("a signed line that is not JSON") from None
    if not isinstance(message, dict):
        raise ChannelError("a signed line that is not a JSON object")
    return message


def _preview(line: bytes) -> str:
    return repr(line[:120].decode("utf-8", "replace"))
