"""What crosses from the sandbox to the judge is data: tagged JSON trees and tensor bytes behind checked
descriptors. Hostile trees, descriptors and exception names are refused or made harmless, never executed."""

from __future__ import annotations

import collections
import os

import pytest
import torch

from kcgate.sandbox import client, wire
from kcgate.sandbox.messages import WireError


def _round_trip(value: object) -> object:
    tensors: list[torch.Tensor] = []
    tree = wire.encode(value, lambda t: tensors.append(t) or len(tensors) - 1)
    return wire.decode(tree, lambda i: tensors[i])


def test_values_round_trip_with_their_structure() -> None:
    pair = collections.namedtuple("Pair", ["out", "residual"])
    x = torch.ones(2)
    got = _round_trip({"a": (1, 2.5, None, [True, "s"]), "p": pair(x, x), "d": torch.bfloat16})
    assert isinstance(got, dict) and got["a"] == (1, 2.5, None, [True, "s"]) and got["d"] is torch.bfloat16
    assert type(got["p"]).__name__ == "Pair" and got["p"]._fields == ("out", "residual")
    assert got["p"].out is x


def test_an_object_that_is_not_data_becomes_a_stand_in_of_its_type_name() -> None:
    class Secret:
        def __reduce__(self) -> object:
            raise AssertionError("never pickled")

    got = _round_trip(Secret())
    assert type(got).__name__ == "Secret" and type(got) is not Secret


@pytest.mark.parametrize(
    "tree",
    [
        {"nope": 1},
        {"tu": 3},
        {"di": [[[1], 2]]},
        {"dt": "not_a_dtype"},
        {"nt": "X", "f": ["a", "b"], "v": [1]},
        {"li": [{"li": [{"li": []}]}]} | {"extra": 1},
    ],
)
def test_a_tree_outside_the_protocol_is_refused(tree: object) -> None:
    with pytest.raises(WireError):
        wire.decode(tree, lambda i: torch.zeros(1))


def test_a_tree_nested_too_deep_is_refused() -> None:
    tree: object = 1
    for _ in range(100):
        tree = {"li": [tree]}
    with pytest.raises(WireError):
        wire.decode(tree, lambda i: torch.zeros(1))


def test_bytes_outside_the_sandboxs_arena_are_refused() -> None:
    arena = wire.Arena("test")
    off = arena.put(torch.arange(16, dtype=torch.uint8))
    assert wire.read_bytes(arena.fd, off, 16).tolist() == list(range(16))
    for bad in ((arena.size - 4, 16), (-1, 4), (0, arena.size + 1)):
        with pytest.raises(WireError):
            wire.read_bytes(arena.fd, *bad)
    os.close(arena.fd)


def test_the_judges_arena_cannot_be_shrunk_under_its_mapping() -> None:
    arena = wire.Arena("test")
    arena.put(torch.zeros(8, dtype=torch.uint8))
    with pytest.raises(PermissionError):
        os.ftruncate(arena.fd, 0)
    os.close(arena.fd)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ({"type": "ModuleNotFoundError", "message": "no module x"}, ImportError),
        ({"type": "UnicodeDecodeError", "message": "bad"}, Exception),
        ({"type": "KeyboardInterrupt", "message": ""}, Exception),
        ({"type": "__import__('os')", "message": "x"}, Exception),
        ({"type": "open", "message": "a builtin that is no exception"}, Exception),
        ({"type": "__loader__", "message": "nor a class at all"}, Exception),
        ({"type": "OutOfMemoryError", "message": "cuda"}, torch.OutOfMemoryError),
    ],
)
def test_what_the_kernel_raised_is_raised_here_by_name(error: dict[str, str], kind: type) -> None:
    with pytest.raises(kind) as info:
        client._raise(error)
    assert str(info.value) == error["message"]


@pytest.mark.parametrize("error", [{"type": "open"}, {"type": "__loader__"}, {"type": "exit"}])
def test_a_builtin_that_is_no_exception_type_is_only_a_name(error: dict[str, str]) -> None:
    """The name is looked up in a fixed table of exception types (client._EXCEPTIONS), never as an attribute
    of builtins: ``open`` is an Exception subclass named open, nothing callable the child chose."""
    with pytest.raises(Exception) as info:
        client._raise(error)
    assert type(info.value).__name__ == error["type"] and type(info.value).__mro__[1] is Exception


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_device_is_parsed_as_data(device: str) -> None:
    assert wire.device_of(device) == torch.device(device)


@pytest.mark.parametrize("device", ["no such device", 3, None, "cpu" * 20, "cuda:-5x"])
def test_a_device_that_is_not_one_is_refused(device: object) -> None:
    with pytest.raises(WireError):
        wire.device_of(device)
    with pytest.raises(WireError):
        wire.decode({"dev": device}, lambda i: torch.zeros(1))


def test_sys_exit_in_the_kernel_is_sys_exit_here() -> None:
    with pytest.raises(SystemExit) as info:
        client._raise({"type": "SystemExit", "message": "3", "code": 3})
    assert info.value.code == 3
