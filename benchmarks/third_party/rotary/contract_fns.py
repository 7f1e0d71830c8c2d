"""Kernels, inputs and references for rotary-embedding-torch's documented uses (its README: Usage, Inference
Key-Value Cache, Axial Rotary Embeddings, interpolate_factor), written from the README and the RoFormer paper
(arXiv 2104.09864), not from the library's code. Each kernel holds one module per process, as a model does.
Used by benchmarks/release_replay.py; the package itself is vendored per release by the replay."""

from __future__ import annotations

import math

import torch

ROT_DIM = 32  # RotaryEmbedding(dim = 32), as the README's example, on 64-wide heads: half the features rotate
THETA = 10000.0
_MODULES: dict[str, object] = {}


def _module(kind: str):  # type: ignore[no-untyped-def]
    from rotary_embedding_torch import RotaryEmbedding

    if kind not in _MODULES:
        kw = {"interpolated": {"interpolate_factor": 2.0}, "pixel": {"freqs_for": "pixel", "max_freq": 256}}
        _MODULES[kind] = RotaryEmbedding(dim=ROT_DIM if kind != "pixel" else ROT_DIM // 2, **kw.get(kind, {}))
    return _MODULES[kind]


# ---- the kernels (the library, as the README calls it) ---------------------------------------------------


def rotate(q: torch.Tensor) -> torch.Tensor:
    return _module("lang").rotate_queries_or_keys(q)  # type: ignore[attr-defined]


def rotate_interpolated(q: torch.Tensor) -> torch.Tensor:
    return _module("interpolated").rotate_queries_or_keys(q)  # type: ignore[attr-defined]


def rotate_with_cached_keys(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _module("lang").rotate_queries_with_cached_keys(q, k)  # type: ignore[attr-defined]


def rotate_query_at_offset(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The README's manual form: rotate_queries_or_keys(q, offset = k.shape[-2] - q.shape[-2])."""
    return _module("lang").rotate_queries_or_keys(q, offset=k.shape[-2] - q.shape[-2])  # type: ignore[attr-defined]


def rotate_axial(x: torch.Tensor) -> torch.Tensor:
    from rotary_embedding_torch import apply_rotary_emb

    freqs = _module("pixel").get_axial_freqs(x.shape[-3], x.shape[-2])  # type: ignore[attr-defined]
    return apply_rotary_emb(freqs, x)


# ---- inputs ----------------------------------------------------------------------------------------------


def make_q(shape, dtype, generator):  # type: ignore[no-untyped-def]
    """(batch, heads, seq, head dim); the head dim must hold the rotated features."""
    assert len(shape) == 4 and shape[-1] >= ROT_DIM and shape[-1] % 2 == 0, shape
    return (torch.randn(shape, generator=generator).to(dtype),)


def make_qk(shape, dtype, generator):  # type: ignore[no-untyped-def]
    """Keys of ``shape`` (the cache, concatenated) and queries for its last quarter."""
    (k,) = make_q(shape, dtype, generator)
    q_shape = (*shape[:-2], max(1, shape[-2] // 4), shape[-1])
    return torch.randn(q_shape, generator=generator).to(dtype), k


def make_image(shape, dtype, generator):  # type: ignore[no-untyped-def]
    """(batch, height, width, features): image tokens, two axes of ROT_DIM // 2 rotated features each."""
    assert len(shape) == 4 and shape[-1] >= ROT_DIM and shape[-1] % 2 == 0, shape
    return (torch.randn(shape, generator=generator).to(dtype),)


# ---- references (RoFormer: each pair (x[2i], x[2i+1]) rotated by position * theta_i) ----------------------


def _rotate_pairs(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate the first angles.shape[-1] * 2 features of x, pair by pair; the rest pass through."""
    n = angles.shape[-1] * 2
    h = x.float()
    pairs = h[..., :n].reshape(*h.shape[:-1], n // 2, 2)
    cos, sin = angles.cos(), angles.sin()
    a, b = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).reshape(*h.shape[:-1], n)
    return torch.cat((rotated, h[..., n:]), dim=-1).to(x.dtype)


def _lang_angles(positions: torch.Tensor) -> torch.Tensor:
    theta = 1.0 / THETA ** (torch.arange(0, ROT_DIM, 2).float() / ROT_DIM)
    return positions.float()[:, None] * theta  # (seq, ROT_DIM / 2)


def rotate_ref(q: torch.Tensor) -> torch.Tensor:
    return _rotate_pairs(q, _lang_angles(torch.arange(q.shape[-2])))


def rotate_interpolated_ref(q: torch.Tensor) -> torch.Tensor:
    return _rotate_pairs(q, _lang_angles(torch.arange(q.shape[-2]) / 2.0))  # interpolate_factor = 2


def rotate_with_cached_keys_ref(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return rotate_query_at_offset_ref(q, k), rotate_ref(k)


def rotate_query_at_offset_ref(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    offset = k.shape[-2] - q.shape[-2]
    return _rotate_pairs(q, _lang_angles(torch.arange(offset, k.shape[-2])))


def rotate_axial_ref(x: torch.Tensor) -> torch.Tensor:
    """freqs_for = 'pixel': positions linspace(-1, 1) per axis, frequencies linspace(1, max_freq / 2) * pi;
    the first ROT_DIM // 2 features rotate with the height, the next with the width."""
    height, width, quarter = x.shape[-3], x.shape[-2], ROT_DIM // 4
    freqs = torch.linspace(1.0, 256 / 2, quarter) * math.pi
    h_angles = torch.linspace(-1, 1, height)[:, None] * freqs  # (H, quarter)
    w_angles = torch.linspace(-1, 1, width)[:, None] * freqs
    angles = torch.cat(
        (h_angles[:, None, :].expand(height, width, quarter), w_angles[None, :, :].expand(height, width, quarter)),
        dim=-1,
    )
    return _rotate_pairs(x, angles)
