"""Several outputs (kcgate.numerics.outputs): how a reference's and a kernel's results are named, matched,
flattened for the backward's cotangent and split back."""

from __future__ import annotations

import collections

import pytest
import torch

from kcgate.numerics.outputs import (
    OutputsMismatch,
    differentiable,
    flat,
    kernel_parts,
    multiple,
    reference_parts,
    split,
)

A, B = torch.arange(6.0).reshape(2, 3), torch.arange(4.0)
Pair = collections.namedtuple("Pair", ["normed", "res"])


def test_names_come_from_dict_keys_fields_the_outputs_key_or_positions() -> None:
    assert [n for n, _ in reference_parts({"res": B, "out": A}, ())] == ["out", "res"]  # keys sorted
    assert [n for n, _ in reference_parts(Pair(A, B), ())] == ["normed", "res"]
    assert [n for n, _ in reference_parts((A, B), ("out", "residual"))] == ["out", "residual"]
    assert [n for n, _ in reference_parts((A, B), ())] == ["out0", "out1"]


def test_a_declared_count_that_differs_raises_naming_the_key_and_fix() -> None:
    with pytest.raises(
        OutputsMismatch, match=r"outputs = \['out'\] names 1 output, but the reference returns 2"
    ):
        reference_parts((A, B), ("out",))
    with pytest.raises(OutputsMismatch, match="not a tensor"):
        reference_parts((A, 3), ())


def test_a_kernel_is_matched_by_key_and_its_structure_differences_are_said() -> None:
    names = ("out", "residual")
    got, why = kernel_parts({"residual": B, "out": A}, names)
    assert not why and [n for n, _ in got] == ["out", "residual"] and got[1][1] is B
    assert kernel_parts({"out": A}, names)[1].endswith(
        "(missing 'residual'); the reference returns 'out', 'residual'"
    )
    assert "returned 3 outputs, the reference returns 2" in kernel_parts((A, B, A), names)[1]
    assert "returned 1 output," in kernel_parts(A, names)[1]
    assert "'residual' is a NoneType" in kernel_parts((A, None), names)[1]


def test_one_tensor_in_a_tuple_is_one_output_and_a_dict_is_always_several() -> None:
    assert not multiple((A,)) and not multiple(A) and multiple((A, B)) and multiple({"y": A})


def test_flat_and_split_round_trip_and_the_cotangent_reaches_only_float_outputs() -> None:
    x = torch.ones(3, requires_grad=True)
    parts = (("y", (x * 2).reshape(1, 3)), ("ids", torch.tensor([1, 2])), ("z", x.sum()))
    v = flat(parts)
    assert v.shape == (6,)
    back = split(parts, torch.arange(6.0))
    assert (
        back[0][1].tolist() == [[0.0, 1.0, 2.0]]
        and back[1][1].tolist() == [3.0, 4.0]
        and back[2][1].item() == 5
    )
    outs, dys = differentiable(parts, torch.arange(6.0))
    assert len(outs) == 2 and dys[1].item() == 5.0
    (g,) = torch.autograd.grad(outs, [x], dys)
    assert g.tolist() == [5.0, 7.0, 9.0]  # 2·dy_y + dy_z; the indices' share reaches nothing
