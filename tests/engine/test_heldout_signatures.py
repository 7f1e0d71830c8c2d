"""Two held-out bugs (tests/testing/faults/heldout.py) that were named wrongly on their first run and are named
by their mistake since: a causal mask hiding each query's own key (its first query sees no key, a NaN row: it
was `overflow-nan`, "subtract the row max") and a softmax backward without its y factor (it was `garbage`).
The evidence must fit: NaN rows the mistake does not give stay an overflow, and the wrong backward names no
other failure."""

from __future__ import annotations

import math

import pytest
import torch

from kcgate.engine import mistakes as M
from tests.testing.faults import semantic as S
from tests.testing.faults.heldout import HELD_OUT

F = torch.nn.functional
SEEDS = (0, 1, 2)
BUGS = {bug.id: bug for bug, _ in HELD_OUT}


def _named(bug: S.Bug, seed: int) -> tuple[str, str, str]:
    finding = S.diagnose(bug, seed)
    sig = finding.signature
    return finding.status, sig.cause if sig else "", sig.summary if sig else finding.message


@pytest.mark.parametrize("seed", SEEDS)
def test_a_mask_hiding_its_own_key_is_the_mask_mistake_not_an_overflow(seed: int) -> None:
    status, cause, summary = _named(BUGS["attention-mask-hides-own-key"], seed)
    assert (status, cause) == ("fail", "wrong-semantics"), summary
    assert "each query misses its own key" in summary
    # the evidence (which rows are NaN, and why) and the advice that fits it
    assert "row 0 of each of the 8 (2×4) leading slices is NaN as in that mistake's output" in summary
    assert "keys are all masked" in summary and "mask keys j > i, not j ≥ i" in summary
    assert "subtract the row max" not in summary


@pytest.mark.parametrize("seed", SEEDS)
def test_a_softmax_backward_without_y_is_the_known_wrong_backward(seed: int) -> None:
    status, cause, summary = _named(BUGS["softmax-backward-no-y"], seed)
    assert (status, cause) == ("fail", "wrong-semantics"), summary
    assert summary.startswith("the gradient of x matches the op with its backward's y factor missing"), (
        summary
    )


def _causal_with_nan_row(row: int):  # type: ignore[no-untyped-def]
    """The right causal attention with one query row of every head set to NaN."""

    def kernel(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        out = out.clone()
        out[..., row, :] = float("nan")
        return out

    return kernel


@pytest.mark.parametrize("row", [0, 5])
def test_nan_rows_no_known_mistake_gives_stay_an_overflow(row: int) -> None:
    """Row 0 NaN is the mistake's NaN row, but the other rows are the right ones, not the mistake's (each query
    sees its own key): no mistake explains the output, so the NaN is named as before."""
    bug = S.Bug(
        "nan-row",
        "attention",
        "float32",
        (2, 4, 2, 128, 64),
        _causal_with_nan_row(row),
        "",
        "",
        params=(("causal", True),),
    )
    status, cause, summary = _named(bug, 0)
    assert (status, cause) == ("fail", "overflow-nan"), summary


def test_an_output_nan_nearly_everywhere_matches_no_mistake() -> None:
    """An output NaN where the mistake is NaN, but NaN in most elements, says nothing about which mistake."""
    alt = torch.zeros(4, 8, dtype=torch.float64)
    alt[:3] = math.nan
    out = alt.clone()
    allowed = torch.full_like(alt, 1e-6)
    assert M.budget_against(out, alt, allowed, nonfinite=True) == math.inf
    alt[1:3] = 0.0
    out[1:3] = 0.0
    assert M.budget_against(out, alt, allowed, nonfinite=True) == 0.0  # a NaN quarter, the rest exact
    assert M.budget_against(out, alt, allowed, nonfinite=False) == math.inf  # NaN is a miss unless asked


def _softmax_grad_times(c: float):  # type: ignore[no-untyped-def]
    """softmax whose backward returns c × the right gradient."""

    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            y = torch.softmax(x.float(), -1).to(x.dtype)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, dy):  # type: ignore[no-untyped-def]
            (y,) = ctx.saved_tensors
            return c * y * (dy - (y * dy).sum(-1, keepdim=True))

    return lambda x: Scaled.apply(x)


def test_the_wrong_backward_names_neither_a_right_backward_nor_another_wrong_one() -> None:
    right = S.Bug("softmax-right", "softmax", "float32", (32, 256), _softmax_grad_times(1.0), "", "")
    for seed in (0, 1):
        assert S.diagnose(_backward(right), seed).status == "pass"
        status, cause, summary = _named(_backward(right, _softmax_grad_times(3.0)), seed)
        assert (status, cause) == ("fail", "scaled-output"), summary


def _backward(bug: S.Bug, kernel=None) -> S.Bug:  # type: ignore[no-untyped-def]
    return S.Bug(bug.id, bug.op, bug.dtype, bug.shape, kernel or bug.kernel, "", "", direction="backward")


@pytest.mark.slow
def test_no_held_out_bug_is_named_wrongly() -> None:
    """The measurement docs/signatures.md reports: every held-out bug named right or saying less, none wrong
    (the softmax backward's right set amended after its first run: heldout.AMENDED)."""
    from tests.testing.faults.heldout import measure

    assert [(bug_id, got) for bug_id, got, worst in measure() if worst == "wrong"] == []
