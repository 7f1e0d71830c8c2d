"""The error pattern (kcgate.numerics.pattern): ulps of the output dtype at the fp64 value, and the fit of a
kernel's deviation from the reference on a mutant's, with the reference's own error held fixed."""

from __future__ import annotations

import torch

from kcgate.numerics.pattern import NONE, Deviation, ulps


def test_ulps_are_the_dtypes_spacing_at_the_fp64_value_floored_at_the_subnormal_spacing() -> None:
    v = torch.tensor([1.0, 1.5, -0.75, 3e-40, 0.0], dtype=torch.float64)
    got = ulps(v, torch.bfloat16).tolist()
    tiny = torch.finfo(torch.bfloat16).tiny * 2.0**-7
    assert got == [2.0**-7, 2.0**-7, 2.0**-8, tiny, tiny]
    assert ulps(torch.tensor([1.0], dtype=torch.float64), torch.float16).item() == 2.0**-10


def _case(n: int = 20000) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    oracle = torch.randn(n, generator=g, dtype=torch.float64)
    return oracle, (oracle * (1 + 2.0**-12 * torch.randn(n, generator=g, dtype=torch.float64))).bfloat16()


def _noisy(oracle: torch.Tensor, seed: int) -> torch.Tensor:
    """``oracle`` with its own draw of a sub-ulp error, rounded to bf16: a computation as accurate as R."""
    g = torch.Generator().manual_seed(seed)
    return (oracle * (1 + 2.0**-9 * torch.randn(oracle.shape, generator=g, dtype=torch.float64))).bfloat16()


def test_the_mutant_itself_fits_at_one_and_a_kernel_with_its_own_roundings_at_zero() -> None:
    oracle, ref = _case()
    mutant = _noisy(oracle, 1)
    d = Deviation([mutant], [ref], [oracle])
    fit = d.against([mutant])
    assert abs(fit.beta - 1) < 1e-9 and abs(fit.rho - 1) < 1e-9
    other = Deviation([_noisy(oracle, 2)], [ref], [oracle]).against([mutant])
    assert abs(other.beta) < 0.05 and abs(other.rho) < 0.05


def test_the_references_own_error_is_held_fixed_or_every_kernel_would_fit_at_a_half() -> None:
    # K and M both deviate from R by -e_R plus their own independent error: without the projection the two
    # deviations correlate at about one half; with it, at 0
    oracle = torch.randn(20000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    ref, kernel, mutant = _noisy(oracle, 4), _noisy(oracle, 5), _noisy(oracle, 6)
    unit = ulps(oracle, torch.bfloat16)
    dk, dm = (kernel.double() - ref.double()) / unit, (mutant.double() - ref.double()) / unit
    assert float(dk @ dm / (dk.norm() * dm.norm())) > 0.3
    fit = Deviation([kernel], [ref], [oracle]).against([mutant])
    assert abs(fit.rho) < 0.05 and abs(fit.beta) < 0.05


def test_a_mutant_equal_to_the_reference_explains_nothing_and_non_finite_elements_are_left_out() -> None:
    oracle, ref = _case(64)
    kernel = _noisy(oracle, 7)
    assert Deviation([kernel], [ref], [oracle]).against([ref]) == NONE
    kernel[0] = float("nan")
    mutant = kernel.clone()
    mutant[0] = 0.0
    fit = Deviation([kernel], [ref], [oracle]).against([mutant])
    assert abs(fit.beta - 1) < 1e-9 and abs(fit.rho - 1) < 1e-9
