"""Correct kernels that are not the gate's own reference: the false-alarm corpus (issue 32).

benchmarks/false_alarms.py runs every entry of ``CORPUS`` over many seeds, and tests/test_false_alarms.py
runs the issue's examples; a correct kernel must never fail. A kernel that *is* the family's composite
(torch's op where torch's op is the sensitivity gate's reference) is not here: its ratio is 1 by
construction and proves nothing about false alarms.

Kinds (``Entry.kind``):

* ``eager16``: 16-bit eager composites as transformers and vLLM write them, rounding intermediates to the
  input dtype (attention scores, the normalised x of LlamaRMSNorm and T5LayerNorm);
* ``upcast``: fp32-upcast composites (compute in float32, round once);
* ``textbook``: textbook formulas (sigmoid ``1/(1 + exp(−x))``, l2norm ``x/√Σx²``, gelu through erf,
  softmax through a saved logsumexp, cross-entropy ``logsumexp(x) − x[t]``);
* ``blocked``: tiled, blocked, split-K and online-softmax orders as Triton kernels compute them;
* ``torch``: torch's own kernels where torch's op is not the reference (einsum, addmm, fp64 and cast).

Transformers, vLLM, flash-attention and Liger are not installed here: each kernel is rewritten from the
library's source as it ships, and its docstring names the function it follows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

F = torch.nn.functional
EPS = 1e-5  # the rmsnorm and layernorm families' eps (torch's default)


def _acc(x: torch.Tensor) -> torch.Tensor:
    """float32 for 16-bit tensors, as the upcast kernels compute."""
    return x.float() if x.dtype.itemsize < 4 else x


# ---- matmul, bmm, linear -----------------------------------------------------------------------------


def tiled_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A Triton GEMM's K loop: ``acc += tl.dot(a_tile, b_tile)`` over K tiles of 32, fp32 accumulator."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for s in range(0, a.shape[1], 32):
        acc = acc + a[:, s : s + 32].float() @ b[s : s + 32].float()
    return acc.to(a.dtype)


def split_k_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Split-K in 4 slices, each an fp32 GEMM, reduced in fp32 (CUTLASS's split-K serial reduction)."""
    cuts = [round(a.shape[1] * i / 4) for i in range(5)]
    parts = [a[:, s:e].float() @ b[s:e].float() for s, e in zip(cuts, cuts[1:])]
    return sum(parts[1:], parts[0]).to(a.dtype)


def einsum_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.einsum, upcast to fp32 (the opt_einsum path people write for contractions)."""
    return torch.einsum("ik,kj->ij", _acc(a), _acc(b)).to(a.dtype)


def tiled_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One tiled GEMM per batch entry."""
    return torch.stack([tiled_matmul(x, y) for x, y in zip(a, b)])


def addmm_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.addmm(b, x, w.T)`` in fp32, rounded once (a fused-bias GEMM epilogue)."""
    return torch.addmm(_acc(b), _acc(x), _acc(w).T).to(x.dtype)


def tiled_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x·wᵀ over K tiles of 32 in fp32, the bias added in fp32 (a Triton GEMM with a bias epilogue)."""
    a, wt = _acc(x), _acc(w).T
    acc = torch.zeros(a.shape[0], wt.shape[1], dtype=a.dtype)
    for s in range(0, a.shape[1], 32):
        acc = acc + a[:, s : s + 32] @ wt[s : s + 32]
    return (acc + _acc(b)).to(x.dtype)


# ---- row reductions ----------------------------------------------------------------------------------


def _tree(x: torch.Tensor) -> torch.Tensor:
    """A pairwise tree over the last dimension (``tl.sum``'s order), zero-padded to a power of two."""
    n = x.shape[-1]
    p = 1 << max(0, (n - 1).bit_length())
    x = F.pad(x, (0, p - n))
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


def _blocked(x: torch.Tensor, block: int) -> torch.Tensor:
    """Trees within blocks of ``block``, a running sum across them (a Triton loop over ``tl.sum`` blocks)."""
    acc = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for s in range(0, x.shape[-1], block):
        acc = acc + _tree(x[..., s : s + block])
    return acc


def tree_sum(x: torch.Tensor) -> torch.Tensor:
    return _tree(_acc(x)).to(x.dtype)


def blocked_sum_256(x: torch.Tensor) -> torch.Tensor:
    return _blocked(_acc(x), 256).to(x.dtype)


def blocked_mean(x: torch.Tensor) -> torch.Tensor:
    return (_blocked(_acc(x), 1024) / x.shape[-1]).to(x.dtype)


