"""The gradient gate (kcgate.engine.grad_excess): Liger#950's dγ summed in bf16 over blocks of 16 rows, inside
its bound, fails as ``excess-error`` on the gradient of w (tests/testing/faults/shipped_kernels.py); its fix
(shipped_fixed.py), torch's own backward and an fp32 case pass."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.testing.faults import shipped_fixed as FX
from tests.testing.faults.naming_sets_shipped import SHIPPED
from tests.testing.faults.semantic import diagnose

LIGER = next(s.named.bug for s in SHIPPED if s.named.bug.id == "liger-rmsnorm-block-dw-bf16")


def _extra(f: Any) -> dict[str, float]:
    return dict(f.metrics.extra)


@pytest.mark.slow
def test_liger_950_fails_on_the_gradient_of_w_inside_its_bound() -> None:
    f = diagnose(LIGER, 0)
    assert f.status == "fail" and f.signature is not None, f.message
    assert f.signature.cause == "excess-error" and dict(f.signature.evidence)["grad"] == "w", f.signature
    assert f.signature.summary.startswith("gradient of 'w': error 2."), f.signature.summary
    assert _extra(f)["grad_budget.w"] < 1 and 1.5 < _extra(f)["grad_excess.w"] < 3, _extra(f)
    assert "within the bound" in f.message, f.message


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(256, 512), (3, 509)])
def test_the_fix_passes_at_the_declared_and_boundary_shape(shape: tuple[int, int]) -> None:
    fixed = replace(LIGER, kernel=getattr(FX, FX.FIXED[LIGER.id]), shape=shape)
    f = diagnose(fixed, 0)
    assert f.status == "pass", (f.message, f.signature)
    assert 0.8 < _extra(f)["grad_excess.w"] < 1.2, _extra(f)


def _torch_rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, 1e-5)


@pytest.mark.slow
def test_torch_backward_is_one_rounding_and_an_fp32_case_is_not_measured() -> None:
    """torch's backward rounds dγ once: half the model (which allows a rounding of each term); in fp32 the
    gradient's rounding is the accumulator's own, and the gate does not apply."""
    f = diagnose(replace(LIGER, kernel=_torch_rms_norm), 0)
    assert f.status == "pass" and 0.4 < _extra(f)["grad_excess.w"] < 0.6, (f.message, _extra(f))
    f = diagnose(replace(LIGER, kernel=getattr(FX, FX.FIXED[LIGER.id]), dtype="float32"), 0)
    assert f.status == "pass" and not any(k.startswith("grad_excess") for k in _extra(f)), _extra(f)
