"""Held-out kernels for benchmarks/custom_ops.py: ops in no kcgate family, re-implemented from the libraries
named in each ``source`` (same arithmetic and the same casts in the same places; the libraries' code is not
vendored). Each entry: input generator, the library-style eager kernel (its own casts), a fused-style kernel
(fp32 throughout, one rounding at the end), wrong variants from shipped bug classes, and output names.

Committed before any tuning on them (issue 47).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

Fn = Callable[..., Any]


@dataclass(frozen=True)
class Entry:
    name: str
    source: str  # repository, path and commit it re-implements
    inputs: Callable[[tuple[int, ...], torch.dtype, torch.Generator], tuple[torch.Tensor, ...]]
    kernel: Fn  # the library's own formulation (its casts); also the reference kcgate traces in fp64
    fused: Fn | None = None  # the same op computed in fp32 with one rounding at the end
    wrong: dict[str, Fn] = field(default_factory=dict)
    shapes: tuple[tuple[int, ...], ...] = ((16, 256), (3, 1000), (1, 4096))
    outputs: tuple[str, ...] = ("out",)
    backward: bool = True


def _randn(
    shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator, scale: float = 1.0
) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


# ---- norms (vLLM vllm/model_executor/layers/layernorm.py @ 00cba797) --------------------------------------
VLLM_NORM = (
    "vllm-project/vllm vllm/model_executor/layers/layernorm.py@00cba797bda48c0413ff05ab3c699335a745d734"
)


def _xw(shape, dtype, gen):  # type: ignore[no-untyped-def]
    return _randn(shape, dtype, gen), _randn(shape[-1:], dtype, gen, 0.5) + 1


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """RMSNorm.forward_native without a residual: normalised in fp32, cast back, then times the weight."""
    orig = x.dtype
    h = x.to(torch.float32)
    var = h.pow(2).mean(dim=-1, keepdim=True)
    h = h * torch.rsqrt(var + 1e-6)
    return h.to(orig) * w


def rms_norm_fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


def rms_norm_bf16_variance(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Shipped bug class: the variance taken in the input dtype (no upcast before the square and mean)."""
    var = x.pow(2).mean(dim=-1, keepdim=True)
    return (x * torch.rsqrt(var + 1e-6)) * w


def rms_norm_eps_outside(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Shipped bug class: eps added outside the square root."""
    h = x.float()
    return (h / (h.pow(2).mean(-1, keepdim=True).sqrt() + 1e-6)).to(x.dtype) * w


def _xrw(shape, dtype, gen):  # type: ignore[no-untyped-def]
    return _randn(shape, dtype, gen), _randn(shape, dtype, gen), _randn(shape[-1:], dtype, gen, 0.5) + 1


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm.forward_native with a residual: (normed, new residual), the residual sum rounded to x's dtype."""
    orig = x.dtype
    h = x.to(torch.float32) + residual.to(torch.float32)
    res = h.to(orig)
    var = h.pow(2).mean(dim=-1, keepdim=True)
    h = h * torch.rsqrt(var + 1e-6)
    return h.to(orig) * w, res


def fused_add_rms_norm_fused(x, residual, w):  # type: ignore[no-untyped-def]
    h = x.float() + residual.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype), h.to(x.dtype)


def fused_add_rms_norm_stale_residual(x, residual, w):  # type: ignore[no-untyped-def]
    """Shipped bug class: the residual output not updated (the input residual returned)."""
    return fused_add_rms_norm(x, residual, w)[0], residual.clone()


def fused_add_rms_norm_norm_before_add(x, residual, w):  # type: ignore[no-untyped-def]
    """Shipped bug class: the normalisation of x alone (the residual added after)."""
    out, res = fused_add_rms_norm(x, residual, w)
    return rms_norm(x, w), res


def gemma_rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """GemmaRMSNorm.forward_static without a residual: x·(1 + w) in fp32, cast once at the end."""
    orig = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    h = h * (1.0 + w.float())
    return h.to(orig)


