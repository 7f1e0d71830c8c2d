"""Normalisations written as model code ships them (transformers' LlamaRMSNorm and GemmaRMSNorm, Liger's
casting modes), at their own eps: kcgate's ``params.eps``, ``weight_offset`` and ``casting_mode`` declare them."""

from __future__ import annotations

import torch


class LlamaRMSNorm(torch.nn.Module):
    """transformers' LlamaRMSNorm: fp32 statistics, x̂ cast back to the input dtype before ``weight * h``."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class GemmaRMSNorm(torch.nn.Module):
    """transformers' GemmaRMSNorm: all in fp32, the weight stored as w with scale 1 + w, one rounding last."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.zeros(dim))

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


class T5LayerNorm(torch.nn.Module):
    """transformers' T5LayerNorm: the variance in fp32, ``x * rsqrt(variance + eps)`` with x still 16-bit (the
    product promotes to fp32), cast to the weight's dtype when that is 16-bit, then ``weight * h``."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


def t5_detached_rstd(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """T5's rmsnorm with the statistic detached (a gradient path lost): the forward is right, dx is not."""
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True).detach()
    return w * (x * torch.rsqrt(variance + 1e-6)).to(w.dtype)


def rms_norm_eps6(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A Llama-style fused kernel at eps = 1e-6 (Liger's default)."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)


def rms_norm_none_mode(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Liger's casting_mode "none": the statistic in fp32, every elementwise step in the input dtype."""
    r = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)
    return (x * r) * (1.0 + w)


def rms_norm_eps_outside(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The eps-placement bug: x / (√mean(x²) + eps) instead of x / √(mean(x²) + eps)."""
    x32 = x.float()
    return (x32 / (x32.pow(2).mean(-1, keepdim=True).sqrt() + 1e-5) * w.float()).to(x.dtype)


def layer_norm_eps12(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """BERT's layernorm eps."""
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-12)
