"""Issue 48's held-out set C: 12 bug variants of library kernels (Liger, transformers, vLLM, xformers, apex),
written after the naming thresholds were set and committed, with the causes that name each right, before its
first run. Each is a variant of a shipped bug class on a kernel and dtype no earlier set used, under the
contract docs/ops.md suggests; one is outside every family's known mistakes (a window off by two), where an
honest "exceeds the bound" is the most a name can say.

``python -m tests.testing.faults.naming_sets_variants [seeds]`` runs it (seeds 0 and 1 by default) with the
runner of naming_sets.py and prints right / says less / misleading / missed per bug and seed.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F

from tests.testing.faults.naming_sets import SEEDS, Named, _b, measure, tally

WS = frozenset({"wrong-semantics"})
EXTENT = frozenset({"wrong-semantics", "wrong-extent"})


# ---- kernels ------------------------------------------------------------------------------------------------------


def swiglu_silu_on_up(a, b):  # type: ignore[no-untyped-def]
    """Liger-style swiglu with the gate and up projections swapped: a·silu(b)."""
    return (a.float() * F.silu(b.float())).to(a.dtype)


def geglu_tanh_for_erf(a, b):  # type: ignore[no-untyped-def]
    """transformers' GeGLU with the tanh gelu where the model's is the exact one."""
    return (F.gelu(a.float(), approximate="tanh") * b.float()).to(a.dtype)


def _attn(diag: int = 0, scaled: bool = True, window_delta: int = 0):  # type: ignore[no-untyped-def]
    def kernel(q, k, v, is_causal=False, scale=None, enable_gqa=False, softcap=0.0, window=0):  # type: ignore[no-untyped-def]
        kk = k.repeat_interleave(q.shape[-3] // k.shape[-3], -3)
        vv = v.repeat_interleave(q.shape[-3] // v.shape[-3], -3)
        s = q.float() @ kk.float().mT
        if scaled:
            s = s * (scale or 1 / math.sqrt(q.shape[-1]))
        lq, lk = s.shape[-2:]
        i, j = torch.arange(lq)[:, None], torch.arange(lk)[None, :]
        hide = (j > i + diag) if is_causal else torch.zeros(lq, lk, dtype=torch.bool)
        if window:
            hide = hide | (i - j >= window + window_delta)
        return (s.masked_fill(hide, float("-inf")).softmax(-1) @ vv.float()).to(q.dtype)

    return kernel


attn_causal_sees_next = _attn(diag=1)  # each query also sees the next key
attn_unscaled = _attn(scaled=False)  # xformers-style memory-efficient attention that forgot the 1/√D
attn_window_minus_two = _attn(window_delta=-2)  # a sliding window two keys short


def ce_smoothing_ignored(
    logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, softcap=0.0
):  # type: ignore[no-untyped-def]
    """A fused cross-entropy that accepts label_smoothing and never applies it."""
    return F.cross_entropy(logits.float(), target, reduction=reduction, ignore_index=ignore_index).to(
        logits.dtype
    )


class _LayerNormDw(torch.autograd.Function):
    """apex-style layer norm whose dW and dB partials of the first program (its first 32 rows) are never reduced
    with the others' (``rows``), or an rmsnorm's dW of the last program only."""

    @staticmethod
    def forward(ctx, x, w, b, rows):  # type: ignore[no-untyped-def]
        xf = x.float()
        mu = xf.mean(-1, keepdim=True) if b is not None else torch.zeros_like(xf[..., :1])
        r = torch.rsqrt(((xf - mu) ** 2).mean(-1, keepdim=True) + 1e-5)
        xhat = (xf - mu) * r
        ctx.save_for_backward(xhat, w.float(), r)
        ctx.rows, ctx.centred = rows, b is not None
        out = xhat * w.float() + (b.float() if b is not None else 0.0)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        xhat, wf, r = ctx.saved_tensors
        g = dy.float()
        wg = wf * g
        dx = wg - xhat * (wg * xhat).mean(-1, keepdim=True)
        if ctx.centred:
            dx = dx - wg.mean(-1, keepdim=True)
        keep = slice(*ctx.rows)
        dw = (g * xhat)[keep].sum(0)
        db = g[keep].sum(0) if ctx.centred else None
        return (r * dx).to(dy.dtype), dw.to(dy.dtype), None if db is None else db.to(dy.dtype), None


def layernorm_dw_first_32_rows(x, w, b):  # type: ignore[no-untyped-def]
    return _LayerNormDw.apply(x, w, b, (0, 32))


def rmsnorm_dw_last_16_rows(x, w):  # type: ignore[no-untyped-def]
    return _LayerNormDw.apply(x, w, None, (-16, None))


class _SoftmaxNoY(torch.autograd.Function):
    """A softmax whose hand-written backward drops the y factor: dx = dy − Σ(y·dy)."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        y = x.float().softmax(-1)
        ctx.save_for_backward(y)
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[no-untyped-def]
        (y,) = ctx.saved_tensors
        g = dy.float()
        return (g - (y * g).sum(-1, keepdim=True)).to(dy.dtype)


