"""The sandbox server forks each case's child ahead of its case (kcgate.sandbox.server): every case still has a
child of its own that no earlier kernel touched, a spare that died before its case is replaced, and a spare
left when the judge goes dies with the server."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kcgate.sandbox.process import Sandbox


@pytest.fixture
def box() -> Iterator[Sandbox]:
    sandbox = Sandbox()
    sandbox.setup("cpu", 1, 0)
    sandbox.wait_ready()
    yield sandbox
    sandbox.close()


def _children(parent: int) -> set[int]:
    """The live (not zombie) processes whose parent is ``parent``, from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == parent and state != "Z":
            found.add(int(entry.name))
    return found


def _wait_for(predicate: object, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def _one_case(box: Sandbox) -> int:
    """A case that ends at once (the judge closes its socket): the child's pid."""
    sock, pid = box.fork()
    sock.close()
    assert box.ended(kill=False) == "exited with code 0"
    return pid


def _server(box: Sandbox) -> int:
    assert box.proc is not None
    return box.proc.pid


def test_each_case_gets_the_child_forked_ahead_for_it_alone(box: Sandbox) -> None:
    server = _server(box)
    _wait_for(lambda: len(_children(server)) == 1)  # the first case's child, forked before it is asked for
    (spare,) = _children(server)
    first = _one_case(box)
    assert first == spare
    _wait_for(lambda: _children(server) - {first})  # the next one, forked once the last has ended
    (spare,) = _children(server)
    second = _one_case(box)
    assert second == spare != first


def test_a_spare_that_died_before_its_case_is_replaced(box: Sandbox) -> None:
    server = _server(box)
    _wait_for(lambda: len(_children(server)) == 1)
    (spare,) = _children(server)
    os.kill(spare, signal.SIGKILL)
    _wait_for(lambda: not _is_live(spare))  # dead (a zombie of the server's) before its case comes
    assert _one_case(box) != spare


def test_the_spare_dies_with_the_server(box: Sandbox) -> None:
    server = _server(box)
    _wait_for(lambda: len(_children(server)) == 1)
    (spare,) = _children(server)
    box.close()
    _wait_for(lambda: not _children(server) and not _is_live(spare))


def _is_live(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
