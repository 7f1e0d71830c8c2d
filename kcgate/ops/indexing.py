"""Index families (gather, index_select, embedding): exact contracts, with in-range indices by default.

Call conventions: gather(x, index) along dim 1; index_select(x, index) along dim 0;
embedding(indices, weight). Out-of-range indices are C-EXC-02's business.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kcgate.ops.base import BoundArgs, OpFamily, Tensors, draw


def _zero_bound(x: Tensors, y: torch.Tensor, ba: BoundArgs) -> torch.Tensor:
    return torch.zeros_like(y)


def _gather_inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    rows, n, m = shape
    return draw((rows, n), dtype, gen, dist), torch.randint(0, n, (rows, m), generator=gen)


def _select_inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    rows, n, m = shape
    return draw((rows, n), dtype, gen, dist), torch.randint(0, rows, (m,), generator=gen)


def _embedding_inputs(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, dist: str) -> Tensors:
    vocab, dim, m = shape
    return torch.randint(0, vocab, (m,), generator=gen), draw((vocab, dim), dtype, gen, dist)


def _family(
    name: str, make, oracle, floats: tuple[int, ...], batch: tuple[int, ...], names: tuple[str, ...]
) -> OpFamily:  # type: ignore[no-untyped-def]
    return OpFamily(
        input_names=names,
        name=name,
        make_inputs=make,
        oracle=oracle,
        bound=_zero_bound,
        reduction_len=lambda s: 1,
        default_shapes=((64, 256, 32),),
        tolerance="exact",
        float_inputs=floats,
        batch_inputs=batch,
    )


GATHER = _family("gather", _gather_inputs, lambda x, i: torch.gather(x, 1, i), (0,), (0, 1), ("x", "index"))
INDEX_SELECT = _family(
    "index_select", _select_inputs, lambda x, i: torch.index_select(x, 0, i), (0,), (1,), ("x", "index")
)
EMBEDDING = _family(
    "embedding",
    _embedding_inputs,
    lambda i, w: torch.nn.functional.embedding(i, w),
    (1,),
    (0,),
    ("index", "w"),
)
