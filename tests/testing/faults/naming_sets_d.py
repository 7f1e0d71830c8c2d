"""Issue 48's held-out set D: the bug variants the issue's own two trials describe and no earlier set holds
(an Euler scan step, four quantised-matmul mistakes, a block-diagonal boundary, a causal conv reading the
future, a stale fused residual, a lost linear-attention gradient path, llama3 rope scaling, top-p renormalisation).

Each is one change to a library's correct kernel (cited), under the contract a new user would write from
docs/ops.md and docs/custom-op.md (a family where one exists, else ``op = "custom"`` with no tolerance), with the
causes that name it right written down and committed before the set's first run. ``AMENDED`` lists right sets
changed after a run, counted apart. ``python -m tests.testing.faults.naming_sets_d [seeds]`` runs it.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F

from benchmarks import custom_ops_kernels as CK
from tests.testing.faults.naming_sets import SEEDS, Named, _b, measure, tally

WS = frozenset({"wrong-semantics"})
PATH = frozenset({"wrong-semantics", "missing-term"})


def _randn(
    shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator, scale: float = 1.0
) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


# ---- selective scan (state-spaces/mamba mamba_ssm/ops/selective_scan_interface.py, selective_scan_ref) --------


def scan_ref(u, delta, a, bb, cc, dd):  # type: ignore[no-untyped-def]
    return CK._scan(u, delta, a, bb, cc, dd, last=False)


def scan_euler(u, delta, a, bb, cc, dd):  # type: ignore[no-untyped-def]
    """selective_scan_ref with deltaA = 1 + Δ·A (an Euler step) where exp(Δ·A) is the discretisation."""
    dtype_in = u.dtype
    u, delta, bb, cc = u.float(), delta.float(), bb.float(), cc.float()
    delta_a = 1 + torch.einsum("bdl,dn->bdln", delta, a)
    delta_b_u = torch.einsum("bdl,bnl,bdl->bdln", delta, bb, u)
    x = a.new_zeros((u.shape[0], a.shape[0], a.shape[1]))
    ys = []
    for i in range(u.shape[2]):
        x = delta_a[:, :, i] * x + delta_b_u[:, :, i]
        ys.append(torch.einsum("bdn,bn->bd", x, cc[:, :, i]))
    return (torch.stack(ys, dim=2) + u * dd[:, None]).to(dtype_in)


# ---- causal conv1d (Dao-AILab/causal-conv1d causal_conv1d/causal_conv1d_interface.py, causal_conv1d_ref) -----


def conv_ref(x, weight, bias):  # type: ignore[no-untyped-def]
    return CK.causal_conv1d(x, weight, bias)


def conv_reads_future(x, weight, bias):  # type: ignore[no-untyped-def]
    """causal_conv1d_ref with padding width - 2: each output reads one sample past its own position."""
    dim, width = weight.shape
    out = F.conv1d(x.float(), weight.float().unsqueeze(1), bias.float(), padding=width - 2, groups=dim)
    return out[..., : x.shape[-1]].to(x.dtype)


# ---- fused add + RMSNorm (vllm-project/vllm vllm/model_executor/layers/layernorm.py, forward_native) ----------


def add_rms_ref(x, residual, w):  # type: ignore[no-untyped-def]
    return CK.fused_add_rms_norm(x, residual, w)


def add_rms_old_residual(x, residual, w):  # type: ignore[no-untyped-def]
    """The fused kernel in fp32 that writes the normed sum but returns the residual it was given."""
    h = x.float() + residual.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype), residual.clone()


# ---- chunked linear attention (fla-org/flash-linear-attention fla/ops/linear_attn/naive.py) --------------------


def lin_ref(q, k, v):  # type: ignore[no-untyped-def]
    return CK._chunked(q, k, v)[0]


def lin_no_state_grad(q, k, v):  # type: ignore[no-untyped-def]
    """naive_chunk_linear_attn whose backward loses the inter-chunk path: dk and dv only from their own chunk
    (the state's gradient dh never reaches the keys and values of earlier chunks)."""
    dtype, (b, t, h, d) = q.dtype, q.shape
    c = CK.CHUNK
    pad = (-t) % c
    qf, kf, vf = (F.pad(x.float(), (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
    n = (t + pad) // c

    def chunks(x):  # type: ignore[no-untyped-def]
        return x.reshape(b, n, c, h, d).permute(0, 3, 1, 2, 4)

    qc, kc, vc = chunks(qf) * d**-0.5, chunks(kf), chunks(vf)
    kv = (kc.detach().transpose(-1, -2) @ vc.detach()).cumsum(2)
    kv = torch.cat([torch.zeros_like(kv[:, :, :1]), kv[:, :, :-1]], dim=2)
    mask = torch.triu(torch.ones(c, c, dtype=torch.bool), diagonal=1)
    o = qc @ kv + (qc @ kc.transpose(-1, -2)).masked_fill(mask, 0) @ vc
    return o.permute(0, 2, 3, 1, 4).reshape(b, n * c, h, d)[:, :t].to(dtype)


# ---- 4-bit dequantisation (bitsandbytes bitsandbytes/functional.py: dequantize_4bit, get_4bit_type) -----------
NF4 = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0)  # fmt: skip
FP4 = (0.0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, -0.0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0)  # / 12
BLOCK = 64  # bitsandbytes' blocksize for the absmax


def nf4_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    """(m, k, n): x (m, k), the weight packed two 4-bit codes a byte (n, k/2) uint8, absmax (n, k/BLOCK)."""
    m, k, n = shape
    codes = torch.randint(0, 16, (n, k), generator=gen, dtype=torch.int64)
    packed = (codes[:, 0::2] * 16 + codes[:, 1::2]).to(torch.uint8)  # the first element in the high nibble
    absmax = (0.05 * (1 + torch.rand(n, k // BLOCK, generator=gen, dtype=torch.float64))).to(dtype)
    return _randn((m, k), dtype, gen), packed, absmax


def _dequant(packed, absmax, table, high_first=True):  # type: ignore[no-untyped-def]
    p = packed.to(torch.int64)
    hi, lo = torch.div(p, 16, rounding_mode="floor"), p % 16
    first, second = (hi, lo) if high_first else (lo, hi)
    idx = torch.stack((first, second), -1).reshape(packed.shape[0], -1)
    code = torch.tensor(table, dtype=absmax.dtype)
    return code[idx] * absmax.repeat_interleave(BLOCK, dim=-1)


def nf4_ref(x, packed, absmax):  # type: ignore[no-untyped-def]
    return x @ _dequant(packed, absmax, NF4).T


def nf4_nibbles_swapped(x, packed, absmax):  # type: ignore[no-untyped-def]
    """The low nibble read as the first element of each byte."""
    return (x.float() @ _dequant(packed, absmax.float(), NF4, high_first=False).T).to(x.dtype)


def nf4_fp4_table(x, packed, absmax):  # type: ignore[no-untyped-def]
    """The FP4 code table (normalised to 1) used for NF4-quantised weights."""
    return (x.float() @ _dequant(packed, absmax.float(), tuple(v / 12 for v in FP4)).T).to(x.dtype)


# ---- quant_gemm (AutoGPTQ / AutoAWQ dequantisation: W = (q - zero)·scale per group) ---------------------------


def _gemm(x, w):  # type: ignore[no-untyped-def]
    return (x.float() @ w.float().T).to(x.dtype)


def gptq_scale_per_channel(x, q, scales, zeros):  # type: ignore[no-untyped-def]
    """AutoGPTQ-style dequantisation reading group 0's scale and zero for every column (g_idx all zero)."""
    return _gemm(x, (q.to(x.dtype) - zeros[:, :1]) * scales[:, :1])


def awq_zero_added(x, q, scales, zeros):  # type: ignore[no-untyped-def]
    """AutoAWQ-style dequantisation (iweights - izeros)·scales written with the zero-point added."""
    g = q.shape[-1] // scales.shape[-1]
    s, z = scales.repeat_interleave(g, -1), zeros.repeat_interleave(g, -1)
    return _gemm(x, (q.to(x.dtype) + z) * s)


# ---- block-diagonal attention (xformers BlockDiagonalMask / flash_attn_varlen_func) ------------------------------


def varlen_boundary_plus_one(
    q, k, v, cu_q, cu_k, max_seqlen_q=0, max_seqlen_k=0, causal=False, softmax_scale=None
):  # type: ignore[no-untyped-def]
    """A varlen kernel whose key blocks end one past cu_seqlens_k[i + 1]: each sequence also sees the next one's
    first key (the block-diagonal boundary off by one)."""
    scale = softmax_scale or 1 / math.sqrt(q.shape[-1])
    g = q.shape[1] // k.shape[1]
    outs = []
    total = k.shape[0]
    for i in range(len(cu_q) - 1):
        q0, q1 = int(cu_q[i]), int(cu_q[i + 1])
        k0, k1 = int(cu_k[i]), min(int(cu_k[i + 1]) + 1, total)
        qi = q[q0:q1].float().transpose(0, 1)
        ki = k[k0:k1].float().repeat_interleave(g, 1).transpose(0, 1)
        vi = v[k0:k1].float().repeat_interleave(g, 1).transpose(0, 1)
        s = qi @ ki.mT * scale
        if causal:
            s = s.masked_fill(
                torch.ones_like(s, dtype=torch.bool).triu(1 + (k1 - k0) - (q1 - q0)), float("-inf")
            )
        outs.append((s.softmax(-1) @ vi).transpose(0, 1))
    return torch.cat(outs).to(q.dtype)


# ---- llama3 rope scaling (huggingface/transformers src/transformers/modeling_rope_utils.py) ---------------------
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "old_context_len": 8192}


def rope_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    b, h, length, d = shape
    return (_randn((b, h, length, d), dtype, gen),)


def _llama3_inv_freq(d: int, inverted: bool = False) -> torch.Tensor:
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    c = LLAMA3
    low_wl, high_wl = (
        c["old_context_len"] / c["low_freq_factor"],
        c["old_context_len"] / c["high_freq_factor"],
    )
    wavelen = 2 * math.pi / inv_freq
    llama = torch.where(wavelen > low_wl, inv_freq / c["factor"], inv_freq)
    smooth = (c["old_context_len"] / wavelen - c["low_freq_factor"]) / (
        c["high_freq_factor"] - c["low_freq_factor"]
    )
    if inverted:  # the variant: the two ends of the interpolation swapped
        smooth = 1 - smooth
    smoothed = (1 - smooth) * llama / c["factor"] + smooth * llama
    medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
    return torch.where(medium, smoothed, llama)


def _rope(x: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    pos = torch.arange(x.shape[-2], dtype=inv_freq.dtype)
    ang = torch.outer(pos, inv_freq)
    emb = torch.cat((ang, ang), -1)
    x1, x2 = x.chunk(2, -1)
    return x * emb.cos().to(x.dtype) + torch.cat((-x2, x1), -1) * emb.sin().to(x.dtype)


def llama3_rope_ref(x):  # type: ignore[no-untyped-def]
    return _rope(x, _llama3_inv_freq(x.shape[-1]).to(torch.float32 if x.dtype != torch.float64 else x.dtype))


def llama3_rope_smooth_inverted(x):  # type: ignore[no-untyped-def]
    """The medium band's interpolation weights swapped (smooth for 1 - smooth)."""
    return _rope(x.float(), _llama3_inv_freq(x.shape[-1], inverted=True).float()).to(x.dtype)


# ---- top-k / top-p filtering (vllm-project/vllm vllm/v1/sample/ops/topk_topp_sampler.py, apply_top_k_top_p) ----
TOP_K, TOP_P = 16, 0.8


def logits_inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
    return (_randn(shape, dtype, gen, 2.0),)


def _top_k_top_p(logits: torch.Tensor, renormalise: bool = True) -> torch.Tensor:
    """The probabilities after top-k then top-p filtering: each row's kept tokens, summing to 1."""
    srt, idx = logits.sort(dim=-1, descending=False)
    kth = srt[..., -TOP_K : -TOP_K + 1]
    srt = srt.masked_fill(srt < kth, float("-inf"))
    p = srt.softmax(-1)
    cum = p.cumsum(-1)
    srt = srt.masked_fill(cum <= 1 - TOP_P, float("-inf"))  # the top token's cum is 1: always kept
    kept = torch.empty_like(srt).scatter_(-1, idx, srt)
    if renormalise:
        return kept.softmax(-1)
    # the variant: the top-k probabilities with the top-p tail zeroed, never renormalised
    pk = torch.empty_like(p).scatter_(-1, idx, p)
    return pk.masked_fill(kept == float("-inf"), 0.0)


def topp_ref(logits):  # type: ignore[no-untyped-def]
    return _top_k_top_p(logits)


def topp_not_renormalised(logits):  # type: ignore[no-untyped-def]
    return _top_k_top_p(logits.float(), renormalise=False).to(logits.dtype)


# ---- the set: (bug, the causes that name it right, a fragment a right summary must hold) -------------------------

SET_D: tuple[Named, ...] = (
    Named(
        _b("mamba-scan-euler-step", "custom", "float32", (2, 4, 8, 32), scan_euler,
           custom=(CK._scan_inputs, scan_ref)),
        WS,
    ),
    Named(
        _b("causal-conv1d-reads-future-bf16", "custom", "bfloat16", (2, 16, 64), conv_reads_future,
           custom=(CK._conv_inputs, conv_ref)),
        WS,
    ),
    Named(
        _b("vllm-fused-add-rmsnorm-old-residual-bf16", "custom", "bfloat16", (16, 256), add_rms_old_residual,
           custom=(CK._xrw, add_rms_ref)),
        WS,
        "residual",
    ),
    Named(
        _b("fla-linear-attn-bwd-no-state-path", "custom", "float32", (1, 32, 2, 16), lin_no_state_grad,
           custom=(CK._lin_inputs, lin_ref), direction="backward"),
        PATH,
    ),
    Named(
        _b("bnb-nf4-nibbles-swapped-bf16", "custom", "bfloat16", (16, 256, 32), nf4_nibbles_swapped,
           custom=(nf4_inputs, nf4_ref)),
        WS,
    ),
    Named(
        _b("bnb-fp4-table-for-nf4-bf16", "custom", "bfloat16", (16, 256, 32), nf4_fp4_table,
           custom=(nf4_inputs, nf4_ref)),
        WS,
    ),
    Named(
        _b("gptq-group-scale-per-channel-bf16", "quant_gemm", "bfloat16", (32, 512, 64), gptq_scale_per_channel,
           params=(("bits", 4), ("group_size", 128))),
        WS,
        "channel",
    ),
    Named(
        _b("awq-zero-point-added-fp16", "quant_gemm", "float16", (32, 256, 64), awq_zero_added,
           params=(("bits", 4), ("group_size", 64))),
        WS,
        "zero",
    ),
    Named(
        _b("xformers-blockdiag-boundary-plus-one", "attention", "float32", (4, 2, 2, 32, 32),
           varlen_boundary_plus_one, params=(("varlen", True),)),
        WS,
    ),
    Named(
        _b("hf-llama3-rope-smooth-inverted", "custom", "float32", (1, 2, 128, 64), llama3_rope_smooth_inverted,
           custom=(rope_inputs, llama3_rope_ref)),
        WS,
    ),
    Named(
        _b("vllm-top-p-not-renormalised", "custom", "float32", (32, 128), topp_not_renormalised,
           custom=(logits_inputs, topp_ref)),
        frozenset({"wrong-semantics", "scaled-rows"}),
    ),
)  # fmt: skip

# Right sets changed after the first run, counted apart (none yet).
AMENDED: dict[str, frozenset[str]] = {}


def main(argv: list[str]) -> int:
    seeds = tuple(int(a) for a in argv) or SEEDS
    rows = measure(SET_D, seeds, AMENDED)
    for n, got in rows:
        for v, _st, cause, summary in got:
            print(f"{v:10s} {n.bug.id:42s} {cause or '-':24s} {summary[:160]}", flush=True)
    t = tally(rows)
    print(
        f"set D: {t['cases']} cases ({t['bugs']} bugs x {len(seeds)} seeds): caught {t['caught']}, "
        f"named right {t['right']}, says less {sum(g[0] == 'less' for _, got in rows for g in got)}, "
        f"misleading {t['misleading']}; one name across seeds {t['one-name']}/{t['bugs']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
