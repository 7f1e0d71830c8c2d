"""Issue 47's held-out shipped bugs outside the families: 11 bugs public libraries shipped and later fixed,
each rebuilt with its fixed twin (tests/testing/faults/shipped_custom_kernels.py) under the contract a new user
writes from docs/custom-op.md alone: op = "custom", the library's reference, no tolerance, fp32 and bf16,
forward and backward where the op is trained through. The causes that name each bug right were written down,
and the set committed, before its first run; ``AMENDED`` lists right sets changed after seeing a run.

``python -m tests.testing.faults.shipped_custom_run [seeds]`` runs it (tests/testing/faults/shipped_custom_run.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.testing.faults import shipped_custom_kernels as K

Fn = Callable[..., Any]
WS = frozenset({"wrong-semantics"})
NONFINITE = frozenset({"overflow", "overflow-nan", "nan-pattern"})


@dataclass(frozen=True)
class Shipped:
    """One shipped bug: the fix cited, the contract's parts, and what counts as naming it right."""

    id: str
    fix: str  # repository and PR that fixed it: the one-line bug
    inputs: Fn
    reference: Fn
    fixed: Fn
    buggy: Fn
    shape: tuple[int, ...]
    right: frozenset[str]  # causes that name the bug right (decided before the first run)
    says: str = ""  # a fragment the summary of a right name must hold
    outputs: tuple[str, ...] = ()  # the contract's ``outputs`` key, for a plain tuple
    backward: bool = True  # direction = "both" (else "forward": inference-only kernels)
    bug_in: tuple[str, ...] = ("forward", "backward")  # the directions the bug changes
    shape_constraints: tuple[tuple[int, str], ...] = ()  # declared up front, as docs/custom-op.md shows
    out_dtype: str = ""  # the contract's out_dtype ("" = the input dtype)