def softmax_backward_no_y(x):  # type: ignore[no-untyped-def]
    return _SoftmaxNoY.apply(x)


def vllm_rmsnorm_under_gemma(x, w):  # type: ignore[no-untyped-def]
    """vLLM's forward_native (x̂ rounded to the input dtype, then × w in it) run where gemma's casting is declared."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w


def rope_neox_rotate_wrong_sign(q, k, cos, sin):  # type: ignore[no-untyped-def]
    """A NeoX rope whose rotate_half returns (x₂, −x₁): each pair rotated by −θ."""

    c, s = cos.float().unsqueeze(1), sin.float().unsqueeze(1)  # (b, L, D) tables over (b, h, L, D) heads

    def rot(x):  # type: ignore[no-untyped-def]
        x1, x2 = x.float().chunk(2, -1)
        return (x.float() * c + torch.cat((x2, -x1), -1) * s).to(x.dtype)

    return rot(q), rot(k)


# ---- the set: (bug, the causes that name it right, a fragment the summary must hold) -----------------------------

VARIANTS: tuple[Named, ...] = (
    Named(_b("liger-swiglu-silu-on-up-bf16", "swiglu", "bfloat16", (64, 1024), swiglu_silu_on_up), WS, "up"),
    Named(_b("hf-geglu-tanh-for-erf-fp16", "geglu", "float16", (64, 1024), geglu_tanh_for_erf), WS, "tanh"),
    Named(
        _b(
            "hf-attn-causal-sees-next-bf16",
            "attention",
            "bfloat16",
            (1, 4, 2, 64, 64),
            attn_causal_sees_next,
            params=(("causal", True),),
        ),
        WS,
        "causal",
    ),
    Named(
        _b("xformers-attn-unscaled-fp32", "attention", "float32", (1, 4, 2, 64, 64), attn_unscaled), WS, "√"
    ),
    Named(
        _b(
            "mistral-window-minus-two-fp32",
            "attention",
            "float32",
            (1, 4, 2, 96, 64),
            attn_window_minus_two,
            params=(("causal", True), ("window", 16)),
        ),
        WS,
        "window",
    ),
    Named(
        _b(
            "liger-ce-smoothing-ignored-fp32",
            "cross_entropy",
            "float32",
            (64, 2048),
            ce_smoothing_ignored,
            params=(("label_smoothing", 0.1),),
        ),
        WS,
        "smoothing",
    ),
    Named(
        _b(
            "apex-layernorm-dw-first-32-rows",
            "layernorm",
            "float32",
            (256, 512),
            layernorm_dw_first_32_rows,
            direction="backward",
        ),
        EXTENT,
        "32 rows",
    ),
    Named(
        _b(
            "liger-rmsnorm-dw-last-16-rows-bf16",
            "rmsnorm",
            "bfloat16",
            (128, 1024),
            rmsnorm_dw_last_16_rows,
            direction="backward",
        ),
        EXTENT,
        "16 rows",
    ),
    Named(
        _b(
            "softmax-backward-no-y-bf16",
            "softmax",
            "bfloat16",
            (64, 1024),
            softmax_backward_no_y,
            direction="backward",
        ),
        WS,
        "y",
    ),
    Named(
        _b(
            "vllm-rmsnorm-under-gemma-fp16",
            "rmsnorm",
            "float16",
            (128, 4096),
            vllm_rmsnorm_under_gemma,
            params=(("casting_mode", "gemma"),),
        ),
        WS,
        "cast",
    ),
    Named(
        _b(
            "neox-rope-rotate-wrong-sign-fp16",
            "rope",
            "float16",
            (1, 4, 2, 128, 64),
            rope_neox_rotate_wrong_sign,
        ),
        WS,
        "−θ",
    ),
    Named(
        _b(
            "liger-ce-smoothing-ignored-bf16-none",
            "cross_entropy",
            "bfloat16",
            (32, 4096),
            ce_smoothing_ignored,
            params=(("label_smoothing", 0.2), ("reduction", "none")),
        ),
        WS,
        "smoothing",
    ),
)

# Right sets changed after the first run, counted apart (none yet).
AMENDED: dict[str, frozenset[str]] = {}


def main(argv: list[str]) -> int:
    seeds = tuple(int(a) for a in argv) or SEEDS
    rows = measure(VARIANTS, seeds, AMENDED)
    for n, got in rows:
        for v, _st, cause, summary in got:
            print(f"{v:10s} {n.bug.id:40s} {cause or '-':24s} {summary[:150]}")
    t = tally(rows)
    print(
        f"variants: {t['cases']} cases ({t['bugs']} bugs x {len(seeds)} seeds): caught {t['caught']}, "
        f"named right {t['right']}, misleading {t['misleading']}; one name across seeds {t['one-name']}/{t['bugs']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
