"""Zero false alarms at odd shapes (issue 46): library kernels that are correct, at the shapes kcgate adds
(boundary shapes) and at odd declared ones, pass the sensitivity gate and the bounds.

The kernels are tests/testing/kernels/heldout.py's, kept apart from the corpus the gate's line was drawn on
(tests/testing/kernels/correct.py); each case is one the issue reported failing (message, ratio and shape
in its docstring). Every case runs in process with its boundary shape, as ``kcgate run`` plans it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.contracts.load import load_project
from kcgate.devices.cpu import CpuBackend
from kcgate.engine import torch_state
from kcgate.engine.case import execute_case
from kcgate.plan import make_plan
from tests.conftest import ROOT

K = "tests.testing.kernels.heldout"


def _contract(
    kernel: str, op: str, klass: str, dtype: str, shape: list[int], *more: str, module: str = K
) -> str:
    lines = [
        "[[contract]]",
        f'id = "{kernel}-{dtype}"',
        f'class = "{klass}"',
        f'kernel = "{module}:{kernel}"',
        f'op = "{op}"',
        f'dtypes = ["{dtype}"]',
        f"shapes = [{shape}]",
        *more,
    ]
    return "\n".join(lines) + "\n"


def _failures(tmp_path: Path, text: str, seeds: range) -> tuple[list[str], set[tuple[int, ...]]]:
    f = tmp_path / "c.toml"
    f.write_text(f'[project]\npaths = ["{ROOT}"]\n\n' + text)
    project = load_project(f)
    torch_state.capture()
    try:
        results = [
            execute_case(project, c, CpuBackend())
            for s in seeds
            for c in make_plan(project, s, {}, boundary=True)
        ]
    finally:
        torch_state._active = None
    bad = [f"seed {r.seed} {r.shape}: {r.status}: {r.message}" for r in results if r.status != "pass"]
    return bad, {r.shape for r in results}


def test_textbook_layernorm_with_large_means_passes_at_its_boundary_shape(tmp_path: Path) -> None:
    """Before: "forward output: error 2.04x / 2.33x / 1.86x a correct implementation's" at 3x1021 on 3 of 4
    seeds, at 0.7% of the bound (the tutorial's Σx rounds at |Σx| ~ 1e7: one shared error per row)."""
    text = _contract(
        "textbook_layernorm", "layernorm", "C-PRC-02", "float32", [64, 1024], 'distribution = "large-mean"'
    )
    bad, shapes = _failures(tmp_path, text, range(4))
    assert (3, 1021) in shapes
    assert bad == []


def test_textbook_layernorm_backward_passes_at_3x761(tmp_path: Path) -> None:
    """Before: 1.54x and 1.82x at the boundary shape 3x761 of a declared 64x768, direction = "both"."""
    text = _contract(
        "textbook_layernorm", "layernorm", "C-PRC-01", "float32", [64, 768], 'direction = "both"'
    )
    bad, shapes = _failures(tmp_path, text, range(3))
    assert (3, 761) in shapes
    assert bad == []


def test_rope_with_fp32_angles_passes_at_its_boundary_shape(tmp_path: Path) -> None:
    """transformers' rope, angles positions·inv_freq in fp32 at run time: before, 1.56x and 1.57x at its
    boundary shape on both seeds, at budget 0.65 (the composite takes its angles from fp64)."""
    text = _contract(
        "hf_rope_runtime_angles",
        "rope",
        "C-CMP-01",
        "float32",
        [1, 8, 2, 128, 64],
        "params = { cos_sin = false }",
    )
    bad, shapes = _failures(tmp_path, text, range(3))
    assert len(shapes) == 2
    assert bad == []


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_flash_attention_ref_passes_at_an_odd_head_dim(tmp_path: Path, dtype: str) -> None:
    """flash-attention's ``attention_ref(upcast=False)`` at a declared 1x4x1x113x59: before, "error 1.65x /
    1.98x the least accurate correct formulation's" in bf16 (q/√59 rounds in bf16 before the dot product)."""
    text = _contract("flash_attention_ref", "attention", "C-PRC-01", dtype, [1, 4, 1, 113, 59])
    bad, _ = _failures(tmp_path, text, range(3))
    assert bad == []


@pytest.mark.parametrize("kernel", ["vllm_ref_attention", "hf_eager_attention"])
def test_gqa_causal_attention_and_its_gradients_pass_at_an_odd_shape(tmp_path: Path, kernel: str) -> None:
    """vLLM's and transformers' eager GQA causal attention in fp16 at 1x4x1x113x59, forward and backward:
    before, "gradient of 'q': error 1.46x the allowed bound" (the bound, not the gate)."""
    text = _contract(
        kernel,
        "attention",
        "C-PRC-01",
        "float16",
        [1, 4, 1, 113, 59],
        "params = { causal = true }",
        'direction = "both"',
    )
    bad, _ = _failures(tmp_path, text, range(3))
    assert bad == []


def test_gqa_causal_attention_with_fewer_queries_than_keys_passes(tmp_path: Path) -> None:
    """Lq != Lk (a chunked prefill: 37 queries on 113 keys), causal aligned top-left as transformers' mask."""
    text = _contract(
        "hf_eager_attention",
        "attention",
        "C-PRC-01",
        "float16",
        [1, 4, 1, 113, 59],
        "params = { causal = true, q_len = 37 }",
        'direction = "both"',
    )
    bad, _ = _failures(tmp_path, text, range(2))
    assert bad == []


def test_rope_with_fp32_angles_passes_at_an_odd_head_dim_and_a_long_length(tmp_path: Path) -> None:
    """Issue 46's benchmark, seed 0: C-CMP-03's held-out shape 1x7x2x1016x68 failed at budget 1.46 (the
    exponent 2i/68 rounds in fp32 and base^(-x) turns it into ln(base)·x·u of each angle: 5-6u·θ, not 4u)."""
    text = _contract(
        "hf_rope_runtime_angles",
        "rope",
        "C-CMP-01",
        "float32",
        [1, 7, 2, 1016, 68],
        "params = { cos_sin = false }",
    )
    bad, _ = _failures(tmp_path, text, range(1))
    assert bad == []


def test_eager_bf16_gqa_causal_gradient_passes_with_dp_rounded_to_bf16(tmp_path: Path) -> None:
    """Issue 46's benchmark, seed 0: vLLM's reference, bf16, C-CMP-02 at 1x4x1x113x59 failed dQ at 1.44x its
    bound (query row 1, two keys): the eager backward rounds dP = dY·Vᵀ to bf16, which the bound did not
    charge."""
    text = _contract(
        "vllm_ref_attention",
        "attention",
        "C-CMP-02",
        "bfloat16",
        [1, 4, 1, 113, 59],
        "params = { causal = true }",
        'direction = "both"',
    )
    bad, _ = _failures(tmp_path, text, range(1))
    assert bad == []


def test_eager_bf16_gqa_gradient_with_fewer_queries_is_not_refused(tmp_path: Path) -> None:
    """Issue 46's benchmark, seed 0: transformers' eager GQA causal with 37 queries on 113 keys, bf16, was
    refused ("allowed error / output = 1.22", dK): D's error was charged as Σ_d |dY|·bound(O), not carried
    through dY (docs/ops.md#attention)."""
    text = _contract(
        "hf_eager_attention",
        "attention",
        "C-PRC-01",
        "bfloat16",
        [1, 4, 1, 113, 59],
        "params = { causal = true, q_len = 37 }",
        'direction = "both"',
    )
    bad, _ = _failures(tmp_path, text, range(1))
    assert bad == []


def test_a_max_shifted_cross_entropy_gradient_is_neither_failed_nor_refused_in_bf16(tmp_path: Path) -> None:
    """Held-out set B's llm.c cross-entropy (autograd through a max shift): the row maximum's allowance for
    the shift's gradient is a sum's rounding in the accumulator; in the 16-bit compute precision it made the
    gradient's allowance 4.4x its size, and every bf16 case was refused ("tolerance exceeds the signal")."""
    text = _contract(
        "llmc_cross_entropy",
        "cross_entropy",
        "C-CMP-01",
        "bfloat16",
        [23, 5003],
        'direction = "both"',
        module="tests.testing.kernels.heldout_b",
    )
    bad, shapes = _failures(tmp_path, text, range(1))
    assert not bad, bad
    assert (3, 4999) in shapes  # the boundary shape ran too


def test_flash_attention_ref_with_q_scaled_in_fp16_passes_at_a_head_dim_of_17(tmp_path: Path) -> None:
    """Issue 46's benchmark, odd shapes, seed 1: flash-attention's ``attention_ref(upcast=False)`` in fp16
    failed C-CMP-03 at its held-out shape 256x447x1x2x17 (budget 1.01): q/√17 rounds in fp16 before the dot
    product, a deviation the bound did not charge (1.09-1.39 of it on raw N(0, 1) draws, 0.74-0.83 with it)."""
    text = _contract("flash_attention_ref", "attention", "C-PRC-01", "float16", [256, 447, 1, 2, 17])
    bad, _ = _failures(tmp_path, text, range(2))
    assert bad == []


def test_large_mean_layernorm_gradient_is_not_refused_at_its_odd_shape(tmp_path: Path) -> None:
    """Issue 46's benchmark, tuned corpus, odd shapes, seed 2: the tutorial's two-pass layer norm with large
    means, C-PRC-01 fp32 both at 61x1021, was refused ("allowed error / output = 1", dw): the mean's rounding,
    one shift of a whole row of x̂, was charged to dw as Σ_rows |dy|·shift and to dx as a relative error of
    1/σ (‖allowed‖/‖dw‖ 0.95-1.01, ‖allowed‖/‖dx‖ 0.88; now 0.14-0.17 and 0.22-0.26)."""
    from benchmarks.false_alarms import odd_shape
    from tests.testing.kernels.correct import toml
    from tests.testing.kernels.heldout import HELD_OUT

    e = next(x for x in HELD_OUT if x.name == "tutorial-layernorm-large-mean")
    bad, shapes = _failures(tmp_path, toml(e, "C-PRC-01", "float32", "both", shape=odd_shape(e)), range(2, 3))
    assert (61, 1021) in shapes
    assert bad == []
