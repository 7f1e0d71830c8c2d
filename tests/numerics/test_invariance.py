"""kcgate.numerics.invariance: which inputs a reference is shift- or scale-invariant in, from fp64 runs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kcgate.numerics.derived import in_fp64
from kcgate.numerics.invariance import invariances


def _samples(*shapes: tuple[int, ...]) -> list[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(0)
    return [tuple(torch.randn(s, generator=g).to(torch.bfloat16) for s in shapes) for _ in range(2)]


def _found(ref, *shapes: tuple[int, ...]) -> tuple[tuple[int, str], ...]:  # type: ignore[no-untyped-def]
    return invariances(lambda *a: in_fp64(ref, a), _samples(*shapes))


def test_a_softmax_is_shift_invariant_only() -> None:
    assert _found(lambda x: torch.softmax(x.float(), -1), (8, 16)) == ((0, "offset"),)


def test_a_batch_norm_and_a_layer_norm_are_shift_and_scale_invariant_in_x_not_in_their_weights() -> None:
    def bn(x):  # type: ignore[no-untyped-def]
        h = x.float()
        m = h.mean(0, keepdim=True)
        return ((h - m) * torch.rsqrt((h - m).pow(2).mean(0, keepdim=True) + 1e-5)).to(x.dtype)

    def ln(x, w):  # type: ignore[no-untyped-def]
        return F.layer_norm(x.float(), x.shape[-1:], w.float(), None, 1e-6).to(x.dtype)

    assert _found(bn, (32, 8)) == ((0, "offset"), (0, "scale"))
    assert _found(ln, (8, 64), (64,)) == ((0, "offset"), (0, "scale"))


def test_an_rms_norm_is_scale_invariant_and_a_product_is_neither() -> None:
    def rms(x):  # type: ignore[no-untyped-def]
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

    assert _found(rms, (8, 64)) == ((0, "scale"),)
    assert _found(lambda x, w: x * w, (8, 64), (8, 64)) == ()


def test_a_reference_that_rejects_the_moved_input_claims_nothing() -> None:
    def picky(x):  # type: ignore[no-untyped-def]
        if float(x.abs().max()) > 5:
            raise ValueError("out of range")
        return torch.softmax(x, -1)

    assert _found(picky, (4, 8)) == ()