def sum_then_divide_mean(x: torch.Tensor) -> torch.Tensor:
    """``x.sum(-1) / n`` in fp32 (the mean people write)."""
    return (_acc(x).sum(-1) / x.shape[-1]).to(x.dtype)


def liger_softmax(x: torch.Tensor) -> torch.Tensor:
    """Liger's single-block softmax: max, exp(x − max), a tree sum, divide, in fp32."""
    a = _acc(x)
    e = torch.exp(a - a.amax(-1, keepdim=True))
    return (e / _tree(e)[..., None]).to(x.dtype)


def online_softmax(x: torch.Tensor) -> torch.Tensor:
    """The online softmax of flash kernels (Milakov & Gimelshein): blocks of 128, a running max and a
    rescaled running sum, then a second pass for exp(x − m)/l."""
    a = _acc(x)
    m = torch.full(a.shape[:-1], -math.inf, dtype=a.dtype)
    s = torch.zeros(a.shape[:-1], dtype=a.dtype)
    for j in range(0, a.shape[-1], 128):
        blk = a[..., j : j + 128]
        m_new = torch.maximum(m, blk.amax(-1))
        s = s * torch.exp(m - m_new) + _tree(torch.exp(blk - m_new[..., None]))
        m = m_new
    return (torch.exp(a - m[..., None]) / s[..., None]).to(x.dtype)


def saved_lse_softmax(x: torch.Tensor) -> torch.Tensor:
    """``exp(x − lse)`` from an online-computed row logsumexp: flash-attention's and Triton softmax
    kernels' form (the lse saved for the backward)."""
    a = _acc(x)
    m = a.amax(-1, keepdim=True)
    lse = m + torch.log(_blocked(torch.exp(a - m), 128))[..., None]
    return torch.exp(a - lse).to(x.dtype)


def log_softmax_exp(x: torch.Tensor) -> torch.Tensor:
    """``log_softmax(x).exp()`` in fp32 (a kernel that keeps log-probabilities)."""
    return torch.log_softmax(_acc(x), -1).exp().to(x.dtype)


def fp64_softmax(x: torch.Tensor) -> torch.Tensor:
    """torch's softmax in float64, rounded once to the input dtype."""
    return torch.softmax(x.double(), -1).to(x.dtype)


def online_logsumexp(x: torch.Tensor) -> torch.Tensor:
    """Blocks of 128 with a running max and rescaled sum, in fp32 (flash-attention's row statistic)."""
    a = _acc(x)
    m = torch.full(a.shape[:-1], -math.inf, dtype=a.dtype)
    s = torch.zeros(a.shape[:-1], dtype=a.dtype)
    for j in range(0, a.shape[-1], 128):
        blk = a[..., j : j + 128]
        m_new = torch.maximum(m, blk.amax(-1))
        s = s * torch.exp(m - m_new) + _tree(torch.exp(blk - m_new[..., None]))
        m = m_new
    return (m + torch.log(s)).to(x.dtype)


def two_pass_layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Liger's layernorm: mean and centred variance by tree sums in fp32, rstd, then ·w + b."""
    a = _acc(x)
    n = a.shape[-1]
    mu = _tree(a) / n
    d = a - mu[..., None]
    rstd = torch.rsqrt(_tree(d * d) / n + EPS)
    return (d * rstd[..., None] * w.float() + b.float()).to(x.dtype)


def welford_layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Apex's/vLLM's layernorm statistics by Welford's update over blocks of 256, in fp32."""
    a = _acc(x)
    count, mean, m2 = 0, torch.zeros(a.shape[:-1]), torch.zeros(a.shape[:-1])
    for j in range(0, a.shape[-1], 256):
        blk = a[..., j : j + 256]
        nb = blk.shape[-1]
        mb = _tree(blk) / nb
        m2b = _tree((blk - mb[..., None]) ** 2)
        delta = mb - mean
        total = count + nb
        mean = mean + delta * nb / total
        m2 = m2 + m2b + delta * delta * count * nb / total
        count = total
    rstd = torch.rsqrt(m2 / count + EPS)
    return ((a - mean[..., None]) * rstd[..., None] * w.float() + b.float()).to(x.dtype)


