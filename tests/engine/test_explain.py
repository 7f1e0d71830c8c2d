"""Explanations by mutating the reference (kcgate/engine/explain.py, issue 48): a sliding window off by one is named
by the one mutation of the user's reference that reproduces it, at its line; a bug no single mutation
reproduces says so; the search never changes a verdict."""

from __future__ import annotations

import pytest
import torch

from kcgate.engine import explain as E
from tests.testing.faults import naming_kernels as K
from tests.testing.faults import semantic as S


def _window(kernel, dtype="float32"):  # type: ignore[no-untyped-def]
    return S.Bug(
        "w", "custom", dtype, (1, 2, 128, 32), kernel, "", "", custom=(K.attn_inputs, K.attn_window_ref)
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_a_window_off_by_one_matches_the_reference_with_its_boundary_moved(seed: int) -> None:
    f = S.diagnose(_window(K.attn_window_33), seed)
    assert f.status == "fail" and f.signature is not None
    assert f.signature.cause == "wrong-semantics", f.signature.summary
    assert f.signature.summary.startswith("matches the reference with >= -> > (mask-boundary), at line ")
    assert "naming_kernels.py (in _attn)" in f.signature.summary


def test_a_bug_no_single_mutation_reproduces_says_so() -> None:
    f = S.diagnose(_window(K.attn_window_31), 0)
    assert f.status == "fail" and f.signature is not None
    assert f.signature.cause == "exceeds-bound"
    assert "no single mutation of the reference reproduces it" in f.signature.summary


def test_the_search_is_bounded_and_keeps_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(E, "MAX_MUTANTS", 2)
    f = S.diagnose(_window(K.attn_window_33), 0)
    assert f.status == "fail" and f.signature is not None
    assert f.signature.cause == "exceeds-bound"
    assert "the first 2 tried" in f.signature.summary


def test_a_correct_kernel_is_never_explained() -> None:
    def right(q, k, v):  # type: ignore[no-untyped-def]
        return K.attn_window_ref(q.double(), k.double(), v.double()).to(q.dtype)

    assert S.diagnose(_window(right), 0).status == "pass"


def test_mutants_are_single_rule_applications_with_their_line() -> None:
    ms = list(E._mutants_of(K._attn, K.attn_window_ref))
    assert ms and all(m.where.startswith("line ") and "(in _attn)" in m.where for m in ms)
    assert {m.rule for m in ms} >= {"mask-boundary", "constant-changed"}
    q = torch.zeros(1, 1, 4, 2, dtype=torch.float64)
    assert all(callable(m.fn) for m in ms) and K.attn_window_ref(q, q, q).shape == q.shape
