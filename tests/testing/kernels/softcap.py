"""Softcapped cross-entropy kernels (Gemma 2's final logits: softcap·tanh(logits / softcap)), written as a
Triton kernel computes them: one block of the next power of two per row, lanes past n loaded as −inf.

``leaky_padded`` is the shipped bug: it applies the softcap to the loaded block, so the padded lanes become
softcap·tanh(−inf) = −softcap, a finite logit that enters the logsumexp. On ordinary logits (|x| of a few
units against a cap of 30) they weigh e^−30 and vanish; where the cap saturates (every logit near −cap) they
weigh as much as real lanes. The correct kernels mask after the cap, or cap without padding."""

from __future__ import annotations

import torch

F = torch.nn.functional


def _loss(
    lse: torch.Tensor, picked: torch.Tensor, target: torch.Tensor, reduction: str, ignore: int
) -> torch.Tensor:
    keep = target != ignore
    loss = torch.where(keep, lse - picked, torch.zeros_like(lse))
    return loss.sum() / keep.sum().clamp_min(1) if reduction == "mean" else loss


def _block(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The row loaded into a power-of-two block, lanes past n at −inf (``tl.load(..., other=-inf)``)."""
    n = x.shape[-1]
    width = 1 << (n - 1).bit_length()
    return F.pad(x.float(), (0, width - n), value=float("-inf")), n


def leaky_padded(
    logits: torch.Tensor,
    target: torch.Tensor,
    reduction: str = "mean",
    ignore_index: int = -100,
    softcap: float = 0.0,
) -> torch.Tensor:
    """The bug: softcap applied to the padded block, padded lanes then count as −softcap in the logsumexp."""
    block, n = _block(logits)
    if softcap:
        block = softcap * torch.tanh(block / softcap)  # tanh(−inf) = −1: the padding becomes −softcap
    lse = torch.logsumexp(block, -1)
    picked = block.gather(-1, target.clamp(0, n - 1)[:, None])[:, 0]
    return _loss(lse, picked, target, reduction, ignore_index).to(logits.dtype)


def masked_padded(
    logits: torch.Tensor,
    target: torch.Tensor,
    reduction: str = "mean",
    ignore_index: int = -100,
    softcap: float = 0.0,
) -> torch.Tensor:
    """The fix: the same block, the padded lanes set back to −inf after the softcap."""
    block, n = _block(logits)
    if softcap:
        block = softcap * torch.tanh(block / softcap)
        lanes = torch.arange(block.shape[-1])
        block = torch.where(lanes < n, block, torch.full_like(block, float("-inf")))
    lse = torch.logsumexp(block, -1)
    picked = block.gather(-1, target.clamp(0, n - 1)[:, None])[:, 0]
    return _loss(lse, picked, target, reduction, ignore_index).to(logits.dtype)


def torch_softcapped(
    logits: torch.Tensor,
    target: torch.Tensor,
    reduction: str = "mean",
    ignore_index: int = -100,
    softcap: float = 0.0,
) -> torch.Tensor:
    """torch's own cross-entropy of the capped logits, in the input dtype (as model code writes it)."""
    x = softcap * torch.tanh(logits / softcap) if softcap else logits
    return F.cross_entropy(x, target, ignore_index=ignore_index, reduction=reduction)