def llama_rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """transformers' ``LlamaRMSNorm.forward``: variance in fp32, ``x * rsqrt(var + eps)``, rounded to the
    input dtype, then ``weight * x`` in the input dtype."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return w * h.to(x.dtype)


def t5_layernorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """transformers' ``T5LayerNorm.forward``: the variance in fp32, ``x * rsqrt(var + eps)`` in fp32,
    converted to the weight's dtype when that is 16-bit, then ``weight * x``."""
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    h = x * torch.rsqrt(variance + EPS)
    if w.dtype in (torch.float16, torch.bfloat16):
        h = h.to(w.dtype)
    return w * h


def vllm_rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """vLLM's ``RMSNorm.forward_native``: fp32, ``x * rsqrt(mean(x²) + eps)``, to the input dtype, ·w."""
    orig = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return h.to(orig) * w


def blocked_rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Liger's rmsnorm in the llama casting mode: sum of squares in blocks of 256, rstd, all in fp32."""
    a = _acc(x)
    rstd = torch.rsqrt(_blocked(a * a, 256) / a.shape[-1] + EPS)
    return (a * rstd[..., None] * w.float()).to(x.dtype)


# ---- pointwise and gated -----------------------------------------------------------------------------


def erf_gelu(x: torch.Tensor) -> torch.Tensor:
    """The textbook gelu ``0.5·x·(1 + erf(x/√2))`` in fp32 (BERT's and GPT-2's original code)."""
    a = _acc(x)
    return (0.5 * a * (1.0 + torch.erf(a / math.sqrt(2.0)))).to(x.dtype)


def eager_silu(x: torch.Tensor) -> torch.Tensor:
    """``x * torch.sigmoid(x)`` in the input dtype (transformers' SiLUActivation before F.silu)."""
    return x * torch.sigmoid(x)


def textbook_silu(x: torch.Tensor) -> torch.Tensor:
    """``x / (1 + exp(−x))`` in fp32."""
    a = _acc(x)
    return (a / (1.0 + torch.exp(-a))).to(x.dtype)


def liger_swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Liger's swiglu forward: ``silu(a)`` in fp32, times b, rounded once."""
    a32 = a.float()
    return (a32 * torch.sigmoid(a32) * b.float()).to(a.dtype)


def liger_geglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """geglu with the erf gelu in fp32, times b, rounded once."""
    a32 = a.float()
    return (0.5 * a32 * (1.0 + torch.erf(a32 / math.sqrt(2.0))) * b.float()).to(a.dtype)


def upcast_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's apply_rotary_pos_emb computed in fp32 and rounded once (Liger's rope kernel)."""
    c, s = cos.float().unsqueeze(1), sin.float().unsqueeze(1)

    def rot(t: torch.Tensor) -> torch.Tensor:
        t1, t2 = t.chunk(2, dim=-1)
        return torch.cat((-t2, t1), dim=-1)

    q32, k32 = q.float(), k.float()
    return (q32 * c + rot(q32) * s).to(q.dtype), (k32 * c + rot(k32) * s).to(k.dtype)


# ---- attention ---------------------------------------------------------------------------------------


def _repeat_kv(t: torch.Tensor, h: int) -> torch.Tensor:
    """transformers' ``repeat_kv``: each kv head repeated for its group of query heads."""
    return t if t.shape[-3] == h else t.repeat_interleave(h // t.shape[-3], dim=-3)


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    """transformers' ``eager_attention_forward`` (vLLM's reference attention and flash-attention's
    ``attention_ref(upcast=False)`` round the same way): ``matmul(q, kᵀ) * scaling`` in the input dtype, a
    causal mask, ``softmax(dtype=float32).to(q.dtype)``, ``matmul(p, v)``."""
    k, v = _repeat_kv(k, q.shape[-3]), _repeat_kv(v, q.shape[-3])
    scaling = kw.get("scale") or q.shape[-1] ** -0.5
    s = torch.matmul(q, k.transpose(2, 3)) * scaling
    if kw.get("is_causal"):
        n, m = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(1), torch.finfo(s.dtype).min)
    p = F.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(p, v)


