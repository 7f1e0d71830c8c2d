"""Held-out set B of issue 46: correct kernels from libraries no earlier set drew on (xformers, apex, llm.c,
Meta's llama, Liger's Gemma norm), written on 2026-12-07 before any of them ran through kcgate and while the
bounds and the gate were being changed elsewhere. Committed before its first run; what fails here is counted
apart from what the changes were tuned on (tests/testing/kernels/correct.py and heldout.py).

Each is rewritten from the library's source as it ships (none of them is installed here); the docstring names
the function and what it rounds where. The shapes are odd on purpose: prime lengths, head dims that are not
powers of two, rows that are not multiples of a block.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tests.testing.kernels.correct import DT3, Entry

EPS = 1e-5  # llm.c's and apex's layer-norm eps, torch's default
RMS_EPS = 1e-6  # transformers' default for the Llama/Gemma norms; kcgate's rmsnorm reads it from its params

# ---- attention ------------------------------------------------------------------------------------------


def _repeat(t: torch.Tensor, h: int) -> torch.Tensor:
    return t if t.shape[-3] == h else t.repeat_interleave(h // t.shape[-3], dim=-3)


def xformers_ref_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    """xformers' ``ref_attention`` (tests/test_mem_eff_attention.py): ``q = q * scale``, ``attn = q @ kᵀ``,
    a ``LowerTriangularMask`` materialised as −inf above the diagonal (top-left), ``attn.softmax(-1)`` and
    ``attn @ v``, every step in the input dtype (its own tests compare it with a tolerance per dtype)."""
    h = q.shape[-3]
    k, v = _repeat(k, h), _repeat(v, h)
    scale = kw.get("scale") or 1 / q.shape[-1] ** 0.5
    attn = (q * scale) @ k.transpose(-2, -1)
    if kw.get("is_causal"):
        hide = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
        attn = attn.masked_fill(hide, float("-inf"))
    return attn.softmax(-1) @ v


def llmc_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    """llm.c's ``attention_forward`` (train_gpt2.c), vectorised: in fp32, ``preatt = q·k * 1/sqrtf(hs)``, the
    running ``maxval``, ``expsum += expf(preatt − maxval)``, ``att = expv * (1/expsum)`` with zeros past the
    causal boundary, then ``out = Σ att·v``; the result rounded once to the input dtype."""
    h = q.shape[-3]
    k, v = _repeat(k, h), _repeat(v, h)
    q32, k32, v32 = q.float(), k.float(), v.float()
    scale = kw.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    pre = (q32 @ k32.transpose(-2, -1)) * scale
    if kw.get("is_causal"):
        pre = pre.masked_fill(torch.ones(pre.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    maxval = pre.amax(-1, keepdim=True)
    expv = torch.exp(pre - maxval)
    att = expv * (1.0 / expv.sum(-1, keepdim=True))
    return (att @ v32).to(q.dtype)


# ---- rms norm -------------------------------------------------------------------------------------------


def apex_manual_rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """apex's ``manual_rms_norm`` (apex/normalization/fused_layer_norm.py): ``variance = x.float().pow(2)
    .mean(-1)``, ``x = x * rsqrt(variance + eps)`` (an fp32 product by promotion), converted to the weight's
    dtype when that is 16-bit, then ``weight * x``."""
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    y = x * torch.rsqrt(variance + RMS_EPS)
    if w.dtype in (torch.float16, torch.bfloat16):
        y = y.to(w.dtype)
    return w * y


def liger_gemma_rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Liger's test reference ``GemmaRMSNorm`` (test/transformers/test_rms_norm.py, from transformers'
    Gemma): ``x̂ = x.float() * rsqrt(mean(x²) + eps)``, ``x̂ * (1 + w.float())`` in fp32, ``type_as(x)``."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + RMS_EPS)
    return (h * (1.0 + w.float())).type_as(x)


# ---- layer norm: llm.c's forward and its hand-written backward -------------------------------------------


class _LlmcLayerNorm(torch.autograd.Function):
    """llm.c's ``layernorm_forward`` / ``layernorm_backward`` (train_gpt2.c) in fp32: ``m = Σx/C``,
    ``v = Σ(x − m)²/C``, ``s = 1/sqrtf(v + 1e-5)``, ``out = (x − m)·s·w + b``; backward ``dnorm = w·dout``,
    ``dnorm_mean = Σdnorm/C``, ``dnorm_norm_mean = Σ dnorm·norm/C``, ``dx = (dnorm − dnorm_mean −
    norm·dnorm_norm_mean)·s``, ``dw = Σ norm·dout``, ``db = Σ dout``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, n = x.float(), x.shape[-1]
        m = a.sum(-1, keepdim=True) / n
        xshift = a - m
        s = 1.0 / torch.sqrt((xshift * xshift).sum(-1, keepdim=True) / n + EPS)
        norm = xshift * s
        ctx.save_for_backward(norm, s, w)
        return (norm * w.float() + b.float()).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        norm, s, w = ctx.saved_tensors
        g, n = dout.float(), norm.shape[-1]
        dnorm = w.float() * g
        dnorm_mean = dnorm.sum(-1, keepdim=True) / n
        dnorm_norm_mean = (dnorm * norm).sum(-1, keepdim=True) / n
        dx = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s
        rows = g.reshape(-1, n)
        dw = (rows * norm.reshape(-1, n)).sum(0)
        return dx.to(dout.dtype), dw.to(w.dtype), rows.sum(0).to(w.dtype)