def gemma_rms_norm_llama_cast(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Shipped bug class (transformers PR 29402): Llama's cast order, x.to(dtype) * (1 + w)."""
    h = x.float()
    h = (h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6)).to(x.dtype)
    return h * (1.0 + w)


def gemma_rms_norm_no_one(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Shipped bug class: the weight used as w instead of 1 + w (a checkpoint convention mix-up)."""
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


def poly_norm(x: torch.Tensor, w3: torch.Tensor) -> torch.Tensor:
    """PolyNorm.forward_native: w0·norm(x³) + w1·norm(x²) + w2·norm(x) + b, in fp32 (here b = 0.1)."""
    orig = x.dtype
    xf = x.to(torch.float32)

    def norm(t: torch.Tensor) -> torch.Tensor:
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)

    out = w3[0] * norm(xf**3) + w3[1] * norm(xf**2) + w3[2] * norm(xf) + 0.1
    return out.to(orig)


def _poly_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    return _randn(shape, dtype, gen), (torch.rand(3, generator=gen, dtype=torch.float64) + 0.2).to(
        torch.float32
    )


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """vLLM's LayerNorm module: F.layer_norm on x.float() with fp32 parameters, cast back (type_as)."""
    return F.layer_norm(x.float(), (x.shape[-1],), w, b, 1e-6).type_as(x)


def layer_norm_naive_var(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Shipped bug class: var = E[x²] - E[x]² in the input dtype."""
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean
    return ((x - mean) * torch.rsqrt(var + 1e-6) * w + b).to(x.dtype)


def _ln_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    x = _randn(shape, dtype, gen)
    return x, _randn(shape[-1:], torch.float32, gen, 0.5) + 1, _randn(shape[-1:], torch.float32, gen, 0.1)


# ---- activations (vLLM vllm/model_executor/layers/activation.py @ 00db0119) ----------------------------------
VLLM_ACT = (
    "vllm-project/vllm vllm/model_executor/layers/activation.py@00db0119c37674b956dec4228d4e571549020976"
)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def silu_and_mul_fused(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    xf = x.float()
    return (F.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)


def silu_and_mul_swapped(x: torch.Tensor) -> torch.Tensor:
    """Shipped bug class: gate and up halves swapped."""
    d = x.shape[-1] // 2
    return F.silu(x[..., d:]) * x[..., :d]


def gelu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate="none") * x[..., d:]


def gelu_and_mul_tanh_instead(x: torch.Tensor) -> torch.Tensor:
    """Shipped bug class: the tanh approximation where the model uses exact gelu."""
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate="tanh") * x[..., d:]


def gelu_tanh_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate="tanh") * x[..., d:]


def gelu_tanh_and_mul_exact_instead(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate="none") * x[..., d:]


def new_gelu(x: torch.Tensor) -> torch.Tensor:
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))


def new_gelu_fused(x: torch.Tensor) -> torch.Tensor:
    return new_gelu(x.float()).to(x.dtype)


def new_gelu_wrong_constant(x: torch.Tensor) -> torch.Tensor:
    """Shipped bug class: a truncated constant (0.0447 for 0.044715)."""
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.0447 * torch.pow(x, 3.0))))


def fast_gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


def fast_gelu_fused(x: torch.Tensor) -> torch.Tensor:
    return fast_gelu(x.float()).to(x.dtype)


def quick_gelu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x)


def quick_gelu_fused(x: torch.Tensor) -> torch.Tensor:
    return quick_gelu(x.float()).to(x.dtype)


def quick_gelu_wrong_constant(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(1.72 * x)


def _act_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    return (_randn(shape, dtype, gen, 2.0),)


# ---- scans (state-spaces/mamba and Dao-AILab/causal-conv1d) ---------------------------------------------------
MAMBA = (
    "state-spaces/mamba mamba_ssm/ops/selective_scan_interface.py@01887ed7d7c8da544be578979f9e155ba5f021b4"
)
CONV = "Dao-AILab/causal-conv1d causal_conv1d/causal_conv1d_interface.py@17f4f2fe12abc9d7fbbb180624e415ff2c1581d2"


def _scan_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    b, d, n, length = shape
    u = _randn((b, d, length), dtype, gen)
    delta = (torch.rand((b, d, length), generator=gen, dtype=torch.float64) * 0.5).to(dtype)
    a = -(torch.rand((d, n), generator=gen, dtype=torch.float64) + 0.5).to(torch.float32)
    bb = _randn((b, n, length), dtype, gen)
    cc = _randn((b, n, length), dtype, gen)
    dd = _randn((d,), torch.float32, gen)
    return u, delta, a, bb, cc, dd


def _scan(u, delta, a, bb, cc, dd, last: bool, state_dtype: torch.dtype | None = None):  # type: ignore[no-untyped-def]
    """selective_scan_ref with variable B and C (b n l), real A, D, no z: the state in fp32 (or state_dtype)."""
    dtype_in = u.dtype
    u, delta = u.float(), delta.float()
    bb, cc = bb.float(), cc.float()
    delta_a = torch.exp(torch.einsum("bdl,dn->bdln", delta, a))
    delta_b_u = torch.einsum("bdl,bnl,bdl->bdln", delta, bb, u)
    x = a.new_zeros((u.shape[0], a.shape[0], a.shape[1]))
    if state_dtype is not None:
        x = x.to(state_dtype)
    ys = []
    for i in range(u.shape[2]):
        x = delta_a[:, :, i] * x + delta_b_u[:, :, i]
        if state_dtype is not None:
            x = x.to(state_dtype)
        ys.append(torch.einsum("bdn,bn->bd", x.float(), cc[:, :, i]))
    y = torch.stack(ys, dim=2)
    out = (y + u * dd[:, None]).to(dtype_in)
    return (out, x.float()) if last else out


def selective_scan(u, delta, a, bb, cc, dd):  # type: ignore[no-untyped-def]
    return _scan(u, delta, a, bb, cc, dd, last=False)


def selective_scan_bf16_state(u, delta, a, bb, cc, dd):  # type: ignore[no-untyped-def]
    """Shipped bug class: the recurrent state kept in bf16."""
    return _scan(u, delta, a, bb, cc, dd, last=False, state_dtype=torch.bfloat16)


def selective_scan_last(u, delta, a, bb, cc, dd):  # type: ignore[no-untyped-def]
    return _scan(u, delta, a, bb, cc, dd, last=True)


def selective_scan_last_off_by_one(u, delta, a, bb, cc, dd):  # type: ignore[no-untyped-def]
    """Shipped bug class: the last state taken one step early."""
    out, _ = _scan(u, delta, a, bb, cc, dd, last=True)
    _, prev = _scan(u[..., :-1], delta[..., :-1], a, bb[..., :-1], cc[..., :-1], dd, last=True)
    return out, prev


def _conv_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    b, d, length = shape
    return _randn((b, d, length), dtype, gen), _randn((d, 4), dtype, gen, 0.5), _randn((d,), dtype, gen, 0.1)


def causal_conv1d(x, weight, bias, silu: bool = False):  # type: ignore[no-untyped-def]
    """causal_conv1d_ref without initial states: depthwise conv1d, left padding width - 1, cut to seqlen."""
    dtype_in = x.dtype
    x = x.to(weight.dtype)
    seqlen = x.shape[-1]
    dim, width = weight.shape
    out = F.conv1d(x, weight.unsqueeze(1), bias, padding=width - 1, groups=dim)[..., :seqlen]
    return (F.silu(out) if silu else out).to(dtype=dtype_in)


def causal_conv1d_fused(x, weight, bias):  # type: ignore[no-untyped-def]
    return causal_conv1d(x.float(), weight.float(), bias.float()).to(x.dtype)


def causal_conv1d_silu(x, weight, bias):  # type: ignore[no-untyped-def]
    return causal_conv1d(x, weight, bias, silu=True)


def causal_conv1d_silu_fused(x, weight, bias):  # type: ignore[no-untyped-def]
    return causal_conv1d(x.float(), weight.float(), bias.float(), silu=True).to(x.dtype)


def causal_conv1d_right_pad(x, weight, bias):  # type: ignore[no-untyped-def]
    """Shipped bug class: the wrong end kept (a non-causal, shifted window)."""
    dim, width = weight.shape
    out = F.conv1d(x.to(weight.dtype), weight.unsqueeze(1), bias, padding=width - 1, groups=dim)
    return out[..., width - 1 :].to(x.dtype)


# ---- routing (vllm-project/vllm-xpu-kernels tests/ops/topk_softmax_op.py, vLLM's torch topk_softmax) ----------
ROUTE = "zufangzhu/vllm-xpu-kernels tests/ops/topk_softmax_op.py (vLLM's torch topk_softmax)"


def _route_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    return (_randn(shape, dtype, gen, 2.0),)


def _topk(logits: torch.Tensor, renormalize: bool, softmax_dtype: torch.dtype | None = torch.float32):  # type: ignore[no-untyped-def]
    w = torch.softmax(logits, dim=-1, dtype=softmax_dtype) if softmax_dtype else torch.softmax(logits, -1)
    tw, ids = torch.topk(w, 2, dim=-1)
    if renormalize:
        tw = tw / tw.sum(dim=-1, keepdim=True)
    return tw.to(torch.float32), ids.to(torch.int32)


def topk_softmax(logits):  # type: ignore[no-untyped-def]
    return _topk(logits, False)


def topk_softmax_renorm(logits):  # type: ignore[no-untyped-def]
    return _topk(logits, True)


def topk_softmax_in_input_dtype(logits):  # type: ignore[no-untyped-def]
    """Shipped bug class: the router softmax computed in bf16/fp16."""
    return _topk(logits, False, softmax_dtype=None)


def topk_softmax_renorm_in_input_dtype(logits):  # type: ignore[no-untyped-def]
    return _topk(logits, True, softmax_dtype=None)


# ---- windowed and softcapped attention (vLLM tests/kernels/attention/test_flash_attn.py, ref_paged_attn) -------
# Re-implemented for one dense sequence (no paging): q (q_len, heads, d), k and v (kv_len, kv_heads, d), causal
# with the queries at the end of the keys, an optional sliding window and softcap, softmax in fp32, P cast to
# v's dtype before P·V, as the reference does.
VLLM_ATTN = (
    "vllm-project/vllm tests/kernels/attention/test_flash_attn.py@0001b995fda59101b71d7ac3a2821b1ce2f01473"
)
SOFT_CAP = 50.0
WINDOW = 8


def _attn_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    q_len, kv_len, heads, kv_heads, d = shape
    return (_randn((q_len, heads, d), dtype, gen, 2.0), _randn((kv_len, kv_heads, d), dtype, gen, 2.0),
            _randn((kv_len, kv_heads, d), dtype, gen))  # fmt: skip


def _ref_attn(q, k, v, window: int | None, soft_cap: float | None, off_by_one: int = 0, cap_after_mask=False):  # type: ignore[no-untyped-def]
    q_len, kv_len = q.shape[0], k.shape[0]
    q = q * q.shape[-1] ** -0.5
    if q.shape[1] != k.shape[1]:
        k = torch.repeat_interleave(k, q.shape[1] // k.shape[1], dim=1)
        v = torch.repeat_interleave(v, q.shape[1] // v.shape[1], dim=1)
    attn = torch.einsum("qhd,khd->hqk", q, k).float()
    empty = torch.ones(q_len, kv_len)
    mask = torch.triu(empty, diagonal=kv_len - q_len + 1).bool()
    if window is not None:
        w = window + off_by_one
        mask |= torch.triu(empty, diagonal=kv_len - (q_len + w) + 1).bool().logical_not()
    if soft_cap is not None:
        attn = soft_cap * torch.tanh(attn / soft_cap)
    attn = attn.masked_fill(mask, float("-inf"))
    attn = torch.softmax(attn, dim=-1).to(v.dtype)
    return torch.einsum("hqk,khd->qhd", attn, v)


def softcap_attn(q, k, v):  # type: ignore[no-untyped-def]
    return _ref_attn(q, k, v, None, SOFT_CAP)


def softcap_attn_fused(q, k, v):  # type: ignore[no-untyped-def]
    """P kept in fp32 for P·V (a fused kernel's choice), one rounding at the end."""
    return _ref_attn(q.float(), k.float(), v.float(), None, SOFT_CAP).to(q.dtype)


def softcap_attn_no_cap(q, k, v):  # type: ignore[no-untyped-def]
    """Shipped bug class: the softcap dropped (a backend ignoring the model's attn_logit_softcapping)."""
    return _ref_attn(q, k, v, None, None)


def softcap_attn_cap_unscaled(q, k, v):  # type: ignore[no-untyped-def]
    """Shipped bug class: the softcap applied before the 1/√d scale (tanh of the unscaled scores)."""
    if q.shape[1] != k.shape[1]:
        k = torch.repeat_interleave(k, q.shape[1] // k.shape[1], dim=1)
        v = torch.repeat_interleave(v, q.shape[1] // v.shape[1], dim=1)
    q_len, kv_len = q.shape[0], k.shape[0]
    attn = torch.einsum("qhd,khd->hqk", q, k).float()
    attn = SOFT_CAP * torch.tanh(attn / SOFT_CAP) * q.shape[-1] ** -0.5
    mask = torch.triu(torch.ones(q_len, kv_len), diagonal=kv_len - q_len + 1).bool()
    attn = torch.softmax(attn.masked_fill(mask, float("-inf")), dim=-1).to(v.dtype)
    return torch.einsum("hqk,khd->qhd", attn, v)


def window_attn(q, k, v):  # type: ignore[no-untyped-def]
    return _ref_attn(q, k, v, WINDOW, None)


def window_attn_fused(q, k, v):  # type: ignore[no-untyped-def]
    return _ref_attn(q.float(), k.float(), v.float(), WINDOW, None).to(q.dtype)


def window_attn_off_by_one(q, k, v):  # type: ignore[no-untyped-def]
    """Shipped bug class: the window one key wider (window_size = sliding_window, not sliding_window - 1)."""
    return _ref_attn(q, k, v, WINDOW, None, off_by_one=1)


def window_attn_no_window(q, k, v):  # type: ignore[no-untyped-def]
    """Shipped bug class: the sliding window ignored on one path (plain causal attention)."""
    return _ref_attn(q, k, v, None, None)


# ---- linear attention (fla-org/flash-linear-attention fla/ops/linear_attn/naive.py) ------------------------------
FLA_LINEAR = (
    "fla-org/flash-linear-attention fla/ops/linear_attn/naive.py@20ceee5295631b9c76e2334c1613fb13576829c9"
)
CHUNK = 16


def _lin_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    b, t, h, d = shape
    return tuple(_randn((b, t, h, d), dtype, gen) for _ in range(3))


def linear_attn(q, k, v):  # type: ignore[no-untyped-def]
    """naive_recurrent_linear_attn (no initial state, no normalisation): the state S in fp32, (o, final S)."""
    dtype = q.dtype
    scale = q.shape[-1] ** -0.5
    q, k, v = (x.to(torch.float32) for x in (q, k, v))
    o = torch.zeros_like(v)
    s = torch.zeros((q.shape[0], q.shape[2], q.shape[3], v.shape[3]), dtype=torch.float32)
    for t in range(q.shape[1]):
        s = s + torch.einsum("bhk,bhv->bhkv", k[:, t], v[:, t])
        o[:, t] = torch.einsum("bhkv,bhk->bhv", s, q[:, t] * scale)
    return o.to(dtype), s


def _chunked(q, k, v, exclusive: bool = True):  # type: ignore[no-untyped-def]
    """naive_chunk_linear_attn in fp32 with chunks of CHUNK (the sequence zero-padded to whole chunks)."""
    dtype, (b, t, h, d) = q.dtype, q.shape
    pad = (-t) % CHUNK
    q, k, v = (F.pad(x.float(), (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
    n = (t + pad) // CHUNK

    def chunks(x):  # type: ignore[no-untyped-def]
        return x.reshape(b, n, CHUNK, h, d).permute(0, 3, 1, 2, 4)

    q, k, v = chunks(q) * d**-0.5, chunks(k), chunks(v)
    kv = (k.transpose(-1, -2) @ v).cumsum(2)
    state = kv[:, :, -1]
    if exclusive:
        kv = torch.cat([torch.zeros_like(kv[:, :, :1]), kv[:, :, :-1]], dim=2)
    mask = torch.triu(torch.ones(CHUNK, CHUNK, dtype=torch.bool), diagonal=1)
    o = q @ kv + (q @ k.transpose(-1, -2)).masked_fill(mask, 0) @ v
    o = o.permute(0, 2, 3, 1, 4).reshape(b, n * CHUNK, h, d)[:, :t]
    return o.to(dtype), state


def linear_attn_chunked(q, k, v):  # type: ignore[no-untyped-def]
    return _chunked(q, k, v)


def linear_attn_inclusive_state(q, k, v):  # type: ignore[no-untyped-def]
    """Shipped bug class: the inter-chunk state not shifted (a chunk's own keys counted twice)."""
    return _chunked(q, k, v, exclusive=False)


def linear_attn_no_scale(q, k, v):  # type: ignore[no-untyped-def]
    """Shipped bug class: the 1/√d scale left out (scale=None read as 1)."""
    o, s = linear_attn(q * q.shape[-1] ** 0.5, k, v)
    return o, s


ENTRIES: tuple[Entry, ...] = (
    Entry("rms_norm", VLLM_NORM, _xw, rms_norm, rms_norm_fused,
          {"variance in input dtype": rms_norm_bf16_variance, "eps outside sqrt": rms_norm_eps_outside}),
    Entry("fused_add_rms_norm", VLLM_NORM, _xrw, fused_add_rms_norm, fused_add_rms_norm_fused,
          {"stale residual": fused_add_rms_norm_stale_residual, "norm before add": fused_add_rms_norm_norm_before_add},
          outputs=("out", "residual"), backward=False),
    Entry("gemma_rms_norm", VLLM_NORM, _xw, gemma_rms_norm, None,
          {"llama cast order": gemma_rms_norm_llama_cast, "w instead of 1+w": gemma_rms_norm_no_one}),
    Entry("poly_norm", VLLM_NORM, _poly_inputs, poly_norm, None, {}),
    Entry("layer_norm", VLLM_NORM, _ln_inputs, layer_norm, None, {"naive variance": layer_norm_naive_var}),
    Entry("silu_and_mul", VLLM_ACT, _act_inputs, silu_and_mul, silu_and_mul_fused,
          {"halves swapped": silu_and_mul_swapped}),
    Entry("gelu_and_mul", VLLM_ACT, _act_inputs, gelu_and_mul, None, {"tanh approximation": gelu_and_mul_tanh_instead}),
    Entry("gelu_tanh_and_mul", VLLM_ACT, _act_inputs, gelu_tanh_and_mul, None,
          {"exact gelu": gelu_tanh_and_mul_exact_instead}),
    Entry("new_gelu", VLLM_ACT, _act_inputs, new_gelu, new_gelu_fused, {"truncated constant": new_gelu_wrong_constant}),
    Entry("fast_gelu", VLLM_ACT, _act_inputs, fast_gelu, fast_gelu_fused, {}),
    Entry("quick_gelu", VLLM_ACT, _act_inputs, quick_gelu, quick_gelu_fused, {"wrong constant": quick_gelu_wrong_constant}),
    Entry("selective_scan", MAMBA, _scan_inputs, selective_scan, None, {"bf16 state": selective_scan_bf16_state},
          shapes=((2, 4, 8, 32), (1, 3, 4, 17))),
    Entry("selective_scan_last_state", MAMBA, _scan_inputs, selective_scan_last, None,
          {"last state one step early": selective_scan_last_off_by_one},
          shapes=((2, 4, 8, 32), (1, 3, 4, 17)), outputs=("out", "last_state"), backward=False),
    Entry("causal_conv1d", CONV, _conv_inputs, causal_conv1d, causal_conv1d_fused,
          {"right padding": causal_conv1d_right_pad}, shapes=((2, 16, 64), (1, 5, 33))),
    Entry("causal_conv1d_silu", CONV, _conv_inputs, causal_conv1d_silu, causal_conv1d_silu_fused, {},
          shapes=((2, 16, 64), (1, 5, 33))),
    Entry("topk_softmax", ROUTE, _route_inputs, topk_softmax, None, {"softmax in input dtype": topk_softmax_in_input_dtype},
          shapes=((64, 8), (33, 64)), outputs=("topk_weights", "topk_ids"), backward=False),
    Entry("topk_softmax_renorm", ROUTE, _route_inputs, topk_softmax_renorm, None,
          {"softmax in input dtype": topk_softmax_renorm_in_input_dtype},
          shapes=((64, 8), (33, 64)), outputs=("topk_weights", "topk_ids"), backward=False),
    Entry("softcap_attention", VLLM_ATTN, _attn_inputs, softcap_attn, softcap_attn_fused,
          {"softcap dropped": softcap_attn_no_cap, "softcap before the scale": softcap_attn_cap_unscaled},
          shapes=((16, 24, 4, 2, 16), (5, 13, 3, 1, 8))),
    Entry("sliding_window_attention", VLLM_ATTN, _attn_inputs, window_attn, window_attn_fused,
          {"window one wider": window_attn_off_by_one, "window ignored": window_attn_no_window},
          shapes=((16, 24, 4, 2, 16), (5, 13, 3, 1, 8))),
    Entry("linear_attention", FLA_LINEAR, _lin_inputs, linear_attn, linear_attn_chunked,
          {"state not shifted": linear_attn_inclusive_state, "scale left out": linear_attn_no_scale},
          shapes=((1, 32, 2, 16), (2, 19, 1, 8)), outputs=("o", "final_state")),
)  # fmt: skip


# ---- two-output fused norms (issue 47 item 2; a separate block, appended to ENTRIES) -------------------------
VLLM_GEMMA = (
    "vllm-project/vllm vllm/model_executor/layers/layernorm.py (GemmaRMSNorm.forward_static, residual)"
)


def gemma_fused_add_rms_norm(x, residual, w):  # type: ignore[no-untyped-def]
    """GemmaRMSNorm.forward_static with a residual: (x·(1 + w) normalised in fp32, new residual)."""
    orig = x.dtype
    x = x + residual.float() if orig == torch.float16 else x + residual
    residual = x.to(orig)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    return (h * (1.0 + w.float())).to(orig), residual


def gemma_fused_add_rms_norm_fused(x, residual, w):  # type: ignore[no-untyped-def]
    h = x.float() + residual.float()
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + w.float())
    return y.to(x.dtype), h.to(x.dtype)


def gemma_fused_add_rms_norm_stale_residual(x, residual, w):  # type: ignore[no-untyped-def]
    """Shipped bug class: the residual output not updated (the input residual returned)."""
    return gemma_fused_add_rms_norm(x, residual, w)[0], residual.clone()


def gemma_fused_add_rms_norm_no_one(x, residual, w):  # type: ignore[no-untyped-def]
    """Shipped bug class: Gemma's 1 + w offset dropped (Llama's weight multiply)."""
    out, res = gemma_fused_add_rms_norm(x, residual, w)
    h = res.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype), res


ENTRIES = (
    *ENTRIES,
    Entry("gemma_fused_add_rms_norm", VLLM_GEMMA, _xrw, gemma_fused_add_rms_norm, gemma_fused_add_rms_norm_fused,
          {"stale residual": gemma_fused_add_rms_norm_stale_residual,
           "weight offset dropped": gemma_fused_add_rms_norm_no_one},
          outputs=("out", "residual"), backward=False),
)  # fmt: skip
