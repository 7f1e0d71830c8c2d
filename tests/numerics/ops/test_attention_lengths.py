"""Attention with fewer (or more) queries than keys (params.q_len) and the causal alignment as a parameter
(params.causal_align): the oracle implements top-left (torch's sdpa) and bottom-right (FlashAttention >= 2.1);
a kernel with the wrong alignment fails where the lengths differ and is named by the mistake."""

from __future__ import annotations

import pytest
import torch

from kcgate.numerics.ops import OPS
from tests.testing.faults import semantic as S

F = torch.nn.functional


def _bug(kernel, align: str, q_len: int, shape=(1, 4, 2, 128, 64), dtype="float32") -> S.Bug:  # type: ignore[no-untyped-def]
    params = (("causal", True), ("causal_align", align), ("q_len", q_len))
    return S.Bug(f"{align}-{q_len}", "attention", dtype, shape, kernel, "", "", params=params)


def test_the_oracle_implements_both_alignments() -> None:
    g = torch.Generator().manual_seed(0)
    for align in ("top-left", "bottom-right"):
        fam = OPS["attention"].configure({"causal": True, "causal_align": align, "q_len": 1})  # type: ignore[misc]
        q, k, v = fam.make_inputs((1, 2, 2, 32, 16), torch.float64, g, "normal")
        assert q.shape[-2] == 1 and k.shape[-2] == 32
        want = (
            F.scaled_dot_product_attention(q, k, v, is_causal=True)  # top-left: the one query sees key 0
            if align == "top-left"
            else F.scaled_dot_product_attention(q, k, v)  # bottom-right: a decode step sees every key
        )
        assert torch.allclose(fam.oracle(q, k, v), want)


@pytest.mark.parametrize("q_len", [1, 16])
def test_a_top_left_kernel_fails_where_bottom_right_is_declared(q_len: int) -> None:
    for seed in (0, 1):
        finding = S.diagnose(_bug(S.sdpa_top_left, "bottom-right", q_len), seed)
        assert finding.status == "fail"
        assert finding.signature is not None and finding.signature.cause == "wrong-semantics"
        assert "aligned top-left where bottom-right is declared" in finding.signature.summary


@pytest.mark.parametrize(
    ("kernel", "align"), [(S.attention_bottom_right, "bottom-right"), (S.sdpa_top_left, "top-left")]
)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_right_alignment_passes_decode_and_chunks(kernel, align: str, dtype: str) -> None:  # type: ignore[no-untyped-def]
    for q_len in (1, 16):
        finding = S.diagnose(_bug(kernel, align, q_len, dtype=dtype), 0)
        assert finding.status == "pass", finding.message


def test_equal_lengths_cannot_tell_the_alignments_apart() -> None:
    assert S.diagnose(_bug(S.sdpa_top_left, "bottom-right", 0), 0).status == "pass"
