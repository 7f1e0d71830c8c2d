"""The derived bound on held-out shipped bugs outside the families (issue 47; tests/testing/faults/
shipped_custom.py, run in full by ``python -m tests.testing.faults.shipped_custom_run``): on a subset, each
fixed kernel passes its no-tolerance custom contract and its buggy twin fails, with the verdict the full run
gives (named right where it was, "says less" where it was)."""

from __future__ import annotations

import pytest

from tests.testing.faults import shipped_custom_run as R
from tests.testing.faults.shipped_custom import SHIPPED

BY_ID = {s.id: s for s in SHIPPED}

# (bug, dtype, direction, the verdict the full run gives at the declared shape, seeds 0 and 1)
SUBSET = (
    ("sglang-jax-topk-scaling-skipped", "bfloat16", "backward", "right"),
    ("mlx-lm-window-one-too-many", "float32", "forward", "right"),
    ("quack-prenorm-residual-grad", "bfloat16", "backward", "less"),
    ("gptqmodel-awq-zero-point-underflow", "bfloat16", "forward", "less"),
    ("unsloth-logprob-softcap-x-tanh", "float32", "forward", "less"),
)


@pytest.mark.parametrize(("bug", "dtype", "direction", "expected"), SUBSET)
def test_fixed_kernel_passes_and_the_shipped_bug_is_caught(
    bug: str, dtype: str, direction: str, expected: str
) -> None:
    s = BY_ID[bug]
    c = R.contract(s, dtype, direction)
    status, cause, summary = R.kcgate_finding(s, c, s.fixed, s.shape, 0)
    assert status == "pass", (cause, summary)
    status, cause, summary = R.kcgate_finding(s, c, s.buggy, s.shape, 0)
    assert R.verdict(s, status, cause, summary) == expected, (status, cause, summary)


def test_every_shipped_bug_cites_its_fix_and_a_right_name() -> None:
    assert len(SHIPPED) == len(BY_ID) >= 8
    for s in SHIPPED:
        assert "#" in s.fix.split(":")[0], s.id  # repository#PR
        assert s.right, s.id


def test_a_correct_fp8_cast_below_the_smallest_normal_passes() -> None:
    """Below e4m3's smallest normal (2^-6) the spacing is fixed, so a correct cast errs up to 2^-10 whatever |y|:
    vLLM's fixed static quantiser failed seed 1 on a bound of u·|y| alone (kcgate.numerics.derived)."""
    s = BY_ID["vllm-static-fp8-no-clamp"]
    status, cause, summary = R.kcgate_finding(s, R.contract(s, "float32", "forward"), s.fixed, s.shape, 1)
    assert status == "pass", (cause, summary)