def llmc_layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """llm.c's layer norm with its own backward (``_LlmcLayerNorm``)."""
    return _LlmcLayerNorm.apply(x, w, b)  # type: ignore[no-any-return]


# ---- rope: Meta's llama, complex rotation of interleaved pairs -------------------------------------------


def meta_llama_rope(
    q: torch.Tensor, k: torch.Tensor, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Meta's llama ``precompute_freqs_cis`` + ``apply_rotary_emb`` (llama/model.py): ``freqs = 1/(theta **
    (arange(0, dim, 2)[: dim // 2].float() / dim))``, ``outer(arange(end), freqs)`` in fp32,
    ``freqs_cis = polar(ones, freqs)``; ``view_as_complex(x.float().reshape(..., -1, 2)) * freqs_cis``,
    ``view_as_real(...).flatten``, ``type_as(x)``: interleaved pairs (GPT-J layout), in (b, h, s, d)."""
    d, length = q.shape[-1], q.shape[-2]
    freqs = 1.0 / (base ** (torch.arange(0, d, 2)[: d // 2].float() / d))
    angles = torch.outer(torch.arange(length, dtype=torch.float32), freqs)
    freqs_cis = torch.polar(torch.ones_like(angles), angles)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(xc * freqs_cis).flatten(-2).type_as(x)

    return rotate(q), rotate(k)


# ---- gelu (tanh) and cross-entropy: llm.c ------------------------------------------------------------------


_GELU_SCALING = math.sqrt(2.0 / math.pi)


class _LlmcGelu(torch.autograd.Function):
    """llm.c's ``gelu_forward`` / ``gelu_backward`` (train_gpt2.c) in fp32: ``0.5·x·(1 + tanhf(s·(x +
    0.044715·x³)))``; backward ``local_grad = 0.5·(1 + tanh_out) + x·0.5·sech²·s·(1 + 3·0.044715·x²)`` with
    ``sech² = 1/coshf(tanh_arg)²``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        a = x.float()
        ctx.save_for_backward(x)
        return (0.5 * a * (1.0 + torch.tanh(_GELU_SCALING * (a + 0.044715 * a * a * a)))).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        a = x.float()
        cube = 0.044715 * a * a * a
        tanh_arg = _GELU_SCALING * (a + cube)
        tanh_out = torch.tanh(tanh_arg)
        sech = 1.0 / torch.cosh(tanh_arg)
        local = 0.5 * (1.0 + tanh_out) + a * 0.5 * sech * sech * _GELU_SCALING * (
            1.0 + 3.0 * 0.044715 * a * a
        )
        return (local * dout.float()).to(dout.dtype)


