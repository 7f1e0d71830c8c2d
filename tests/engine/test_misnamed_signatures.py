"""The misnamings issue 33 lists for real bugs (tests/testing/faults/misnamed.py): each now fails with its own
cause and the fitted value, the same cause on five seeds (one bug, one row in the PR comment); and the fits
that name them say nothing where the error is not their transformation."""

from __future__ import annotations

import pytest
import torch

from kcgate.engine import accumulator as A
from kcgate.engine import diagnosis as D
from kcgate.engine import transforms as T
from tests.testing.faults import semantic as S
from tests.testing.faults.misnamed import MISNAMED

SEEDS = (0, 1, 2, 3, 4)
QUICK = (
    "sum-next-row",
    "log-softmax-forgets-max",
    "sum-even-lanes",
    "rmsnorm-first-tile",
    "ce-mean-over-all-rows",
)


def _named(bug: S.Bug, seed: int) -> tuple[str, str, str]:
    finding = S.diagnose(bug, seed)
    sig = finding.signature
    return finding.status, sig.cause if sig else "", sig.summary if sig else finding.message


@pytest.mark.parametrize("bug_id", QUICK)
def test_quick_misnamed_bugs_get_their_own_name(bug_id: str) -> None:
    bug = next(b for b in MISNAMED if b.id == bug_id)
    status, cause, summary = _named(bug, 0)
    assert (status, cause) == ("fail", bug.cause), summary
    assert bug.says in summary


@pytest.mark.slow
@pytest.mark.parametrize("bug", MISNAMED, ids=lambda b: b.id)
def test_every_misnamed_bug_gets_one_name_on_five_seeds(bug: S.Bug) -> None:
    got = [_named(bug, s) for s in SEEDS]
    assert all(status == "fail" for status, _, _ in got), got
    assert {cause for _, cause, _ in got} == {bug.cause}, got
    assert all(bug.says in summary for _, _, summary in got), got


class _Cmp:
    def __init__(self, out: torch.Tensor, ref: torch.Tensor, allowed: float) -> None:
        self.err = (out - ref).abs()
        self.signed = out - ref
        self.ref = ref
        self.ratio = self.err / allowed


def test_a_tiny_output_wrong_everywhere_is_not_sparse_nor_noise() -> None:
    ref = torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64)
    cmp = _Cmp(ref + torch.tensor([0.3, 0.1, -0.2, 0.4], dtype=torch.float64), ref, 1e-6)
    assert D.sparse_signature(cmp) is None
    assert D.noise_signature(cmp) is None


def test_sparse_still_names_a_few_corrupted_elements() -> None:
    ref = torch.linspace(-1, 1, 400, dtype=torch.float64)
    out = ref.clone()
    out[7] += 1.0
    found = D.sparse_signature(_Cmp(out, ref, 1e-6))
    assert found is not None and found.cause == "sparse"


def test_offset_names_one_constant_per_row_not_blocks_of_8() -> None:
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(16, 64, generator=g, dtype=torch.float64)
    per_row = torch.linspace(-2, 3, 16, dtype=torch.float64)[:, None]
    found = D.offset_signature(per_row.expand(16, 64), ref)
    assert found is not None and "one constant per row" in found.summary
    tiles = torch.linspace(-2, 3, 128, dtype=torch.float64).reshape(16, 8).repeat_interleave(8, 1)
    found = D.offset_signature(tiles, ref)
    assert found is not None and "per block of 8 columns" in found.summary
    assert "every element" in D.offset_signature(torch.full((16, 64), 2.0, dtype=torch.float64), ref).summary


def test_an_accumulator_fit_below_three_bits_names_nothing() -> None:
    ks, nerr = [256, 512, 1024], [0.5, 1.0, 2.0]  # an error as large as the result: no format
    assert A.accumulator_signature(ks, nerr, 24) is None


def test_partial_sums_of_zero_mean_terms_match_the_zero_mean_model() -> None:
    x = torch.randn(64, 1024, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    p = A.partial_sums("sum", [x])
    assert p is not None
    for b in (1, 32, 256):
        assert abs(p[b] / A._rounded(1024, b) - 1) < 0.2  # noqa: SLF001
    pos = A.partial_sums("sum", [x.abs()])
    assert pos is not None and pos[32] > 3 * p[32]  # same-sign partial sums grow like K


def test_row_factors_near_one_are_left_to_the_precision_signatures() -> None:
    """A bf16-kept row statistic scales each row by 1 ± 2⁻⁹: not scaled-rows."""
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(32, 256, generator=g, dtype=torch.float64)
    c = 1 + 2.0**-9 * torch.randn(32, 1, generator=g, dtype=torch.float64)
    allowed = torch.full_like(ref, 1e-7)

    class Ctx:
        class op:  # noqa: N801
            name = "rmsnorm"

    assert T.row_factor_fit(Ctx, None, c * ref, ref, allowed) is None
    big = 1 + 0.3 * torch.rand(32, 1, generator=g, dtype=torch.float64)
    found = T.row_factor_fit(Ctx, None, big * ref, ref, allowed)
    assert found is not None and found.cause == "scaled-rows"