def upcast_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    """flash-attention's ``attention_ref(upcast=True)``: everything in fp32, rounded once."""
    out = eager_attention(q.float(), k.float(), v.float(), **kw)
    return out.to(q.dtype)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    """FlashAttention-2's forward loop in fp32: key blocks of 32, a running max and sum, the output
    rescaled per block (online softmax), P·V on P rounded to the input dtype as the kernel's tl.dot does."""
    k, v = _repeat_kv(k, q.shape[-3]).float(), _repeat_kv(v, q.shape[-3]).float()
    scaling = kw.get("scale") or q.shape[-1] ** -0.5
    q32 = q.float() * scaling
    n = q.shape[-2]
    m = torch.full(q.shape[:-1], -math.inf)
    ell = torch.zeros(q.shape[:-1])
    acc = torch.zeros(q32.shape)
    rows = torch.arange(n)[:, None]
    for j in range(0, k.shape[-2], 32):
        s = q32 @ k[..., j : j + 32, :].transpose(-1, -2)
        if kw.get("is_causal"):
            s = s.masked_fill(torch.arange(j, j + s.shape[-1])[None, :] > rows, -math.inf)
        m_new = torch.maximum(m, s.amax(-1))
        alpha = torch.exp(m - m_new).nan_to_num(0.0)
        p = torch.exp(s - m_new[..., None]).nan_to_num(0.0)
        ell = ell * alpha + p.sum(-1)
        acc = acc * alpha[..., None] + p.to(q.dtype).float() @ v[..., j : j + 32, :]
        m = m_new
    return (acc / ell[..., None]).to(q.dtype)


def eager_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return eager_attention(q, k, v)


def upcast_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return upcast_attention(q, k, v)


# ---- cross-entropy -----------------------------------------------------------------------------------


def lse_cross_entropy(logits: torch.Tensor, target: torch.Tensor, **kw: Any) -> torch.Tensor:
    """``logsumexp(x) − x[t]`` per row in fp32, the mean over the rows not ignored (Liger's forward)."""
    ignore = int(kw.get("ignore_index", -100))
    x = logits.float()
    keep = target != ignore
    picked = x.gather(1, target.clamp(0)[:, None])[:, 0]
    loss = torch.where(keep, torch.logsumexp(x, -1) - picked, 0.0)
    if kw.get("reduction", "mean") == "mean":
        loss = loss.sum() / keep.sum().clamp_min(1)
    return loss.to(logits.dtype)


class _MicroBatchCE(torch.autograd.Function):
    """A fused cross-entropy with its own backward, over micro-batches of 4 rows: the loss of each is a sum
    ``logsumexp − x[t]``, added up and divided by the number of non-ignored rows of the whole batch (the
    fixed gradient-accumulation loss: dividing by each micro-batch's own count was the bug). The gradient
    is ``(softmax(x) − onehot(t)) · dy / count`` on kept rows, 0 on ignored ones, computed in fp32."""

    @staticmethod
    def forward(
        ctx: Any, logits: torch.Tensor, target: torch.Tensor, ignore: int, mean: bool
    ) -> torch.Tensor:  # type: ignore[override]
        x = logits.float()
        keep = target != ignore
        count = keep.sum().clamp_min(1) if mean else torch.tensor(1)
        t = target.clamp(0)
        rows = []
        for s in range(0, x.shape[0], 4):
            xs, ts, ks = x[s : s + 4], t[s : s + 4], keep[s : s + 4]
            rows.append(torch.where(ks, torch.logsumexp(xs, -1) - xs.gather(1, ts[:, None])[:, 0], 0.0))
        per_row = torch.cat(rows)
        ctx.save_for_backward(logits, target)
        ctx.ignore, ctx.mean = ignore, mean
        if mean:
            total = torch.zeros((), dtype=torch.float32)
            for s in range(0, per_row.shape[0], 4):
                total = total + per_row[s : s + 4].sum()
            return (total / count).to(logits.dtype)
        return per_row.to(logits.dtype)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        logits, target = ctx.saved_tensors
        x = logits.float()
        keep = target != ctx.ignore
        g = torch.softmax(x, -1)
        g[torch.arange(x.shape[0]), target.clamp(0)] -= 1.0
        if ctx.mean:
            scale = dy.float() / keep.sum().clamp_min(1)
            g = g * scale
        else:
            g = g * dy.float()[:, None]  # reduction = "none": each row's own upstream gradient
        g = torch.where(keep[:, None], g, 0.0)
        return g.to(logits.dtype), None, None, None


def micro_batch_cross_entropy(logits: torch.Tensor, target: torch.Tensor, **kw: Any) -> torch.Tensor:
    """The fused cross-entropy above (mean over non-ignored tokens across micro-batches, or per-row)."""
    mean = kw.get("reduction", "mean") == "mean"
    return _MicroBatchCE.apply(logits, target, int(kw.get("ignore_index", -100)), mean)  # type: ignore[no-any-return]


# ---- indexing (exact families) -----------------------------------------------------------------------


def take_gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.take_along_dim(x, index, dim=1)


