"""Kernels shipped for the repository's own contracts.toml: the CPU demo of every op family.

They are ordinary PyTorch compositions, as a kernel repository would write reference kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kcgate.numerics.ops.quant import torch_quant_gemm, torch_scaled_mm


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def matmul_fp32_acc(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Half-precision operands, fp32 accumulation and output (an exact contract with integer inputs)."""
    return a.float() @ b.float()


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a, b)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w, b)


def row_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=-1)


def row_mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(dim=-1)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def logsumexp(x: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(x, dim=-1)


def layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).to(x.dtype)


def gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    """The pointwise family's demo: the textbook formula, computed in fp32 and rounded once."""
    return (1 / (1 + torch.exp(-x.float()))).to(x.dtype)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x, dim=-1)


def l2norm(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=-1)


def silu(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x)


def gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.gather(x, 1, index)


def index_select(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.index_select(x, 0, index)


def embedding(indices: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.embedding(indices, weight)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: object) -> torch.Tensor:
    """torch's own attention (is_causal, scale, enable_gqa as the family passes them)."""
    return F.scaled_dot_product_attention(q, k, v, **kw)  # type: ignore[arg-type]


def rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's apply_rotary_pos_emb (NeoX rotate-half), eager torch in the inputs' dtype."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def geglu(a: torch.Tensor, b: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return F.gelu(a, approximate=approximate) * b


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, **kw: object) -> torch.Tensor:
    return F.cross_entropy(logits, target, **kw)  # type: ignore[arg-type]


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    """Quantize both operands to fp8 e4m3 (saturating), then torch._scaled_mm."""
    return torch_scaled_mm(a, b, scale_a, scale_b)


def quant_gemm(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor
) -> torch.Tensor:
    """Dequantize the int4/int8 weights in the activation dtype, then F.linear."""
    return torch_quant_gemm(x, qweight, scales, zeros)
