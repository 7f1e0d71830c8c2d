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
