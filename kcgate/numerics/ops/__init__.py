"""Op families: call convention, input generator, fp64 oracle and per-element error bound.

``OPS`` is the registry; the loader's list of op names (``CONTRACT_FIELD["op"].choices``) must match it (tested).
"""

from __future__ import annotations

from kcgate.numerics.ops.attention import ATTENTION
from kcgate.numerics.ops.base import OpFamily
from kcgate.numerics.ops.glu import GEGLU, SWIGLU
from kcgate.numerics.ops.indexing import EMBEDDING, GATHER, INDEX_SELECT
from kcgate.numerics.ops.linalg import BMM, LINEAR, MATMUL, SDPA
from kcgate.numerics.ops.loss import CROSS_ENTROPY
from kcgate.numerics.ops.pointwise import GELU, POINTWISE_FAMILY, SILU
from kcgate.numerics.ops.quant import QUANT_GEMM, SCALED_MM
from kcgate.numerics.ops.reduce import (
    L2NORM,
    LAYERNORM,
    LOG_SOFTMAX,
    LOGSUMEXP,
    MEAN,
    RMSNORM,
    SOFTMAX,
    SUM,
)
from kcgate.numerics.ops.rope import ROPE

OPS: dict[str, OpFamily] = {
    op.name: op
    for op in (
        MATMUL,
        BMM,
        LINEAR,
        SDPA,
        ATTENTION,
        ROPE,
        SWIGLU,
        GEGLU,
        CROSS_ENTROPY,
        SCALED_MM,
        QUANT_GEMM,
        SUM,
        MEAN,
        SOFTMAX,
        LOGSUMEXP,
        LOG_SOFTMAX,
        LAYERNORM,
        RMSNORM,
        L2NORM,
        GELU,
        SILU,
        POINTWISE_FAMILY,
        GATHER,
        INDEX_SELECT,
        EMBEDDING,
    )
}


def default_shapes() -> dict[str, tuple[tuple[int, ...], ...]]:
    """Each op family's default shapes: what a contract without ``shapes`` runs on."""
    return {name: op.default_shapes for name, op in OPS.items()}