SHIPPED: tuple[Shipped, ...] = (
    Shipped(
        "sglang-jax-topk-scaling-skipped",
        "sgl-project/sglang-jax#1282: routed_scaling_factor applied only inside `if renormalize`, so skipped "
        "when renormalize = False",
        K.route_inputs,
        K.route_ref,
        K.route_fixed,
        K.route_buggy,
        (16, 64),
        # the weights are the right ones times 1/2.5: a dropped constant factor
        frozenset({"scaled-output"}),
        outputs=("topk_weights", "topk_ids"),
    ),
    Shipped(
        "megablocks-top1-norm-over-tokens",
        "databricks/megablocks#87: with top_k = 1, scores.max(dim=-1) drops the expert dimension, so the "
        "expert-weight p-norm divides by a sum over all tokens",
        K.route_inputs,
        K.top1_ref,
        K.top1_fixed,
        K.top1_buggy,
        (16, 8),
        # each token's weight divided by its own wrong normaliser, one taken over the wrong extent (tokens)
        frozenset({"scaled-rows", "wrong-extent"}),
        outputs=("scores", "expert_weights", "expert_indices"),
    ),
    Shipped(
        "quack-prenorm-residual-grad",
        "Dao-AILab/quack#53: RMS PreNorm backward computed (dres_out + dout)·dnorm where dres_out + dout·dnorm "
        "was meant: the residual output's gradient went through the norm's backward",
        K.add_norm_inputs,
        K.add_norm_ref,
        K.add_norm_fixed,
        K.add_norm_buggy,
        (8, 256),
        # a wrong backward formula: the + dres term replaced
        frozenset({"wrong-semantics", "missing-term"}),
        outputs=("out", "residual_out"),
        bug_in=("backward",),
    ),
    Shipped(
        "sgl-xpu-attn-softcap-never-applied",
        "sgl-project/sgl-kernel-xpu#491: flash-attention accepted `softcap` but never applied "
        "softcap·tanh(S/softcap) (Gemma-2's 50)",
        K.attn_inputs,
        K.softcap_ref,
        K.softcap_fixed,
        K.softcap_buggy,
        (1, 2, 64, 32),
        WS,
    ),
    Shipped(
        "mlx-lm-window-one-too-many",
        "ml-explore/mlx-lm#390: create_causal_mask's window kept linds - rinds <= window_size: one key too many",
        K.attn_inputs,
        K.window_ref,
        K.window_fixed,
        K.window_buggy,
        (1, 2, 64, 32),
        WS,
        backward=False,  # mlx-lm is an inference library
    ),
    Shipped(
        "transformers-cb-window-not-applied",
        "huggingface/transformers#41228: continuous batching's build_attention_mask took tril of the causal "
        "mask at +sliding_window: old keys never masked, keys past the window ahead unmasked",
        K.chunk_inputs,
        K.cb_window_ref,
        K.cb_window_fixed,
        K.cb_window_buggy,
        (1, 2, 48, 32),
        WS,
        backward=False,  # the serving path
    ),
    Shipped(
        "llama-cpp-top-p-drops-crossing-token",
        "ggml-org/llama.cpp#1953: top-p kept the largest set with mass <= p (cum_sum > p, last_idx = i) "
        "instead of the smallest with mass >= p",
        K.logits_inputs,
        K.top_p_ref,
        K.top_p_fixed,
        K.top_p_buggy,
        (8, 1000),
        # the nucleus sum counted one term short, so each row renormalised by its own wrong mass
        frozenset({"wrong-extent", "wrong-semantics", "scaled-rows"}),
        backward=False,  # a sampling filter
    ),
    Shipped(
        "gptqmodel-awq-zero-point-underflow",
        "ModelCloud/GPTQModel#2351: AWQ -> ExLlamaV2 repack stored zero - 1, and a zero point of 0 packed as "
        "-1 & 0xF = 15",
        K.dequant_inputs,
        K.dequant_ref,
        K.dequant_fixed,
        K.dequant_buggy,
        (128, 64),
        # every weight of a group whose zero point is 0 shifted by the same multiple of its scale
        frozenset({"offset", "sparse"}),
        shape_constraints=((0, "multiple_of(32)"),),
    ),
    Shipped(
        "vllm-static-fp8-no-clamp",
        "vllm-project/vllm#4570: static_scaled_fp8_quant did not clamp x/scale to ±448, so an activation past "
        "the calibrated scale cast to NaN",
        K.static_fp8_inputs,
        K.static_fp8_ref,
        K.static_fp8_fixed,
        K.static_fp8_buggy,
        (16, 256),
        NONFINITE,
        backward=False,
    ),
    Shipped(
        "hf-kernels-act-quant-zero-block",
        "huggingface/kernels-community#680: finegrained-fp8 act_quant's scale max|x|/448 had no floor: an "
        "all-zero block is 0/0 = NaN",
        K.act_quant_inputs,
        K.act_quant_ref,
        K.act_quant_fixed,
        K.act_quant_buggy,
        (4, 512),
        frozenset({"nan-pattern"}),
        outputs=("y", "scale"),
        backward=False,
        shape_constraints=((1, "multiple_of(128)"),),
    ),
    Shipped(
        "unsloth-logprob-softcap-x-tanh",
        "unslothai/unsloth-zoo#593: the selective log-softmax softcapped as logits·tanh(logits/cap) where "
        "cap·tanh(logits/cap) is meant",
        K.logprob_inputs,
        K.logprob_ref,
        K.logprob_fixed,
        K.logprob_buggy,
        (16, 1000),
        WS,
    ),
)

# Right sets changed after the first run, counted apart (none).
AMENDED: dict[str, frozenset[str]] = {}

# Contract keys added after the first run, counted apart: what a new user writes on reading the failure. Both
# kernels return fp32 log-probabilities or probabilities from bf16 logits, as their libraries (and references)
# do; a single output is held to the input dtype unless out_dtype says otherwise, so the first run failed
# both fixed kernels in bf16 with wrong-dtype ("kernel returned float32, the contract declares bfloat16").
AFTER_FIRST_RUN: dict[str, dict[str, str]] = {
    "llama-cpp-top-p-drops-crossing-token": {"out_dtype": "float32"},
    "unsloth-logprob-softcap-x-tanh": {"out_dtype": "float32"},
}
