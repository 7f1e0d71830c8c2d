"""Kernels outside kcgate's families whose bugs public libraries shipped and later fixed, rebuilt on the CPU
(tests/testing/faults/shipped_custom.py cites each fix): per bug the input generator a new user would write,
the library's reference, the fixed kernel and the buggy one. Written from the PRs' diffs and descriptions;
the libraries' code is not vendored.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

FP8_MAX = 448.0  # float8_e4m3fn
FP8_NAN_FROM = 464.0  # c10's fp32 -> e4m3fn cast: at or past 464 (the rounding boundary above 448) it is NaN


def _randn(shape, dtype, gen, scale: float = 1.0):  # type: ignore[no-untyped-def]
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


# ---- MoE routing: sglang-jax's TopK gate (python/sgl_jax/srt/layers/gate.py, PR 1282) ------------------------
TOPK, SCALING = 2, 2.5  # renormalize = False with a routed_scaling_factor (a DeepSeek-style router)


def route_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    return (_randn(shape, dtype, gen),)


def route_ref(router_logits):  # type: ignore[no-untyped-def]
    """The gate's intent: softmax in fp32, top-k, the scaling factor applied whether or not it renormalises."""
    p = torch.softmax(router_logits.float(), dim=-1)
    w, ids = torch.topk(p, TOPK, dim=-1)
    return w * SCALING, ids.to(torch.int32)


def route_fixed(router_logits):  # type: ignore[no-untyped-def]
    """After the fix: the scaling dedented out of ``if self.renormalize``."""
    scores = F.softmax(router_logits.to(torch.float32), dim=-1)
    topk_weights, topk_ids = torch.topk(scores, TOPK, dim=-1)
    renormalize = False
    if renormalize:
        topk_weights = topk_weights / topk_weights.sum(-1, keepdim=True)
    topk_weights = topk_weights * SCALING
    return topk_weights, topk_ids.to(torch.int32)


def route_buggy(router_logits):  # type: ignore[no-untyped-def]
    """As shipped: the scaling nested inside ``if self.renormalize``, so skipped when it is False."""
    scores = F.softmax(router_logits.to(torch.float32), dim=-1)
    topk_weights, topk_ids = torch.topk(scores, TOPK, dim=-1)
    renormalize = False
    if renormalize:
        topk_weights = topk_weights / topk_weights.sum(-1, keepdim=True)
        topk_weights = topk_weights * SCALING
    return topk_weights, topk_ids.to(torch.int32)


# ---- MoE routing: megablocks' LearnedRouter with top_k = 1 (megablocks/layers/router.py, PR 87) --------------
def top1_ref(x):  # type: ignore[no-untyped-def]
    """A top-1 router that normalises each token's expert weights (p = 1): each token's weight is 1."""
    scores = x.softmax(dim=-1)
    w, ids = scores.max(dim=-1, keepdim=True)  # max, as the kernel: a tie between bf16 logits breaks alike
    return scores, w / w.abs().sum(-1, keepdim=True), ids


def top1_fixed(x):  # type: ignore[no-untyped-def]
    """After the fix: ``scores.max(dim=-1)`` keeps its last dimension (unsqueeze), so the norm is per token."""
    scores = x.softmax(dim=-1)
    w, ids = scores.max(dim=-1)
    w, ids = w.unsqueeze(-1), ids.unsqueeze(-1)
    return scores, w / torch.norm(w, p=1, dim=-1, keepdim=True), ids


def top1_buggy(x):  # type: ignore[no-untyped-def]
    """As shipped: ``scores.max(dim=-1)`` gives shape [S]; the p-norm over dim -1 is then over all tokens."""
    scores = x.softmax(dim=-1)
    w, ids = scores.max(dim=-1)
    w = w / torch.norm(w, p=1, dim=-1, keepdim=True)
    return scores, w.unsqueeze(-1), ids.unsqueeze(-1)  # the caller views it as [S, 1]


# ---- fused add + RMSNorm backward with the residual output's gradient (Dao-AILab/quack PR 53) --------------
EPS = 1e-6


def add_norm_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    return _randn(shape, dtype, gen), _randn(shape, dtype, gen), _randn(shape[-1:], dtype, gen, 0.5) + 1


