"""A FlashAttention-style blocked kernel in torch (online softmax, P rounded before P·V) with planted faults.

Every kernel here takes the dense call convention of the attention family (that of
F.scaled_dot_product_attention): kernel(q, k, v, is_causal=False, scale=None, enable_gqa=False).
"""

from __future__ import annotations

import math

import torch


def _acc_matmul(a: torch.Tensor, b: torch.Tensor, acc: torch.dtype) -> torch.Tensor:
    """a @ b in fp32, or with the running sum rounded to ``acc`` after every term (an fp16 accumulator)."""
    a, b = a.float(), b.float()
    if acc == torch.float32:
        return a @ b
    total = torch.zeros(*a.shape[:-1], b.shape[-1], dtype=acc)
    for j in range(a.shape[-1]):
        total = (total.float() + a[..., j : j + 1] * b[..., j : j + 1, :]).to(acc)
    return total.float()


def flash(  # noqa: PLR0913 — the knobs are the faults
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    s_acc: torch.dtype = torch.float32,
    pv_acc: torch.dtype = torch.float32,
    p_dtype: torch.dtype | None = None,
    rescale: bool = True,
    mask: bool = True,
    block: int = 32,
) -> torch.Tensor:
    """Blocked attention over key tiles with a running max, running sum and rescaled accumulator."""
    g = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    lq, lk = q.shape[-2], k.shape[-2]
    p_dtype = p_dtype or q.dtype
    m = torch.full((*q.shape[:-1], 1), float("-inf"))
    ell = torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1])
    rows = torch.arange(lq).unsqueeze(-1)
    for j0 in range(0, lk, block):
        s = _acc_matmul(q, k[..., j0 : j0 + block, :].transpose(-1, -2), s_acc) * scale
        if is_causal and mask:
            s = s.masked_fill(torch.arange(j0, j0 + s.shape[-1]) > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.where(m_new.isinf(), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m - safe)
        p = torch.exp(s - safe)
        ell = (ell * alpha if rescale else ell) + p.sum(-1, keepdim=True)
        pv = _acc_matmul(p.to(p_dtype), v[..., j0 : j0 + block, :], pv_acc)
        acc = acc * alpha + pv
        m = m_new
    return (acc / ell).to(q.dtype)


def good(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    return flash(q, k, v, is_causal, scale, enable_gqa)


def pv_fp16_acc(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    return flash(q, k, v, is_causal, scale, enable_gqa, pv_acc=torch.float16)


def s_fp16_acc(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    return flash(q, k, v, is_causal, scale, enable_gqa, s_acc=torch.float16)


def no_mask(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    return flash(q, k, v, is_causal, scale, enable_gqa, mask=False)


def no_rescale(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    return flash(q, k, v, is_causal, scale, enable_gqa, rescale=False)


def default_scale(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    return flash(q, k, v, is_causal, None, enable_gqa)  # ignores the explicit scale


def gqa_modulo(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
    """q head h reads kv head h mod kv_heads instead of h // group."""
    g = q.shape[-3] // k.shape[-3]
    k, v = (t.repeat(1, g, 1, 1) for t in (k, v))
    return flash(q, k, v, is_causal, scale, enable_gqa)


def sdpa_varlen(q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, causal=False, softmax_scale=None):  # type: ignore[no-untyped-def]
    """torch's sdpa per packed sequence: the flash_attn_varlen_func convention."""
    outs = []
    c = cu_q.tolist()
    for a, b in zip(c[:-1], c[1:]):
        qs, ks, vs = (t[a:b].transpose(0, 1) for t in (q, k, v))
        o = torch.nn.functional.scaled_dot_product_attention(
            qs, ks, vs, is_causal=causal, scale=softmax_scale, enable_gqa=ks.shape[0] != qs.shape[0]
        )
        outs.append(o.transpose(0, 1))
    return torch.cat(outs)


class _Attention(torch.autograd.Function):
    """torch's sdpa forward with a hand-written FlashAttention-style backward (dense, GQA) and its faults."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale, fault):  # type: ignore[no-untyped-def]
        g = q.shape[-3] // k.shape[-3]
        with torch.no_grad():
            o = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=is_causal, scale=scale, enable_gqa=g > 1
            )
        ctx.save_for_backward(q, k, v, o)
        ctx.is_causal, ctx.scale, ctx.fault = is_causal, scale, fault
        return o

    @staticmethod
    def backward(ctx, do):  # type: ignore[no-untyped-def]
        q, k, v, o = ctx.saved_tensors
        g = q.shape[-3] // k.shape[-3]
        kx, vx = (t.repeat_interleave(g, dim=-3).float() for t in (k, v))
        qf, dof = q.float(), do.float()
        scale = 1 / math.sqrt(q.shape[-1]) if ctx.scale is None else ctx.scale
        s = scale * (qf @ kx.transpose(-1, -2))
        if ctx.is_causal:
            lq, lk = s.shape[-2:]
            s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool).tril().logical_not(), float("-inf"))
        p = torch.softmax(s, -1).to(q.dtype).float()
        acc = torch.float16 if ctx.fault == "dv_fp16_acc" else torch.float32
        dv = _acc_matmul(p.transpose(-1, -2), dof, acc)
        dp = dof @ vx.transpose(-1, -2)
        delta = (dof * o.float()).sum(-1, keepdim=True)
        ds = p * (dp if ctx.fault == "no_delta" else dp - delta)
        ds = ds.to(q.dtype).float()
        ds_scale = 1.0 if ctx.fault == "unscaled_ds" else scale
        dq = ds_scale * (ds @ kx)
        dk = ds_scale * (ds.transpose(-1, -2) @ qf)
        dk, dv = (t.reshape(*t.shape[:-3], k.shape[-3], g, *t.shape[-2:]).sum(-3) for t in (dk, dv))
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def _bwd(fault: str):  # type: ignore[no-untyped-def]
    def kernel(q, k, v, is_causal=False, scale=None, enable_gqa=False):  # type: ignore[no-untyped-def]
        return _Attention.apply(q, k, v, is_causal, scale, fault)

    kernel.__name__ = f"backward_{fault}"
    return kernel


backward_good = _bwd("")
backward_dv_fp16_acc = _bwd("dv_fp16_acc")
backward_no_delta = _bwd("no_delta")
backward_unscaled_ds = _bwd("unscaled_ds")
