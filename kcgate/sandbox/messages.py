"""The judge's and the sandbox's messages: JSON, length-prefixed on a Unix socket, descriptors riding on a
message's first bytes (SCM_RIGHTS). Torch-free: the judge's worker starts its sandbox before it imports torch.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from typing import Any

MAX_MESSAGE = 64 * 1024 * 1024
_HEADER = struct.Struct("<I")


class WireError(Exception):
    """A message or descriptor from the other side that is not what the protocol allows."""


def send(sock: socket.socket, message: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
    """One message; ``fds`` ride on its first bytes (SCM_RIGHTS)."""
    data = json.dumps(message).encode()
    framed = _HEADER.pack(len(data)) + data
    sent = socket.send_fds(sock, [framed], list(fds)) if fds else 0
    sock.sendall(framed[sent:])


def recv(sock: socket.socket, fds: int = 0) -> dict[str, Any]:
    """The next message; EOFError when the other side is gone, WireError when it sent something else.
    ``fds``: descriptors expected with it, then in the message's ``"_fds"`` (others are closed)."""
    head, got, _flags, _addr = socket.recv_fds(sock, _HEADER.size, max(fds, 1))
    if not head:
        raise EOFError("the other side closed the socket")
    if len(got) != fds:
        for fd in got:
            os.close(fd)
        got = []
        if fds:
            raise WireError(f"expected {fds} descriptors with the message")
    (n,) = _HEADER.unpack(head + _exactly(sock, _HEADER.size - len(head)))
    if n > MAX_MESSAGE:
        raise WireError(f"a message of {n} bytes (over {MAX_MESSAGE})")
    try:
        message = json.loads(_exactly(sock, n))
    except (ValueError, RecursionError):
        raise WireError("a message that is not JSON") from None
    if not isinstance(message, dict):
        raise WireError("a message that is not a JSON object")
    if fds:
        message["_fds"] = got
    return message


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the socket")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