def add_norm_ref(x, residual, weight):  # type: ignore[no-untyped-def]
    """res_out = x + residual; out = rmsnorm(res_out) * weight, in fp32 (autograd gives the backward)."""
    r = x.float() + residual.float()
    out = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + EPS) * weight.float()
    return out.to(x.dtype), r.to(x.dtype)


def _rms_bwd(dout, r, rstd, w):  # type: ignore[no-untyped-def]
    xhat = r * rstd
    g = dout * w
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx, (dout * xhat).sum(0)


class _AddNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, buggy):  # type: ignore[no-untyped-def]
        r = x.float() + residual.float()
        rstd = torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + EPS)
        ctx.save_for_backward(r, rstd, weight)
        ctx.buggy, ctx.dtype = buggy, x.dtype
        return (r * rstd * weight.float()).to(x.dtype), r.to(x.dtype)

    @staticmethod
    def backward(ctx, dout, dres_out):  # type: ignore[no-untyped-def]
        r, rstd, weight = ctx.saved_tensors
        w, dout, dres = weight.float(), dout.float(), dres_out.float()
        if ctx.buggy:  # as shipped: dres_out = (dres_out + dout) * dnorm(out)
            d = dres + dout
            dx, _ = _rms_bwd(d, r, rstd, w)
            _, dw = _rms_bwd(dout, r, rstd, w)
        else:  # the fix: dres_out = dres_out + dout * dnorm(out)
            dx, dw = _rms_bwd(dout, r, rstd, w)
            dx = dx + dres
        dx = dx.reshape(r.shape)
        return dx.to(ctx.dtype), dx.to(ctx.dtype), dw.to(weight.dtype), None


def _add_norm(x, residual, weight, buggy: bool):  # type: ignore[no-untyped-def]
    shape = x.shape
    out, res = _AddNorm.apply(x.reshape(-1, shape[-1]), residual.reshape(-1, shape[-1]), weight, buggy)
    return out.reshape(shape), res.reshape(shape)


def add_norm_fixed(x, residual, weight):  # type: ignore[no-untyped-def]
    return _add_norm(x, residual, weight, False)


def add_norm_buggy(x, residual, weight):  # type: ignore[no-untyped-def]
    return _add_norm(x, residual, weight, True)


# ---- attention: a blocked, online-softmax kernel (FlashAttention-style, fp32 accumulator) -------------------
SOFTCAP, WINDOW, BLOCK = 50.0, 16, 32


def attn_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    """(batch, heads, queries, head_dim); keys as many as queries (a prefill)."""
    return _randn(shape, dtype, gen), _randn(shape, dtype, gen), _randn(shape, dtype, gen)


def chunk_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    """A prefill chunk: (batch, heads, queries, head_dim) queries against a cache of 16 more keys."""
    b, h, lq, d = shape
    kv = (b, h, lq + 16, d)
    return _randn(shape, dtype, gen), _randn(kv, dtype, gen), _randn(kv, dtype, gen)


def _naive(q, k, v, mask, softcap=None):  # type: ignore[no-untyped-def]
    """The tests' reference: scores in fp32, masked, softmax, P cast to v's dtype, P·V."""
    s = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~mask, float("-inf"))
    return (torch.softmax(s, dim=-1).to(v.dtype).float() @ v.float()).to(q.dtype)


def _flash(q, k, v, mask, softcap=None):  # type: ignore[no-untyped-def]
    """K-blocks of BLOCK, running max and sum in fp32, P rounded to the input dtype for P·V."""
    qf = q.float() * q.shape[-1] ** -0.5
    m = torch.full(q.shape[:-1], float("-inf"))
    row = torch.zeros(q.shape[:-1])
    acc = torch.zeros(q.shape)
    for j in range(0, k.shape[-2], BLOCK):
        s = qf @ k[..., j : j + BLOCK, :].float().transpose(-1, -2)
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        s = s.masked_fill(~mask[..., j : j + BLOCK], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        safe = torch.where(torch.isinf(m_new), 0.0, m_new)
        p = (s - safe[..., None]).exp()
        alpha = (m - safe).exp()
        row = alpha * row + p.sum(-1)
        acc = alpha[..., None] * acc + p.to(v.dtype).float() @ v[..., j : j + BLOCK, :].float()
        m = m_new
    return (acc / row[..., None]).to(q.dtype)


def _causal(lq: int, lk: int) -> torch.Tensor:
    return torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)


