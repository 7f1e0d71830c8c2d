"""Semantic signatures (kcgate/engine/transforms.py, issue 33): each bug of tests/testing/faults/semantic.py fails and
is named by the transformation it is, with the fitted value, the same cause on every seed; the fits say nothing
where the error is not that transformation."""

from __future__ import annotations

import pytest
import torch

from kcgate.engine import transforms as T
from tests.testing.faults import semantic as S

SEEDS = (0, 1, 2)
QUICK = ("gelu-no-half", "matmul-acc-overwrite", "sum-drops-tail", "softmax-other-zero", "softmax-bf16-sum")


def _named(bug: S.Bug, seed: int) -> tuple[str, str, str]:
    finding = S.diagnose(bug, seed)
    sig = finding.signature
    return finding.status, sig.cause if sig else "", sig.summary if sig else finding.message


@pytest.mark.parametrize("bug_id", QUICK)
def test_quick_bugs_named_with_their_fitted_value(bug_id: str) -> None:
    bug = next(b for b in S.SEMANTIC if b.id == bug_id)
    for seed in (0, 1):
        status, cause, summary = _named(bug, seed)
        assert (status, cause) == ("fail", bug.cause), summary
        assert bug.says in summary


@pytest.mark.slow
@pytest.mark.parametrize("bug", S.SEMANTIC, ids=lambda b: b.id)
def test_every_semantic_bug_is_named_right_on_every_seed(bug: S.Bug) -> None:
    got = [_named(bug, s) for s in SEEDS]
    assert all(status == "fail" for status, _, _ in got), got
    assert {cause for _, cause, _ in got} == {bug.cause}, got
    assert all(bug.says in summary for _, _, summary in got), got


def test_clean_needs_the_fit_to_explain_the_error() -> None:
    ref = torch.linspace(-1, 1, 100, dtype=torch.float64)
    allowed = torch.full_like(ref, 1e-6)
    out = 2 * ref
    assert T.clean(out, ref, 2 * ref, allowed) == 0.0
    noisy = out + 0.5 * torch.randn(100, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert T.clean(noisy, ref, 2 * ref, allowed) is None  # the residual is a large share of the error
    few = out.clone()
    few[0] += 1.0  # one element of 100 off: more than the 1% allowed past the budget
    few[1] += 1.0
    assert T.clean(few, ref, 2 * ref, allowed) is None


def test_on_grid_tells_bf16_values_from_fp32_ones() -> None:
    g = torch.Generator().manual_seed(1)
    v = torch.rand(1000, generator=g, dtype=torch.float64) * 100 + 1
    assert bool(T.on_grid(v.to(torch.bfloat16).to(torch.float64), torch.bfloat16, 8).all())
    share = float(T.on_grid(v.float().double(), torch.bfloat16, 8).float().mean())
    assert 0.3 < share < 0.5  # chance: 2 × GRID_TOL


def test_a_correct_kernel_with_noise_gets_no_semantic_name() -> None:
    """Diffuse noise on the right softmax is not a scale, a tail or a bf16 sum."""

    def noisy(x: torch.Tensor) -> torch.Tensor:
        y = torch.softmax(x.double(), -1)
        g = torch.Generator().manual_seed(int(x.abs().sum().item() * 1e3) % 2**31)
        return (y * (1 + 0.01 * torch.randn(y.shape, generator=g, dtype=torch.float64))).to(x.dtype)

    bug = S.Bug("noisy-softmax", "softmax", "float32", (32, 256), noisy, "noise", "")
    for seed in (0, 1):
        status, cause, _ = _named(bug, seed)
        assert status == "fail"
        assert cause not in {"scaled-output", "sign-scaled", "masked-tail", "low-precision-reduction"}
