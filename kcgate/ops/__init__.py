"""Op families: call convention, input generator, fp64 oracle and per-element error bound.

``OPS`` is the registry; the loader's list of op names (``kcgate.spec.OPS``) must match it (tested).
"""

from __future__ import annotations

from kcgate.ops.base import OpFamily
from kcgate.ops.indexing import EMBEDDING, GATHER, INDEX_SELECT
from kcgate.ops.linalg import BMM, LINEAR, MATMUL, SDPA
from kcgate.ops.pointwise import GELU, SILU
from kcgate.ops.reduce import LAYERNORM, LOGSUMEXP, MEAN, RMSNORM, SOFTMAX, SUM

OPS: dict[str, OpFamily] = {
    op.name: op
    for op in (
        MATMUL,
        BMM,
        LINEAR,
        SDPA,
        SUM,
        MEAN,
        SOFTMAX,
        LOGSUMEXP,
        LAYERNORM,
        RMSNORM,
        GELU,
        SILU,
        GATHER,
        INDEX_SELECT,
        EMBEDDING,
    )
}


def default_shapes() -> dict[str, tuple[tuple[int, ...], ...]]:
    """Each op family's default shapes: what a contract without ``shapes`` runs on."""
    return {name: op.default_shapes for name, op in OPS.items()}