def softcap_ref(q, k, v):  # type: ignore[no-untyped-def]
    return _naive(q, k, v, _causal(q.shape[-2], k.shape[-2]), SOFTCAP)


def softcap_fixed(q, k, v):  # type: ignore[no-untyped-def]
    """After sgl-kernel-xpu PR 491: S = softcap·tanh(S/softcap) in the softmax path."""
    return _flash(q, k, v, _causal(q.shape[-2], k.shape[-2]), SOFTCAP)


def softcap_buggy(q, k, v):  # type: ignore[no-untyped-def]
    """As shipped: the softcap argument accepted and stored, never applied."""
    return _flash(q, k, v, _causal(q.shape[-2], k.shape[-2]), None)


def _mlx_window_mask(n: int, window_size: int, inclusive: bool) -> torch.Tensor:
    """mlx-lm's create_causal_mask(N, 0, window_size): True where masked out."""
    rinds = torch.arange(n)[None]
    linds = torch.arange(n)[:, None]
    mask = linds < rinds
    if inclusive:  # as shipped: a query sees window_size + 1 keys
        return mask | (linds > rinds + window_size)
    return mask | (linds >= rinds + window_size)  # the fix (PR 390): window_size keys, itself included


def window_ref(q, k, v):  # type: ignore[no-untyped-def]
    """gpt-oss's definition: a window of W keys, the query's own included."""
    i = torch.arange(q.shape[-2])
    keep = (i[:, None] >= i[None]) & (i[:, None] - i[None] < WINDOW)
    return _naive(q, k, v, keep)


def window_fixed(q, k, v):  # type: ignore[no-untyped-def]
    return _flash(q, k, v, ~_mlx_window_mask(q.shape[-2], WINDOW, inclusive=False))


def window_buggy(q, k, v):  # type: ignore[no-untyped-def]
    return _flash(q, k, v, ~_mlx_window_mask(q.shape[-2], WINDOW, inclusive=True))


def _cb_mask(seqlen_q: int, seqlen_k: int, sliding_window: int, fixed: bool) -> torch.Tensor:
    """transformers' continuous-batching build_attention_mask (True where attended)."""
    minus_inf = torch.full((seqlen_q, seqlen_k), float("-inf"))
    masked = torch.triu(minus_inf, diagonal=seqlen_k - seqlen_q + 1)
    if sliding_window > 1:
        if fixed:  # PR 41228
            masked = masked + torch.tril(minus_inf, diagonal=seqlen_k - seqlen_q - sliding_window)
        else:  # as shipped
            masked = torch.tril(masked, diagonal=seqlen_k - seqlen_q + sliding_window)
    return masked == 0


def cb_window_ref(q, k, v):  # type: ignore[no-untyped-def]
    lq, lk = q.shape[-2], k.shape[-2]
    i, j = torch.arange(lq)[:, None] + (lk - lq), torch.arange(lk)[None]
    return _naive(q, k, v, (j <= i) & (i - j < WINDOW))


def cb_window_fixed(q, k, v):  # type: ignore[no-untyped-def]
    return _flash(q, k, v, _cb_mask(q.shape[-2], k.shape[-2], WINDOW, fixed=True))


def cb_window_buggy(q, k, v):  # type: ignore[no-untyped-def]
    return _flash(q, k, v, _cb_mask(q.shape[-2], k.shape[-2], WINDOW, fixed=False))


# ---- sampling: llama.cpp's top-p (llama_sample_top_p, PR 1953), as a filter returning probabilities --------
TOP_P = 0.9


def logits_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    return (_randn(shape, dtype, gen, 2.0),)


def top_p_ref(logits):  # type: ignore[no-untyped-def]
    """Nucleus sampling's definition (Holtzman et al.): the smallest set of the most probable tokens whose
    mass reaches p (a token is kept while the mass before it is below p), renormalised. Sorted stably, so a
    tie between two bf16 logits is broken the same way in every run."""
    probs = torch.softmax(logits.float(), dim=-1)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    before = sorted_probs.cumsum(-1) - sorted_probs
    kept = sorted_probs * (before < TOP_P)
    return torch.zeros_like(probs).scatter(-1, order, kept / kept.sum(-1, keepdim=True))


