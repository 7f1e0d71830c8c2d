"""Attention: softmax(scale·Q·Kᵀ + mask)·V with causal masking, an explicit scale, grouped-query heads
(fewer kv heads), variable-length batches (``cu_seqlens``) and the precision of P as parameters.

Shape form ``[batch, heads, kv_heads, length, head_dim]`` (``length``: the keys'; ``params.q_len`` gives the
queries' where they differ, dense only, and ``params.causal_align`` the causal mask's alignment then: top-left
as torch's sdpa, bottom-right as FlashAttention >= 2.1). Call conventions:
dense ``kernel(q, k, v, **kw)`` with q (batch, heads, length, head_dim), k and v (batch, kv_heads, length,
head_dim) and ``is_causal=True`` / ``scale=s`` / ``enable_gqa=True`` passed only when they apply (the
``F.scaled_dot_product_attention`` convention); varlen ``kernel(q, k, v, cu_seqlens_q, cu_seqlens_k,
max_seqlen_q=L, max_seqlen_k=L, causal=..., softmax_scale=...)`` with q (total, heads, head_dim) and int32
``cu_seqlens`` (the ``flash_attn_varlen_func`` convention). Derivation of the bound: docs/ops.md#attention.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from kcgate.numerics.ops.base import BoundArgs, GradBound, OpFamily, Tensors, draw, sqrt
from kcgate.vocab import dtypes
from kcgate.vocab.catalogue import family_constraints


@dataclass(frozen=True)
class Attention:
    """One configuration of the family (the contract's ``params``)."""

    causal: bool = False
    scale: float = 0.0  # 0: 1/√head_dim
    varlen: bool = False
    p_dtype: str = ""  # "": the input dtype for 16-bit inputs, float32 for wider ones
    # dense only: the queries' length (0: the keys' length, the shape's ``length``): decode (1), chunked
    # prefill and cross-attention have fewer or more queries than keys, and there the causal mask's
    # alignment decides correctness: top-left as torch's sdpa, or bottom-right as FlashAttention >= 2.1
    q_len: int = 0
    causal_align: str = "top-left"
    softcap: float = 0.0  # > 0: scores capped to softcap·tanh(s / softcap) before the mask (Gemma 2: 50)
    window: int = 0  # > 0: each query sees at most this many latest keys, its own included (Mistral, Gemma 2)
    # not params, the softcap mistakes the diagnosis tests: the cap written another way (CAP_FORMS), the mask
    # applied (as a large negative score) before the cap, so masked keys score −softcap, not −inf
    cap_form: str = "c·tanh(s/c)"
    mask_first: bool = False
    kv_modulo: bool = False  # not a param: the grouped-query mistake (q head h reads kv head h mod kv_heads)
    # not params either, the mistakes the diagnosis tests: the causal mask's diagonal shifted (+1: each query
    # also sees the next key), and an online softmax over K-blocks of this size that never rescales its
    # accumulator by exp(m_old − m_new) (``stale_l``: nor its row sum)
    diagonal: int = 0
    stale_block: int = 0
    stale_l: bool = False
    # not a param: the block-diagonal (varlen) mistake of a sequence's keys starting or ending this many keys
    # off its cu_seqlens boundaries, (start, end): (0, 1) also sees the next sequence's first key
    key_reach: tuple[int, int] = (0, 0)

    def scale_for(self, d: int) -> float:
        return self.scale if self.scale > 0 else 1.0 / math.sqrt(d)

    def u_p(self, ba: BoundArgs) -> float:
        """Unit roundoff of P before P·V; the default follows the input dtype (FlashAttention-style)."""
        if self.p_dtype:
            return dtypes.unit_roundoff(self.p_dtype)
        return ba.u_in if ba.u_in > dtypes.unit_roundoff("float32") else 0.0


# ---- inputs --------------------------------------------------------------------------------------


def seq_lengths(batch: int, length: int, gen: torch.Generator) -> list[int]:
    """Per-sequence lengths in [1, length]; the last is ``length`` so max_seqlen is the declared one."""
    lens = torch.randint(1, length + 1, (batch,), generator=gen).tolist()
    lens[-1] = length
    return [int(n) for n in lens]


def _inputs(cfg: Attention) -> Callable[..., Tensors]:
    def make(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
        b, h, hk, length, d = shape
        if not cfg.varlen:
            return draw((b, h, cfg.q_len or length, d), dtype, gen, dist), *(
                draw((b, hk, length, d), dtype, gen, dist) for _ in range(2)
            )
        lens = seq_lengths(b, length, gen)
        total = sum(lens)
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
        q = draw((total, h, d), dtype, gen, dist)
        k, v = (draw((total, hk, d), dtype, gen, dist) for _ in range(2))
        return q, k, v, cu, cu.clone()

    return make


# ---- oracle and bound ----------------------------------------------------------------------------


def _mask(lq: int, lk: int, cfg: Attention, device: torch.device) -> torch.Tensor | None:
    """True where a key is visible. Causal, aligned top-left (torch's sdpa): key j ≤ query i; aligned
    bottom-right (FlashAttention >= 2.1): key j ≤ query i + lk − lq, so the last query sees every key.
    ``cfg.diagonal``: the mistake of a mask shifted by that many keys. ``cfg.window``: only the ``window``
    latest keys (i − j < window, aligned as the causal mask)."""
    if not cfg.causal and not cfg.window:
        return None
    shift = lk - lq if cfg.causal_align == "bottom-right" else 0
    ones = torch.ones(lq, lk, dtype=torch.bool, device=device)
    mask = ones.tril(cfg.diagonal + shift) if cfg.causal else ones
    return mask & ones.triu(shift - cfg.window + 1) if cfg.window else mask


# the softcap as written: the right one, and the shipped mistakes (the multiply by c lost, s for c, both / c)
CAP_FORMS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "c·tanh(s/c)": lambda s, c: c * torch.tanh(s / c),
    "s·tanh(s/c)": lambda s, c: s * torch.tanh(s / c),
    "tanh(s/c)": lambda s, c: torch.tanh(s / c),
    "t·tanh(t), t = s/c": lambda s, c: (s / c) * torch.tanh(s / c),
}


def _expand_kv(q: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Grouped-query heads: kv head j serves q heads j·g … j·g + g − 1 (g = heads / kv_heads)."""
    return t.repeat_interleave(q.shape[-3] // t.shape[-3], dim=-3)


def _probs(q: torch.Tensor, k: torch.Tensor, cfg: Attention) -> torch.Tensor:
    s = _scores(q, k, cfg)
    return torch.softmax(s, dim=-1)


def _scores(q: torch.Tensor, k: torch.Tensor, cfg: Attention) -> torch.Tensor:
    s = cfg.scale_for(q.shape[-1]) * (q @ k.transpose(-1, -2))
    m = _mask(q.shape[-2], k.shape[-2], cfg, q.device)
    if m is not None and cfg.mask_first:  # the mistake: a large negative score, then capped to −softcap
        s = s.masked_fill(~m, -1e30)
    if cfg.softcap:
        s = CAP_FORMS[cfg.cap_form](s, cfg.softcap)
    return s.masked_fill(~m, float("-inf")) if m is not None and not cfg.mask_first else s


def stale_online_softmax(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: Attention) -> torch.Tensor:
    """The flash-attention mistake: an online softmax over K-blocks of ``cfg.stale_block`` keys whose running
    max rises without the accumulator (and with ``stale_l`` the row sum) being rescaled by exp(m_old − m_new)."""
    s = _scores(q, k, cfg)
    m = torch.full(s.shape[:-1], float("-inf"), dtype=s.dtype, device=s.device)
    row = torch.zeros_like(m)
    acc = torch.zeros((*s.shape[:-1], v.shape[-1]), dtype=s.dtype, device=s.device)
    for j in range(0, s.shape[-1], cfg.stale_block):
        blk = s[..., j : j + cfg.stale_block]
        m_new = torch.maximum(m, blk.amax(-1))
        p = (blk - m_new[..., None]).exp().nan_to_num(0.0)
        alpha = torch.where(m == float("-inf"), torch.zeros_like(m), (m - m_new).exp())
        row = (row if cfg.stale_l else alpha * row) + p.sum(-1)
        acc = acc + p @ v[..., j : j + cfg.stale_block, :]
        m = m_new
    return acc / row[..., None]


def _kv(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: Attention
) -> tuple[torch.Tensor, torch.Tensor]:
    """k and v for every q head (the modulo mapping is the grouped-query mistake the diagnosis tests)."""
    if cfg.kv_modulo:
        g = q.shape[-3] // k.shape[-3]
        return tuple(t.repeat(*[1] * (t.dim() - 3), g, 1, 1) for t in (k, v))  # type: ignore[return-value]
    return _expand_kv(q, k), _expand_kv(q, v)


def dense_oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: Attention) -> torch.Tensor:
    k, v = _kv(q, k, v, cfg)
    if cfg.stale_block:
        return stale_online_softmax(q, k, v, cfg)
    return _probs(q, k, cfg) @ v


def dense_bound(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, y: torch.Tensor, cfg: Attention, ba: BoundArgs
) -> torch.Tensor:
    """Per-element allowed |error| of one dense attention (derivation: docs/ops.md#attention)."""
    k, v = _kv(q, k, v, cfg)
    d, lk = q.shape[-1], k.shape[-2]
    m = _mask(q.shape[-2], lk, cfg, q.device)
    s_abs = cfg.scale_for(d) * (q.abs() @ k.abs().transpose(-1, -2))
    if m is not None:
        s_abs = s_abs.masked_fill(~m, 0.0)
    n = m.sum(-1, keepdim=True).to(q.dtype) if m is not None else torch.full((1, 1), float(lk))
    # |δS| ≤ (λ√d + 1)·u_acc·scale·|q||k| (the dot product, then the scaling), plus u_in·… when a kernel
    # scales q in the input dtype first; softmax turns a row's |δS| ≤ ε into relative |δP| ≤ 2ε.
    eps_s = (ba.lam * sqrt(d) + 1) * ba.u_acc * s_abs.amax(dim=-1, keepdim=True)
    if cfg.softcap:  # tanh's slope is at most 1; its argument, tanh and the product round: 3u·softcap (a
        eps_s = eps_s + 3 * ba.u_acc * cfg.softcap  # capped score held in the input dtype is e_in's, below)
    p = _probs(q, k, cfg)
    pv = p @ v.abs()
    # 16-bit inputs: a kernel may hold the scores in the input dtype (torch's CPU flash kernel does: without
    # this term its bf16 budget is 0.47-0.77): δS_ij ≤ u_in·|S_ij|, independent roundings, so the output moves
    # by λ·u_in·√Σ_j (P_ij·S_ij·(v_j − y_i))², bounded with |v_j| + |y_i|
    ps = (p * cfg.scale_for(d) * (q @ k.transpose(-1, -2)).nan_to_num(0)) ** 2
    e_in = (
        ba.lam * ba.u_in * ((ps @ (v * v)).sqrt() + y.abs() * ps.sum(-1, keepdim=True).sqrt())
        if ba.u_in > 2.0**-24
        else 0.0
    )
    # exp, the row sum (λ√n·u), the online rescales and the division: relative error of every P
    rel = 2 * eps_s + (ba.lam * n.sqrt() + 6) * ba.u_acc
    # P rounded to p_dtype before P·V: Σ θ_j·P_j·v_j with |θ_j| ≤ u_p, independent roundings (λ·√Σ(P·v)²,
    # never more than the worst case Σ P|v|)
    u_p = cfg.u_p(ba)
    e_p = u_p * torch.minimum(ba.lam * ((p * p) @ (v * v)).sqrt(), pv) if u_p else 0.0
    e_q = _prescaled_q(q, k, v, p, cfg, ba)
    return (rel + ba.lam * n.sqrt() * ba.u_acc) * pv + e_p + e_in + e_q + ba.u_out * y.abs()


# the 16-bit input dtypes by unit roundoff: a kernel may round q·scale back to its input's dtype
_IN_DTYPES = {2.0**-11: torch.float16, 2.0**-8: torch.bfloat16}


def _prescaled_q(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: torch.Tensor, cfg: Attention, ba: BoundArgs
) -> torch.Tensor | float:
    """|δy| of a kernel that scales q in its 16-bit input dtype before the dot product (flash-attention's
    ``attention_ref(upcast=False)``: ``q / sqrt(d)``), to first order and exactly: δq = fl(q·scale) − q·scale
    per element (0 where the scale is a power of two), δS = δq·Kᵀ (through the softcap's slope), and softmax
    moves the output by Σ_j P_ij·(δS_ij − Σ_l P_il·δS_il)·v_j. A deviation, not a worst case: it is what that
    rounding does to these inputs (docs/ops.md#attention)."""
    dtype = _IN_DTYPES.get(ba.u_in)
    if dtype is None:
        return 0.0
    qs = cfg.scale_for(q.shape[-1]) * q
    dq = qs.to(dtype).to(q.dtype) - qs
    if not bool(dq.any()):
        return 0.0
    ds = dq @ k.transpose(-1, -2)
    if cfg.softcap:
        ds = ds * (1 - torch.tanh((qs @ k.transpose(-1, -2)) / cfg.softcap) ** 2)
    ds = (p * ds).nan_to_num(0.0)
    return ((ds - p * ds.sum(-1, keepdim=True)) @ v).abs()


def _rss(t: torch.Tensor) -> torch.Tensor:
    """√Σ t² over the last dimension (kept)."""
    return (t * t).sum(-1, keepdim=True).sqrt()


def _delta_error(
    q: torch.Tensor,
    kx: torch.Tensor,
    vx: torch.Tensor,
    dy: torch.Tensor,
    p: torch.Tensor,
    y: torch.Tensor,
    dp: torch.Tensor,
    cfg: Attention,
    ba: BoundArgs,
) -> torch.Tensor:
    """Allowed |error| of D_i = Σ_d dY_id·O_id read from the kernel's rounded O (FlashAttention's backward),
    each of O's errors carried through dY (docs/ops.md#attention): O's roundings and P·V's sums are
    independent over d (λ·√Σ_d); P's relative errors and P's rounding meet dY as Σ_j P_ij·ρ_j·dP_ij (dP = dY·Vᵀ);
    scores held in the input dtype as Σ_j P_ij·δS_ij·(dP_ij − D_i); D's own sum λ·√D·u."""
    lam, u, d = ba.lam, ba.u_acc, q.shape[-1]
    m = _mask(q.shape[-2], kx.shape[-2], cfg, q.device)
    n = m.sum(-1, keepdim=True).to(q.dtype) if m is not None else torch.full((1, 1), float(kx.shape[-2]))
    rel = 2 * _eps_scores(q, kx, cfg, ba) + (lam * n.sqrt() + 6) * u
    pv = p @ vx.abs()
    per_d = lam * n.sqrt() * u * pv + lam * (ba.u_in + ba.u_out) * y.abs()
    pdp = p * dp
    out = _rss(dy * per_d) + rel * pdp.abs().sum(-1, keepdim=True)
    u_p = cfg.u_p(ba)
    if u_p:
        out = out + u_p * torch.minimum(lam * _rss(pdp), pdp.abs().sum(-1, keepdim=True))
    if ba.u_in > 2.0**-24:
        s = cfg.scale_for(d) * (q @ kx.transpose(-1, -2)).nan_to_num(0)
        delta = (dy * y).sum(-1, keepdim=True)
        out = out + lam * ba.u_in * _rss(p * s * (dp - delta))
    return out + lam * sqrt(d) * u * (dy * y).abs().sum(-1, keepdim=True)


def _eps_scores(q: torch.Tensor, kx: torch.Tensor, cfg: Attention, ba: BoundArgs) -> torch.Tensor:
    """ε_i: the largest |δS_ij| of a row (the dot product, the scaling, the softcap), as dense_bound's."""
    s_abs = cfg.scale_for(q.shape[-1]) * (q.abs() @ kx.abs().transpose(-1, -2))
    m = _mask(q.shape[-2], kx.shape[-2], cfg, q.device)
    if m is not None:
        s_abs = s_abs.masked_fill(~m, 0.0)
    eps = (ba.lam * sqrt(q.shape[-1]) + 1) * ba.u_acc * s_abs.amax(dim=-1, keepdim=True)
    return eps + 3 * ba.u_acc * cfg.softcap if cfg.softcap else eps


def _group_sum(t: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """Sum the q heads that share a kv head (dK and dV of grouped-query attention)."""
    b = t.shape[:-3]
    return t.reshape(*b, kv_heads, t.shape[-3] // kv_heads, *t.shape[-2:]).sum(-3)


def dense_grad_bound(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dy: torch.Tensor, cfg: Attention, ba: BoundArgs
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Allowed |error| of dQ, dK, dV before their final rounding (derivation: docs/ops.md#attention).

    FlashAttention's backward: P recomputed (relative error as in the forward) and rounded to p_dtype;
    dV = Pᵀ·dY; dP = dY·Vᵀ; D = rowsum(dY∘O) from the kernel's own O (its forward error, and O rounded to
    the input dtype); dS = P∘(dP − D) rounded to p_dtype; dQ = scale·dS·K, dK = scale·dSᵀ·Q; grouped heads
    add their q heads' dK and dV."""
    hk = k.shape[-3]
    kx, vx = _expand_kv(q, k), _expand_kv(q, v)
    d, lq, lk = q.shape[-1], q.shape[-2], kx.shape[-2]
    sc, lam, u = cfg.scale_for(d), ba.lam, ba.u_acc
    p = _probs(q, kx, cfg)
    y = p @ vx
    # relative error of each recomputed P_ij, independent across elements: its score's dot product
    # √D·u_acc·scale·|q||k| and rounding u_in·|S| (as in the forward), exp, and P rounded to p_dtype
    u_p = cfg.u_p(ba)
    sigma = sc * (
        sqrt(d) * u * (q.abs() @ kx.abs().transpose(-1, -2)) + ba.u_in * (q @ kx.transpose(-1, -2)).abs()
    )
    sigma = sigma + u_p + 2 * u
    # and one shared by a row: the P-weighted mean of those (softmax subtracts it) and the row sum
    n = (p > 0).sum(-1, keepdim=True).to(p.dtype)
    row = lam * ((p * p * sigma * sigma).sum(-1, keepdim=True)).sqrt() + (lam * n.sqrt() + 4) * u
    dp = dy @ vx.transpose(-1, -2)
    delta = (dy * y).sum(-1, keepdim=True)
    gap = dp - delta
    # an eager backward (autograd through matmul in the input dtype) rounds dP = dY·Vᵀ to it: 16-bit inputs
    u_dp = ba.u_in if ba.u_in > 2.0**-24 else 0.0
    e_delta = _delta_error(q, kx, vx, dy, p, y, dp, cfg, ba) + lam * u_dp * _rss(p * dp)
    ds, ds_abs = p * gap, p * gap.abs()
    # dS_ij's independent error (λ applies to the sum it enters): P's, dP's dot product and its rounding to
    # the input dtype, the subtraction and product, dS rounded to p_dtype; D's error is shared by the row
    sd = p * (
        sigma * gap.abs()
        + sqrt(d) * u * (dy.abs() @ vx.abs().transpose(-1, -2))
        + 2 * u * (dp.abs() + delta.abs())
        + u_dp * dp.abs()
        + u_p * gap.abs()
    )
    shared = p * (e_delta + row * gap.abs())
    # dQ_i: a row's shared errors move every dS_ij alike, so they meet K through the signed sums
    # Σ_j P_ij·K_j (D's) and Σ_j P_ij·(dP_ij − D_i)·K_j = dQ_i / scale (the softmax's)
    e_dq = sc * (
        lam * ((sd * sd) @ (kx * kx)).sqrt()
        + e_delta * (p @ kx).abs()
        + row * (ds @ kx).abs()
        + (lam * sqrt(lk) + 2) * u * (ds_abs @ kx.abs())
    )
    sdt, sht, dst = sd.transpose(-1, -2), shared.transpose(-1, -2), ds_abs.transpose(-1, -2)
    dk_abs = sc * (dst @ q.abs())
    # dK_j sums over queries: the rows' shared errors (D's, the softmax's) are independent from row to row,
    # each already a bound, so they add in quadrature
    e_dk = sc * (lam * ((sdt * sdt) @ (q * q)).sqrt() + ((sht * sht) @ (q * q)).sqrt())
    e_dk = e_dk + (lam * sqrt(lq) + 2) * u * dk_abs
    pt = p.transpose(-1, -2)
    dv_abs = pt @ dy.abs()
    st = sigma.transpose(-1, -2)
    e_dv = (
        lam * (((pt * st) ** 2) @ (dy * dy)).sqrt() + (((pt * row.transpose(-1, -2)) ** 2) @ (dy * dy)).sqrt()
    )
    e_dv = e_dv + lam * sqrt(lq) * u * dv_abs
    g = q.shape[-3] // hk
    e_dk = _group_sum(e_dk + lam * sqrt(g) * u * dk_abs, hk)
    e_dv = _group_sum(e_dv + lam * sqrt(g) * u * dv_abs, hk)
    return e_dq, e_dk, e_dv


def _grad_bound(cfg: Attention) -> GradBound:
    def grad_bound(
        x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs
    ) -> tuple[torch.Tensor | None, ...]:
        if cfg.varlen:
            errs = _varlen_grad(x, dy, cfg, ba)
        else:
            errs = dense_grad_bound(x[0], x[1], x[2], dy, cfg, ba)
        out = tuple(e + ba.u_out * gi.abs() for e, gi in zip(errs, g))
        return (*out, *((None, None) if cfg.varlen else ()))

    return grad_bound


def _varlen_grad(x: Tensors, dy: torch.Tensor, cfg: Attention, ba: BoundArgs) -> tuple[torch.Tensor, ...]:
    q, k, v, cu, _ = x
    parts = []
    for a, b in _segments(cu):
        qs, ks, vs, dys = (t[a:b].transpose(0, 1) for t in (q, k, v, dy))
        parts.append([e.transpose(0, 1) for e in dense_grad_bound(qs, ks, vs, dys, cfg, ba)])
    return tuple(torch.cat([p[i] for p in parts]) for i in range(3))


def _segments(cu: torch.Tensor) -> list[tuple[int, int]]:
    c = [int(x) for x in cu.tolist()]
    return list(zip(c[:-1], c[1:]))


def _per_sequence(
    fn: Callable[..., torch.Tensor],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu: torch.Tensor,
    *extra: torch.Tensor,
) -> torch.Tensor:
    """Apply a dense function to each packed sequence: (n, heads, d) slices as (heads, n, d)."""
    outs = []
    for a, b in _segments(cu):
        args = [t[a:b].transpose(0, 1) for t in (q, k, v, *extra)]
        outs.append(fn(*args).transpose(0, 1))
    return torch.cat(outs, dim=0)


def _oracle(cfg: Attention) -> Callable[..., torch.Tensor]:
    def oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *cu: torch.Tensor) -> torch.Tensor:
        if cfg.varlen and cfg.key_reach != (0, 0):
            return _reaching(q, k, v, cu[0], cfg)
        if cfg.varlen:
            return _per_sequence(lambda a, b, c: dense_oracle(a, b, c, cfg), q, k, v, cu[0])
        return dense_oracle(q, k, v, cfg)

    return oracle


def _reaching(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, cfg: Attention
) -> torch.Tensor:
    """Non-causal varlen attention whose key blocks are moved by ``cfg.key_reach`` past their boundaries."""
    lo, hi = cfg.key_reach
    outs = []
    for a, b in _segments(cu):
        ka, kb = max(a + lo, 0), min(b + hi, k.shape[0])
        qq, kk, vv = q[a:b].transpose(0, 1), k[ka:kb].transpose(0, 1), v[ka:kb].transpose(0, 1)
        outs.append(dense_oracle(qq, kk, vv, cfg).transpose(0, 1))
    return torch.cat(outs, dim=0)


def _bound(cfg: Attention) -> Callable[[Tensors, torch.Tensor, BoundArgs], torch.Tensor]:
    def bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
        if cfg.varlen:
            q, k, v, cu, _ = x
            return _per_sequence(lambda a, b, c, yy: dense_bound(a, b, c, yy, cfg, ba), q, k, v, cu, y)
        return dense_bound(x[0], x[1], x[2], y, cfg, ba)

    return bound


# ---- the torch composite and the call ------------------------------------------------------------


def torch_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: Attention) -> torch.Tensor:
    """torch's own F.scaled_dot_product_attention on one dense batch, in the inputs' dtype (with a softcap
    or a window, which sdpa lacks: the scores in fp32, capped and masked, P rounded to the inputs' dtype)."""
    gqa = k.shape[-3] != q.shape[-3]
    if cfg.softcap or cfg.window:
        kk, vv = _expand_kv(q, k), _expand_kv(q, v)
        s = _scores(q.float(), kk.float(), cfg)
        return (torch.softmax(s, -1).to(q.dtype).float() @ vv.float()).to(q.dtype)
    if cfg.causal and cfg.causal_align == "bottom-right" and q.shape[-2] != k.shape[-2]:
        mask = _mask(q.shape[-2], k.shape[-2], cfg, q.device)
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=cfg.scale_for(q.shape[-1]), enable_gqa=gqa
        )
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=cfg.causal, scale=cfg.scale_for(q.shape[-1]), enable_gqa=gqa
    )


def _composite(cfg: Attention) -> Callable[..., torch.Tensor]:
    def composite(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *cu: torch.Tensor, **_: Any
    ) -> torch.Tensor:
        if cfg.varlen:
            return _per_sequence(lambda a, b, c: torch_attention(a, b, c, cfg), q, k, v, cu[0])
        return torch_attention(q, k, v, cfg)

    return composite


def mistakes(cfg: Attention) -> tuple[tuple[str, OpFamily], ...]:
    """Known wrong semantics, each as the family that has it (named by the diagnosis when the output fits)."""
    out = [
        (
            "the causal mask dropped" if cfg.causal else "a causal mask applied",
            replace(cfg, causal=not cfg.causal),
        ),
        (
            "q head h reading kv head h mod kv_heads (grouped-query heads by modulo)",
            replace(cfg, kv_modulo=True),
        ),
    ]
    if cfg.scale > 0:
        out.append(
            ("the default scale 1/sqrt(head_dim) instead of the declared one", replace(cfg, scale=0.0))
        )
    if cfg.scale != 1.0:
        out.append(("the scores not scaled by 1/√D (scale 1)", replace(cfg, scale=1.0)))
    if cfg.causal and not cfg.varlen:
        other = "top-left" if cfg.causal_align == "bottom-right" else "bottom-right"
        out.append(
            (
                f"the causal mask aligned {other} where {cfg.causal_align} is declared (they differ where the "
                "queries are fewer or more than the keys)",
                replace(cfg, causal_align=other),
            )
        )
    if cfg.causal:
        out.append(
            (
                "the causal mask off by one diagonal (each query also sees the next key)",
                replace(cfg, diagonal=1),
            )
        )
        out.append(
            (
                # the first query then sees no key at all: its row is a softmax over nothing, NaN
                "the causal mask off by one diagonal (each query misses its own key, and a query whose keys "
                "are all masked gets a NaN row; check the mask's diagonal: mask keys j > i, not j ≥ i)",
                replace(cfg, diagonal=-1),
            )
        )
    out += _softcap_window_mistakes(cfg)
    if (
        cfg.varlen and not cfg.causal
    ):  # xformers' BlockDiagonalMask, flash_attn_varlen_func: a boundary off by one
        out += [
            ("each sequence's keys run one past its end (the next sequence's first key visible: a "
             "block-diagonal boundary off by one)", replace(cfg, key_reach=(0, 1))),
            ("each sequence's keys start one before it (the previous sequence's last key visible: a "
             "block-diagonal boundary off by one)", replace(cfg, key_reach=(-1, 0))),
        ]  # fmt: skip
    for block in STALE_BLOCKS:
        for stale_l, what in ((False, "the accumulator"), (True, "the accumulator and the row sum")):
            out.append(
                (
                    f"the online-softmax rescale missing: {what} not rescaled by exp(m_old − m_new) when the "
                    f"running max rises (K-blocks of {block})",
                    replace(cfg, stale_block=block, stale_l=stale_l),
                )
            )
    return tuple((what, build(alt)) for what, alt in out)


STALE_BLOCKS = (16, 32, 64, 128)  # K-block sizes of the online-softmax mistake


def _softcap_window_mistakes(cfg: Attention) -> list[tuple[str, Attention]]:
    """The softcap written another way or applied after the mask; the sliding window off by one either way."""
    out: list[tuple[str, Attention]] = []
    if cfg.softcap:
        out += [
            (f"the softcap written {form} for c·tanh(s/c) (c = {cfg.softcap:g})", replace(cfg, cap_form=form))
            for form in CAP_FORMS
            if form != cfg.cap_form
        ]
        if cfg.causal or cfg.window:
            out.append(
                (
                    f"the mask applied before the softcap (masked scores capped to −{cfg.softcap:g}, not −inf: "
                    "masked keys still weigh)",
                    replace(cfg, mask_first=True),
                )
            )
        out.append(("the softcap not applied", replace(cfg, softcap=0.0)))
    if cfg.window:
        out += [
            (
                f"the sliding window off by one ({w} keys seen where {cfg.window} are declared)",
                replace(cfg, window=w),
            )
            for w in (cfg.window + 1, cfg.window - 1)
            if w > 0
        ]
        out.append(("the sliding window not applied", replace(cfg, window=0)))
    return out


def call_kwargs(cfg: Attention, shape: Sequence[int]) -> dict[str, Any]:
    """The keyword arguments a kernel receives besides the inputs (see the module docstring)."""
    _, h, hk, length, _ = shape
    if cfg.varlen:
        kw: dict[str, Any] = {"max_seqlen_q": length, "max_seqlen_k": length, "causal": cfg.causal}
        return kw | ({"softmax_scale": cfg.scale} if cfg.scale > 0 else {})
    kw = {"is_causal": True} if cfg.causal else {}
    kw |= {"scale": cfg.scale} if cfg.scale > 0 else {}
    kw |= {"softcap": cfg.softcap} if cfg.softcap else {}
    kw |= {"window": cfg.window} if cfg.window else {}
    return kw | ({"enable_gqa": True} if hk != h else {})


def configure(params: dict[str, Any]) -> OpFamily:
    """The family for one contract's params (causal, scale, varlen, p_dtype)."""
    return build(
        Attention(
            causal=bool(params.get("causal", False)),
            scale=float(params.get("scale", 0.0)),
            varlen=bool(params.get("varlen", False)),
            p_dtype=str(params.get("p_dtype", "")),
            q_len=0 if params.get("varlen") else int(params.get("q_len", 0)),
            causal_align=str(params.get("causal_align", "top-left")),
            softcap=abs(float(params.get("softcap", 0.0))),
            window=int(params.get("window", 0)),
        )
    )


def build(cfg: Attention) -> OpFamily:
    return replace(
        ATTENTION,
        make_inputs=_inputs(cfg),
        oracle=_oracle(cfg),
        bound=_bound(cfg),
        grad_bound=_grad_bound(cfg),
        composite=_composite(cfg),
        mistakes=lambda: mistakes(cfg),
        batch_inputs=() if cfg.varlen else (0, 1, 2),
        kwargs=lambda shape: call_kwargs(cfg, shape),
        input_names=("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k") if cfg.varlen else ("q", "k", "v"),
        sizes=_varlen_sizes if cfg.varlen else None,
    )


def _varlen_sizes(x: Tensors) -> dict[str, int]:
    """The packed layout's sizes: q (total, heads, head_dim), k (total, kv_heads, head_dim), cu_seqlens_q;
    ``length`` is the longest sequence (flash_attn_varlen_func's max_seqlen)."""
    q, k, cu = x[0], x[1], x[3]
    lengths = cu[1:] - cu[:-1]
    return {
        "batch": int(cu.numel()) - 1,
        "heads": int(q.shape[1]),
        "kv_heads": int(k.shape[1]),
        "length": int(lengths.max()) if lengths.numel() else 0,
        "head_dim": int(q.shape[2]),
    }


_DEFAULT = Attention()
ATTENTION = OpFamily(
    name="attention",
    make_inputs=_inputs(_DEFAULT),
    oracle=_oracle(_DEFAULT),
    bound=_bound(_DEFAULT),
    grad_bound=_grad_bound(_DEFAULT),
    reduction_len=lambda s: s[3],
    float_inputs=(0, 1, 2),
    batch_inputs=(0, 1, 2),
    composite=_composite(_DEFAULT),
    mistakes=lambda: mistakes(_DEFAULT),
    configure=configure,
    kwargs=lambda shape: call_kwargs(_DEFAULT, shape),
    input_names=("q", "k", "v"),
    shape_constraints=family_constraints("attention"),
)
