"""Correct alternative formulations of the families: arithmetic that correct kernels in the wild use and
that is less accurate than torch's own fused kernel (issue 32).

The sensitivity gate (kcgate.engine.sensitivity) compares a kernel's error with what a correct
implementation does on the same inputs. Comparing with torch's fused kernel alone fails correct kernels
that compute the same function another valid way: the saved-logsumexp softmax of flash and Triton kernels
(2.5x torch's fp32 error), cross-entropy as ``logsumexp(x) − x[t]`` (two roundings at the loss's size),
transformers' eager attention (scores rounded to the input dtype), LlamaRMSNorm (the normalised x rounded
to the input dtype before the weight). Each row here is such a formulation, run on the trial's inputs in
the contract's precision (16-bit inputs upcast to float32, as those kernels do, rounded once at the end
unless the original rounds in between); the gate's rms limit is a factor on the least accurate of them.

A formulation takes (op, inputs, call keyword arguments) and returns the output, or None where it does not
apply (a configuration it does not model). Kept to formulations published libraries ship, each named as
the failure message shows it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kcgate.numerics.ops.base import OpFamily, Tensors
from kcgate.numerics.ops.pointwise import Pointwise, identify

Formulation = Callable[[OpFamily, Tensors, dict[str, Any]], "torch.Tensor | None"]


def _wide(t: torch.Tensor) -> torch.Tensor:
    """float32 for 16-bit tensors (the upcast every formulation below starts with), else unchanged."""
    return t.float() if t.is_floating_point() and t.dtype.itemsize < 4 else t


def saved_lse_softmax(op: OpFamily, x: Tensors, kw: dict[str, Any]) -> torch.Tensor:
    """``exp(x − logsumexp(x))``: flash-attention's and Triton softmax kernels' form, from a saved row
    logsumexp. Its relative error is u·|x − lse| per element, 2.2-2.7x torch's in fp32 at n = 1024."""
    a = _wide(x[0])
    return torch.exp(a - torch.logsumexp(a, -1, keepdim=True)).to(x[0].dtype)


def log_softmax_exp(op: OpFamily, x: Tensors, kw: dict[str, Any]) -> torch.Tensor:
    """``log_softmax(x).exp()``: a kernel that keeps log-probabilities (and a loss that shares them)."""
    return torch.log_softmax(_wide(x[0]), -1).exp().to(x[0].dtype)


def lse_cross_entropy(op: OpFamily, x: Tensors, kw: dict[str, Any]) -> torch.Tensor | None:
    """``logsumexp(x) − x[t]`` per row, then the mean over the rows not ignored (Liger's and most fused
    kernels' form): the loss rounds twice at its own size, about one ulp where torch's is nearer half."""
    if kw.get("label_smoothing", 0.0) or kw.get("softcap", 0.0):
        return None
    logits, target = x[0], x[1]
    ignore = int(kw.get("ignore_index", -100))
    a = _wide(logits)
    keep = target != ignore
    picked = a.gather(-1, target.clamp(0, a.shape[-1] - 1)[:, None])[:, 0]
    loss = torch.where(keep, torch.logsumexp(a, -1) - picked, torch.zeros_like(picked))
    if kw.get("reduction", "mean") == "mean":
        loss = loss.sum() / keep.sum().clamp_min(1)
    return loss.to(logits.dtype)


def llama_rmsnorm(op: OpFamily, x: Tensors, kw: dict[str, Any]) -> torch.Tensor | None:
    """transformers' LlamaRMSNorm and vLLM's RMSNorm.forward_native: normalise in float32, round to the
    input dtype, then multiply by the weight in the input dtype (two roundings where torch's has one)."""
    if op.composite is None or len(x) < 2:
        return None
    xs, w = x[0], x[1]
    normed = op.composite(_wide(xs), torch.ones(w.shape, dtype=_wide(w).dtype))
    return w * normed.to(xs.dtype)


def eager_attention(op: OpFamily, x: Tensors, kw: dict[str, Any]) -> torch.Tensor | None:
    """transformers' ``eager_attention_forward``, vLLM's reference attention and flash-attention's
    ``attention_ref(upcast=False)``: scores ``q·kᵀ·scale`` in the input dtype, softmax in float32 rounded
    to the input dtype, then ``p·v``. Dense (b, h, L, d) inputs only (varlen is None)."""
    dense = _dense_kv(x)
    if dense is None:
        return None
    q, k, v = dense
    scale = float(kw.get("scale") or q.shape[-1] ** -0.5)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if kw.get("is_causal") or kw.get("causal"):
        mask = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu(1)  # top-left, as sdpa's
        s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, -1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(p, v)