def _llama_top_p(logits, fixed: bool):  # type: ignore[no-untyped-def]
    p = torch.softmax(logits.float(), dim=-1)
    sp, idx = torch.sort(p, descending=True, stable=True)
    cum = sp.cumsum(-1)
    if fixed:  # cum_sum >= p: last_idx = i + 1 (the crossing token kept)
        keep_sorted = (cum - sp) < TOP_P
    else:  # as shipped: cum_sum > p: last_idx = i (the crossing token dropped)
        keep_sorted = cum <= TOP_P
        keep_sorted[..., 0] = True  # min_keep = 1
    kept = torch.where(keep_sorted, sp, 0.0)
    kept = kept / kept.sum(-1, keepdim=True)
    return torch.zeros_like(p).scatter(-1, idx, kept)


def top_p_fixed(logits):  # type: ignore[no-untyped-def]
    return _llama_top_p(logits, True)


def top_p_buggy(logits):  # type: ignore[no-untyped-def]
    return _llama_top_p(logits, False)


# ---- int4 dequant with zero points: GPTQModel's AWQ -> ExLlamaV2 repack (PR 2351) -----------------------------
GROUP = 32


def dequant_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    """(in_features, out_features): 4-bit codes, a zero point and a scale per group of 32 input rows."""
    k, n = shape
    codes = torch.randint(0, 16, (k, n), generator=gen, dtype=torch.int32)
    zeros = torch.randint(0, 16, (k // GROUP, n), generator=gen, dtype=torch.int32)
    scales = (torch.rand((k // GROUP, n), generator=gen, dtype=torch.float64) * 0.02 + 0.005).to(dtype)
    return codes, zeros, scales


def dequant_ref(codes, zeros, scales):  # type: ignore[no-untyped-def]
    z = zeros.repeat_interleave(GROUP, 0)
    return (codes - z).to(scales.dtype) * scales.repeat_interleave(GROUP, 0)


def _pack4(v: torch.Tensor) -> torch.Tensor:
    """Eight 4-bit values per int32 along the last dimension (the kernels' packed layout)."""
    v = (v & 0xF).reshape(*v.shape[:-1], -1, 8)
    return sum((v[..., i] << (4 * i)) for i in range(8))  # type: ignore[return-value]


def _unpack4(p: torch.Tensor) -> torch.Tensor:
    return torch.stack([(p >> (4 * i)) & 0xF for i in range(8)], -1).reshape(*p.shape[:-1], -1)


def _exllama_dequant(codes, zeros, scales, fixed: bool):  # type: ignore[no-untyped-def]
    """The ExLlamaV2 convention: zero points stored minus one, added back in the kernel."""
    n = zeros.shape[-1]
    stored = zeros - 1
    if fixed:  # the fix: a zero point of 0 is not pushed through the 4-bit pack as -1
        z = stored + 1
    else:  # as shipped: -1 & 0xF = 15 in pack_exllama, so a zero point of 0 comes back as 15 + 1
        pad = (-n) % 8
        z = _unpack4(_pack4(F.pad(stored, (0, pad))))[..., :n] + 1
    w = (codes - z.repeat_interleave(GROUP, 0)).to(torch.float32)
    return (w * scales.float().repeat_interleave(GROUP, 0)).to(scales.dtype)


def dequant_fixed(codes, zeros, scales):  # type: ignore[no-untyped-def]
    return _exllama_dequant(codes, zeros, scales, True)


def dequant_buggy(codes, zeros, scales):  # type: ignore[no-untyped-def]
    return _exllama_dequant(codes, zeros, scales, False)


# ---- fp8 with a static activation scale: vLLM's static_scaled_fp8_quant (PR 4570), quantise + dequantise ---
def static_fp8_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    """The activations and a static scale calibrated on another batch of the same size (amax / 448)."""
    x = _randn(shape, dtype, gen)
    calib = torch.randn(shape, generator=gen, dtype=torch.float64)
    return x, (calib.abs().amax() / FP8_MAX).to(torch.float32).reshape(1)


def static_fp8_ref(x, scale):  # type: ignore[no-untyped-def]
    q = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return (q.float() * scale).to(x.dtype)


def _c10_fp8(v: torch.Tensor) -> torch.Tensor:
    """c10::Float8_e4m3fn(float) as the CUDA kernel casts: NaN from 464 up (torch's CPU cast saturates)."""
    q = v.to(torch.float8_e4m3fn).float()
    return torch.where(v.abs() >= FP8_NAN_FROM, float("nan"), q)


def static_fp8_fixed(x, scale):  # type: ignore[no-untyped-def]
    """After the fix: x · (1/scale), clamped to ±448, then cast."""
    inv = 1.0 / scale
    q = _c10_fp8((x.float() * inv).clamp(-FP8_MAX, FP8_MAX))
    return (q * scale).to(x.dtype)


def static_fp8_buggy(x, scale):  # type: ignore[no-untyped-def]
    """As shipped: no clamp, so an activation past the calibrated range casts to NaN."""
    q = _c10_fp8(x.float() * (1.0 / scale))
    return (q * scale).to(x.dtype)


# ---- fp8 per-block activation quant: kernels-community finegrained-fp8 act_quant (PR 680) --------------------
QBLOCK = 128


def act_quant_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    return (_randn(shape, dtype, gen),)


def act_quant_ref(x):  # type: ignore[no-untyped-def]
    xb = x.float().reshape(*x.shape[:-1], -1, QBLOCK)
    s = (xb.abs().amax(-1, keepdim=True) / FP8_MAX).clamp(min=1e-12)
    y = (xb / s).to(torch.float8_e4m3fn).float()
    return y.reshape(x.shape), s.squeeze(-1)


def _act_quant(x, fixed: bool):  # type: ignore[no-untyped-def]
    xb = x.float().reshape(*x.shape[:-1], -1, QBLOCK)
    s = xb.abs().amax(-1, keepdim=True) / FP8_MAX  # float8_e4m3fn max
    if fixed:
        s = torch.clamp(s, min=1e-12)  # the fix: s = tl.maximum(s, 1e-12)
    y = _c10_fp8(xb / s)  # as shipped, an all-zero block is 0/0 = NaN
    return y.reshape(x.shape), s.squeeze(-1)


def act_quant_fixed(x):  # type: ignore[no-untyped-def]
    return _act_quant(x, True)


def act_quant_buggy(x):  # type: ignore[no-untyped-def]
    return _act_quant(x, False)


# ---- per-token log-probs with a final logit softcap: unsloth-zoo's selective log-softmax (PR 593) ------------
LOGIT_CAP = 30.0
VOCAB_CHUNK = 4


def logprob_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    """(tokens, vocab) logits of an lm_head (spread 20, so the cap of 30 bites) and the sampled tokens."""
    n, v = shape
    return _randn(shape, dtype, gen, 20.0), torch.randint(0, v, (n,), generator=gen)


def logprob_ref(logits, index):  # type: ignore[no-untyped-def]
    x = logits.float()
    x = LOGIT_CAP * torch.tanh(x / LOGIT_CAP)
    return x.log_softmax(-1).gather(-1, index[:, None]).squeeze(-1)


def _selective_log_softmax(logits, index, fixed: bool):  # type: ignore[no-untyped-def]
    """Rows in chunks, as chunked_hidden_states_selective_log_softmax computes them."""
    out = []
    for i in range(0, logits.shape[0], VOCAB_CHUNK):
        chunk_logits = logits[i : i + VOCAB_CHUNK].to(torch.float32)
        if fixed:
            chunk_logits = LOGIT_CAP * torch.tanh(chunk_logits / LOGIT_CAP)
        else:  # as shipped
            chunk_logits = chunk_logits * torch.tanh(chunk_logits / LOGIT_CAP)
        lse = torch.logsumexp(chunk_logits, dim=-1)
        picked = torch.gather(chunk_logits, -1, index[i : i + VOCAB_CHUNK, None]).squeeze(-1)
        out.append(picked - lse)
    return torch.cat(out)


def logprob_fixed(logits, index):  # type: ignore[no-untyped-def]
    return _selective_log_softmax(logits, index, True)


def logprob_buggy(logits, index):  # type: ignore[no-untyped-def]
    return _selective_log_softmax(logits, index, False)
