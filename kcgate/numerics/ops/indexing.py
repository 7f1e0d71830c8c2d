"""Index families (gather, index_select, embedding): exact contracts, with in-range indices by default.

Call conventions: gather(x, index) along dim 1; index_select(x, index) along dim 0;
embedding(indices, weight). Out-of-range indices are C-EXC-02's business.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from kcgate.numerics.ops.base import BoundArgs, OpFamily, Tensors, draw, sqrt


def _zero_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    return torch.zeros_like(y)


def _scatter_grad(
    add: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    src: int,
    idx: int,
    count_dim: int,
) -> Callable[..., tuple[torch.Tensor | None, ...]]:
    """The source's gradient is a scatter-add of dY (duplicate indices sum): λ·√m·u_acc·Σ|dY| over the m
    picks, plus its rounding; index tensors are not differentiated."""

    def bound(x: Tensors, dy: torch.Tensor, g: Tensors, ba: BoundArgs) -> tuple[torch.Tensor | None, ...]:
        m = x[idx].shape[count_dim] if x[idx].dim() else 1
        out: list[torch.Tensor | None] = [None] * len(x)
        out[src] = ba.lam * sqrt(m) * ba.u_acc * add(x[src], x[idx], dy.abs()) + ba.u_out * g[src].abs()
        return tuple(out)

    return bound


def _gather_inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    rows, n, m = shape
    return draw((rows, n), dtype, gen, dist), torch.randint(0, n, (rows, m), generator=gen)


def _select_inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    rows, n, m = shape
    return draw((rows, n), dtype, gen, dist), torch.randint(0, rows, (m,), generator=gen)


def _embedding_inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    vocab, dim, m = shape
    return torch.randint(0, vocab, (m,), generator=gen), draw((vocab, dim), dtype, gen, dist)


_GATHER_GRAD = _scatter_grad(lambda s, i, a: torch.zeros_like(s).scatter_add(1, i, a), 0, 1, 1)
_SELECT_GRAD = _scatter_grad(lambda s, i, a: torch.zeros_like(s).index_add(0, i, a), 0, 1, 0)
_EMBEDDING_GRAD = _scatter_grad(lambda s, i, a: torch.zeros_like(s).index_add(0, i, a), 1, 0, 0)


def _family(
    name: str, make, oracle, floats: tuple[int, ...], batch: tuple[int, ...], names: tuple[str, ...], grad
) -> OpFamily:  # type: ignore[no-untyped-def]
    return OpFamily(
        grad_bound=grad,
        input_names=names,
        name=name,
        make_inputs=make,
        oracle=oracle,
        bound=_zero_bound,
        reduction_len=lambda s: 1,
        tolerance="exact",
        float_inputs=floats,
        batch_inputs=batch,
    )


GATHER = _family(
    "gather", _gather_inputs, lambda x, i: torch.gather(x, 1, i), (0,), (0, 1), ("x", "index"), _GATHER_GRAD
)
INDEX_SELECT = _family(
    "index_select",
    _select_inputs,
    lambda x, i: torch.index_select(x, 0, i),
    (0,),
    (1,),
    ("x", "index"),
    _SELECT_GRAD,
)
EMBEDDING = _family(
    "embedding",
    _embedding_inputs,
    lambda i, w: torch.nn.functional.embedding(i, w),
    (1,),
    (0,),
    ("index", "w"),
    _EMBEDDING_GRAD,
)