def _dense_kv(x: Tensors) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(q, k, v) with the kv heads repeated for their query heads (GQA), dense (b, h, L, d) inputs only."""
    if len(x) != 3 or x[0].dim() != 4:
        return None
    q, k, v = x
    h, hk = q.shape[-3], k.shape[-3]
    if hk != h:
        if h % hk:
            return None
        k, v = k.repeat_interleave(h // hk, -3), v.repeat_interleave(h // hk, -3)
    return q, k, v


def _hidden(s: torch.Tensor, kw: dict[str, Any]) -> torch.Tensor | None:
    """The causal mask's hidden keys (top-left, as sdpa's), or None without one."""
    if not (kw.get("is_causal") or kw.get("causal")):
        return None
    return torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu(1)


def flash_attention_ref(op: OpFamily, x: Tensors, kw: dict[str, Any]) -> torch.Tensor | None:
    """flash-attention's ``attention_ref(upcast=False)`` (tests/test_flash_attn.py): ``q / sqrt(d)`` rounded
    to the input dtype *before* the dot product (1/√d is a power of two only for a power-of-four head dim,
    so at d = 59 every q element takes one more rounding), scores in the input dtype, ``softmax(scores)``
    rounded to the input dtype, ``p·v`` (issue 46: 1.65-1.98x the eager form's error in bf16 at d = 59)."""
    qkv = _dense_kv(x)
    if qkv is None:
        return None
    q, k, v = qkv
    scale = float(kw.get("scale") or 0.0)
    s = torch.matmul(q * scale if scale else q / q.shape[-1] ** 0.5, k.transpose(-1, -2))
    hide = _hidden(s, kw)
    if hide is not None:
        s = s.masked_fill(hide, float("-inf"))
    return torch.matmul(torch.softmax(s, -1).to(v.dtype), v)


def vllm_ref_attention(op: OpFamily, x: Tensors, kw: dict[str, Any]) -> torch.Tensor | None:
    """vLLM's ``ref_masked_attention`` (tests/kernels/attention): ``scale * einsum(q, k).float()``, the dot
    product rounded to the input dtype then scaled in float32, softmax in float32 rounded to the input
    dtype, ``p·v``."""
    qkv = _dense_kv(x)
    if qkv is None:
        return None
    q, k, v = qkv
    scale = float(kw.get("scale") or q.shape[-1] ** -0.5)
    s = scale * torch.matmul(q, k.transpose(-1, -2)).float()
    hide = _hidden(s, kw)
    if hide is not None:
        s = s.masked_fill(hide, float("-inf"))
    return torch.matmul(torch.softmax(s, -1).to(v.dtype), v)


def textbook_layernorm(op: OpFamily, x: Tensors, kw: dict[str, Any]) -> torch.Tensor | None:
    """The textbook two-pass layer norm (Triton's layer-norm tutorial, ``_layer_norm_fwd_fused``):
    ``mean = Σx/N``, ``var = Σ(x − mean)²/N``, ``(x − mean)·rstd·w + b`` in float32, rounded once. With
    large means its error is the rounding of Σx (u·|Σx|/N per row, shared by the row), several times
    torch's Welford moments' (issue 46: 2-12x on 3 rows of 1021)."""
    if len(x) != 3:
        return None
    a, w, b = (_wide(t) for t in x)
    n = a.shape[-1]
    xbar = a - a.sum(-1, keepdim=True) / n
    rstd = 1.0 / torch.sqrt((xbar * xbar).sum(-1, keepdim=True) / n + float(kw.get("eps", 1e-5)))
    return (xbar * rstd * w + b).to(x[0].dtype)


def runtime_angle_rope(op: OpFamily, x: Tensors, kw: dict[str, Any]) -> torch.Tensor | None:
    """transformers' ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb`` where the kernel computes the angles
    (``params.cos_sin = false``): ``inv_freq = 1/base^(2i/d)`` and ``positions · inv_freq`` in float32
    (each angle off by about u·θ, up to u·L at position L), cos and sin rounded to the input dtype, the
    rotation in the input dtype. NeoX layout only: for another it computes another function, and the
    gate drops a formulation outside the bound."""
    if "base" not in kw or len(x) != 2:
        return None
    q, k = x
    d, length = q.shape[-1], q.shape[-2]
    inv = 1.0 / (float(kw["base"]) ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    freqs = torch.arange(length, dtype=torch.int64).float()[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)

    def rot(t: torch.Tensor) -> torch.Tensor:
        t1, t2 = t.chunk(2, dim=-1)
        return torch.cat((-t2, t1), dim=-1)

    return torch.cat([(t * cos + rot(t) * sin).flatten() for t in (q, k)])


def _pointwise_fn(op: OpFamily, x: torch.Tensor) -> str:
    """Which named function a pointwise family computes, from its oracle's values on these inputs."""
    a = x.detach().to(torch.float64)
    return identify(a, op.oracle(a).to(torch.float64), Pointwise())


def stable_tanh(op: OpFamily, x: Tensors, kw: dict[str, Any]) -> torch.Tensor | None:
    """``sign(x)·(1 − e^−2|x|)/(1 + e^−2|x|)``: the overflow-free textbook quotient (and ``2σ(2x) − 1`` alike).
    1 − e^−2|x| cancels near 0: about u absolute where tanh ≈ x, 2.2x torch's fp32 error on N(0, 1)."""
    if _pointwise_fn(op, x[0]) != "tanh":
        return None
    a = _wide(x[0])
    e = torch.exp(-2 * a.abs())
    return (torch.sign(a) * (1 - e) / (1 + e)).to(x[0].dtype)


def stable_softplus(op: OpFamily, x: Tensors, kw: dict[str, Any]) -> torch.Tensor | None:
    """``max(x, 0) + log(1 + e^−|x|)``: the overflow-free textbook softplus; 1 + e^−|x| rounded is an
    absolute u in the log (log1p avoids it), 1.9x torch's fp32 error on N(0, 1)."""
    if _pointwise_fn(op, x[0]) != "softplus":
        return None
    a = _wide(x[0])
    return (a.clamp(min=0) + torch.log(1 + torch.exp(-a.abs()))).to(x[0].dtype)


# family name -> its correct alternative formulations, (name shown in messages, function)
ALTERNATIVES: dict[str, tuple[tuple[str, Formulation], ...]] = {
    "softmax": (("exp(x - logsumexp(x))", saved_lse_softmax), ("log_softmax(x).exp()", log_softmax_exp)),
    "cross_entropy": (("logsumexp(x) - x[target]", lse_cross_entropy),),
    "rmsnorm": (("LlamaRMSNorm (normalised x rounded before the weight)", llama_rmsnorm),),
    "attention": (
        ("eager attention (scores in the input dtype)", eager_attention),
        ("flash-attention's attention_ref(upcast=False) (q/sqrt(d) in the input dtype)", flash_attention_ref),
        ("vLLM's reference attention (q·k rounded, then scaled)", vllm_ref_attention),
    ),
    "sdpa": (
        ("eager attention (scores in the input dtype)", eager_attention),
        ("flash-attention's attention_ref(upcast=False) (q/sqrt(d) in the input dtype)", flash_attention_ref),
        ("vLLM's reference attention (q·k rounded, then scaled)", vllm_ref_attention),
    ),
    "layernorm": (("two-pass layer norm (mean = sum(x)/N)", textbook_layernorm),),
    "rope": (("rope with angles positions·inv_freq in float32", runtime_angle_rope),),
    "pointwise": (
        ("sign(x)(1 - exp(-2|x|))/(1 + exp(-2|x|))", stable_tanh),
        ("max(x, 0) + log(1 + exp(-|x|))", stable_softplus),
    ),
}


def alternatives(op: OpFamily, inputs: Tensors, kw: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """Each applicable alternative formulation's output on these inputs (where they live), by name. One that
    raises or returns nothing is left out: the gate then has fewer references, never a wrong one."""
    out = []
    for name, fn in ALTERNATIVES.get(op.name, ()):
        try:
            with torch.no_grad():
                y = fn(op, inputs, kw)
        except Exception:  # noqa: BLE001 — a formulation that cannot take these inputs is not a reference
            continue
        if isinstance(y, torch.Tensor):
            out.append((name, y.detach()))
    return out