def llmc_gelu(x: torch.Tensor) -> torch.Tensor:
    """llm.c's tanh gelu with its own backward (``_LlmcGelu``)."""
    return _LlmcGelu.apply(x)  # type: ignore[no-any-return]


def llmc_cross_entropy(logits: torch.Tensor, target: torch.Tensor, **kw: Any) -> torch.Tensor:
    """llm.c's ``softmax_forward`` + ``crossentropy_forward`` (train_gpt2.c) in fp32: ``maxval``,
    ``probs = expf(x − maxval) / sum``, ``loss = −logf(probs[target])``; the mean over the rows not ignored
    (llm.c has no ignore index: rows are masked as Liger's reference masks them)."""
    ignore = int(kw.get("ignore_index", -100))
    x = logits.float()
    expv = torch.exp(x - x.amax(-1, keepdim=True))
    probs = expv / expv.sum(-1, keepdim=True)
    keep = target != ignore
    loss = torch.where(keep, -torch.log(probs.gather(1, target.clamp(0)[:, None])[:, 0]), 0.0)
    if kw.get("reduction", "mean") == "mean":
        loss = loss.sum() / keep.sum().clamp_min(1)
    return loss.to(logits.dtype)


# ---- the entries: odd declared shapes, forward and backward --------------------------------------------------

_M = "tests.testing.kernels.heldout_b"
_EPS_RMS = ("eps", RMS_EPS)
HELD_OUT_B: tuple[Entry, ...] = (
    Entry(
        "xformers-ref-attention",
        "attention",
        "xformers_ref_attention",
        "eager16",
        (1, 3, 3, 97, 40),
        backward=True,
        module=_M,
    ),
    Entry(
        "xformers-ref-attention-causal-gqa",
        "attention",
        "xformers_ref_attention",
        "eager16",
        (2, 6, 2, 61, 24),
        params=(("causal", True),),
        backward=True,
        module=_M,
    ),
    Entry(
        "llmc-attention-causal",
        "attention",
        "llmc_attention",
        "upcast",
        (1, 5, 5, 67, 48),
        params=(("causal", True),),
        backward=True,
        module=_M,
    ),
    Entry(
        "llmc-attention-lq-ne-lk",
        "attention",
        "llmc_attention",
        "upcast",
        (1, 4, 2, 89, 72),
        params=(("causal", True), ("q_len", 23)),
        backward=True,
        module=_M,
    ),
    Entry(
        "apex-manual-rmsnorm",
        "rmsnorm",
        "apex_manual_rmsnorm",
        "eager16",
        (37, 1000),
        params=(_EPS_RMS,),
        backward=True,
        module=_M,
    ),
    Entry(
        "liger-gemma-rmsnorm",
        "rmsnorm",
        "liger_gemma_rmsnorm",
        "upcast",
        (19, 1536),
        params=(_EPS_RMS, ("weight_offset", 1.0), ("casting_mode", "gemma")),
        backward=True,
        module=_M,
    ),
    Entry("llmc-layernorm", "layernorm", "llmc_layernorm", "textbook", (29, 771), backward=True, module=_M),
    Entry(
        "meta-llama-rope",
        "rope",
        "meta_llama_rope",
        "upcast",
        (1, 6, 2, 77, 48),
        params=(("cos_sin", False), ("layout", "gptj")),
        backward=True,
        module=_M,
    ),
    Entry(
        "llmc-gelu-tanh",
        "gelu",
        "llmc_gelu",
        "textbook",
        (53, 389),
        params=(("approximate", "tanh"),),
        backward=True,
        module=_M,
    ),
    Entry(
        "llmc-cross-entropy",
        "cross_entropy",
        "llmc_cross_entropy",
        "textbook",
        (23, 5003),
        backward=True,
        module=_M,
    ),
)
__all__ = ["DT3", "HELD_OUT_B"]