def indexing_select(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return x[index]


def indexing_embedding(index: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return w[index]


# ---- custom ops: textbook sigmoid and l2norm ---------------------------------------------------------


def normal_inputs(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=gen).to(dtype)


def sigmoid_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x)


def textbook_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """``1/(1 + exp(−x))``, in fp32 (the peer corpus's control kernel)."""
    return (1.0 / (1.0 + torch.exp(-_acc(x)))).to(x.dtype)


def l2norm_reference(x: torch.Tensor) -> torch.Tensor:
    return x / x.square().sum(-1, keepdim=True).sqrt()


def textbook_l2norm(x: torch.Tensor) -> torch.Tensor:
    """``x / √(Σx²)`` over the last dimension, in fp32 (the peer corpus's control kernel)."""
    a = _acc(x)
    return (a / torch.sqrt((a * a).sum(-1, keepdim=True))).to(x.dtype)


# ---- the corpus --------------------------------------------------------------------------------------

DT3 = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Entry:
    """One correct kernel under one contract: what the benchmark and the tests run."""

    name: str
    op: str
    kernel: str  # this module's function name
    kind: str  # eager16, upcast, textbook, blocked, torch (module docstring)
    shape: tuple[int, ...]
    dtypes: tuple[str, ...] = DT3
    params: tuple[tuple[str, Any], ...] = ()
    backward: bool = False  # also run direction = "both" (the kernel is differentiable)
    extra: tuple[str, ...] = field(default=())  # further TOML lines for the contract (custom ops)
    skip: tuple[str, ...] = ()  # classes whose property the kernel does not have (see its entry's comment)
    module: str = (
        "tests.testing.kernels.correct"  # where ``kernel`` lives (issue 46's held-out set elsewhere)
    )


_SIG = (
    'inputs = "tests.testing.kernels.correct:normal_inputs"',
    'reference = "tests.testing.kernels.correct:sigmoid_reference"',
    'tolerance = { method = "error-bound" }',
)
_L2 = (
    'inputs = "tests.testing.kernels.correct:normal_inputs"',
    'reference = "tests.testing.kernels.correct:l2norm_reference"',
    'tolerance = { method = "error-bound" }',
)

CORPUS: tuple[Entry, ...] = (
    Entry("tiled-matmul", "matmul", "tiled_matmul", "blocked", (32, 256, 32), backward=True),
    Entry("split-k-matmul", "matmul", "split_k_matmul", "blocked", (17, 129, 33)),
    Entry("einsum-matmul", "matmul", "einsum_matmul", "torch", (32, 256, 32), backward=True),
    Entry("tiled-bmm", "bmm", "tiled_bmm", "blocked", (2, 16, 128, 16)),
    Entry("addmm-linear", "linear", "addmm_linear", "torch", (32, 256, 32), backward=True),
    Entry("tiled-linear", "linear", "tiled_linear", "blocked", (32, 256, 32)),
    Entry("tree-sum", "sum", "tree_sum", "blocked", (16, 2048), backward=True),
    Entry("blocked-sum", "sum", "blocked_sum_256", "blocked", (8, 8192)),
    Entry("blocked-mean", "mean", "blocked_mean", "blocked", (16, 2048)),
    Entry("sum-divide-mean", "mean", "sum_then_divide_mean", "textbook", (16, 2048), backward=True),
    Entry("liger-softmax", "softmax", "liger_softmax", "blocked", (32, 512), backward=True),
    Entry("online-softmax", "softmax", "online_softmax", "blocked", (8, 4096)),
    # exp(x − lse) rounds lse = m + log l at |m|: under C-PRC-02's offset probes (x + c) its relative error is
    # u·|c|, a real loss of accuracy that class exists to catch (budget ~30 at fp32's probe offset)
    Entry(
        "saved-lse-softmax",
        "softmax",
        "saved_lse_softmax",
        "textbook",
        (16, 1024),
        backward=True,
        skip=("C-PRC-02",),
    ),
    Entry("log-softmax-exp", "softmax", "log_softmax_exp", "textbook", (16, 1024), backward=True),
    Entry("fp64-softmax", "softmax", "fp64_softmax", "torch", (32, 512), backward=True),
    Entry("online-logsumexp", "logsumexp", "online_logsumexp", "blocked", (64, 512), backward=True),
    Entry("two-pass-layernorm", "layernorm", "two_pass_layernorm", "blocked", (32, 512), backward=True),
    Entry("welford-layernorm", "layernorm", "welford_layernorm", "blocked", (32, 512)),
    Entry("llama-rmsnorm", "rmsnorm", "llama_rmsnorm", "eager16", (32, 512), backward=True),
    Entry("t5-layernorm", "rmsnorm", "t5_layernorm", "eager16", (32, 512), backward=True),
    Entry("vllm-rmsnorm", "rmsnorm", "vllm_rmsnorm", "eager16", (32, 512), backward=True),
    Entry("blocked-rmsnorm", "rmsnorm", "blocked_rmsnorm", "blocked", (32, 512), backward=True),
    Entry("erf-gelu", "gelu", "erf_gelu", "textbook", (32, 512), backward=True),
    Entry("eager-silu", "silu", "eager_silu", "eager16", (32, 512), backward=True),
    Entry("textbook-silu", "silu", "textbook_silu", "textbook", (32, 512), backward=True),
    Entry("liger-swiglu", "swiglu", "liger_swiglu", "upcast", (32, 512), backward=True),
    Entry("upcast-geglu", "geglu", "liger_geglu", "upcast", (32, 512), backward=True),
    Entry("upcast-rope", "rope", "upcast_rope", "upcast", (1, 4, 2, 32, 32), backward=True),
    Entry("eager-attention", "attention", "eager_attention", "eager16", (1, 4, 4, 32, 32), backward=True),
    Entry(
        "eager-attention-gqa-causal",
        "attention",
        "eager_attention",
        "eager16",
        (1, 4, 2, 32, 32),
        params=(("causal", True),),
    ),
    Entry("upcast-attention", "attention", "upcast_attention", "upcast", (1, 4, 4, 32, 32)),
    Entry(
        "flash-attention",
        "attention",
        "flash_attention",
        "blocked",
        (1, 4, 2, 64, 32),
        params=(("causal", True),),
    ),
    Entry("eager-sdpa", "sdpa", "eager_sdpa", "eager16", (1, 4, 32, 32), backward=True),
    Entry("upcast-sdpa", "sdpa", "upcast_sdpa", "upcast", (1, 4, 32, 32)),
    Entry("lse-cross-entropy", "cross_entropy", "lse_cross_entropy", "textbook", (16, 1024), backward=True),
    Entry(
        "lse-cross-entropy-none",
        "cross_entropy",
        "lse_cross_entropy",
        "textbook",
        (16, 1024),
        params=(("reduction", "none"),),
        backward=True,
    ),
    Entry(
        "micro-batch-cross-entropy",
        "cross_entropy",
        "micro_batch_cross_entropy",
        "blocked",
        (16, 1024),
        ("float32",),
        backward=True,
    ),
    Entry(
        "micro-batch-cross-entropy-none",
        "cross_entropy",
        "micro_batch_cross_entropy",
        "blocked",
        (16, 1024),
        ("float32",),
        params=(("reduction", "none"),),
        backward=True,
    ),
    Entry("take-along-dim-gather", "gather", "take_gather", "torch", (64, 256, 32)),
    Entry("indexing-select", "index_select", "indexing_select", "torch", (64, 256, 32)),
    Entry("indexing-embedding", "embedding", "indexing_embedding", "torch", (64, 256, 32)),
    Entry("textbook-sigmoid", "custom", "textbook_sigmoid", "textbook", (32, 512), ("float32",), extra=_SIG),
    Entry("textbook-l2norm", "custom", "textbook_l2norm", "textbook", (32, 512), ("float32",), extra=_L2),
)


def toml(
    entry: Entry,
    klass: str,
    dtype: str,
    direction: str = "forward",
    seeds: int = 1,
    shape: tuple[int, ...] | None = None,
) -> str:
    """The contract a new user writes for the entry, from the docs (one dtype, one class); ``shape``: declare
    this one instead of the entry's."""
    params = ", ".join(f"{k} = {_value(v)}" for k, v in entry.params)
    lines = [
        "[[contract]]",
        f'id = "{entry.name}-{klass}-{dtype}-{direction}"',
        f'class = "{klass}"',
        f'kernel = "{entry.module}:{entry.kernel}"',
        f'op = "{entry.op}"',
        f'dtypes = ["{dtype}"]',
        f"shapes = [{list(shape or entry.shape)}]",
        f"protocol = {{ seeds = {seeds} }}",
        *([f"params = {{ {params} }}"] if params else []),
        *([f'direction = "{direction}"'] if direction != "forward" else []),
        *entry.extra,
    ]
    return "\n".join(lines) + "\n"


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)
