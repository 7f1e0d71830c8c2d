"""The op catalogue: every op family's torch-free facts, one entry each. No torch.

``kcgate.contracts.validate`` (op names, shape forms, placeholders, default tolerance, backward), ``kcgate.vocab.classes``
(which classes apply to which ops, from the traits below), ``kcgate.engine.checks`` (reduction axes, the reduction
length's position, the exp and norm families of the C-PRC-02 probes), the harness (matmul-like ops for
Freivalds), ``kcgate.engine.diagnosis``, ``kcgate.engine.sensitivity`` and ``kcgate.engine.backward`` (each gradient's reduction)
read it, through ``families(trait)`` and ``has(name, trait)``; ``kcgate.numerics.ops.OPS`` holds the torch
side (call, generator, oracle, bound) and a test checks that both name the same families with the same
default shapes and tolerance. Adding a family is one entry here plus its ``OpFamily``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ParamSpec:
    """A class's or an op family's parameter accepted in ``[contract.params]``."""

    type: type
    default: Any
    choices: tuple[Any, ...] = ()
    help: str = ""


_FLOATS = ("float32", "bfloat16", "float16")
# the pointwise family's named functions (kcgate.numerics.ops.pointwise computes and bounds each)
POINTWISE = ("relu", "leaky_relu", "sigmoid", "tanh", "elu", "hardswish", "mish", "softplus")
# the normalisations' epsilon, added to the variance (mean square) under the square root; kernels ship 1e-5
# (torch), 1e-6 (Llama, Liger) and 1e-12 (BERT)
_EPS = ParamSpec(
    float, 1e-5, help="epsilon added under the square root (the kernel's own: 1e-5, 1e-6, 1e-12)"
)


@dataclass(frozen=True)
class Op:
    """One op family's facts that need no tensor."""

    name: str
    dims: tuple[str, ...] | None  # the case shape's dimension names; None: any number ({n} is the last)
    inputs: tuple[str, ...]  # the inputs' names (call/init placeholders, gradient reports)
    # where each "{name}" size placeholder is read from: (input index, axis) of the trial's own inputs
    dim_sources: dict[str, tuple[int, int]]
    default_shapes: tuple[tuple[int, ...], ...] = ()  # what a contract without ``shapes`` runs on
    tolerance: str = "error-bound"  # the natural method when neither the contract nor its class says
    backward: bool = True  # has a backward contract (its OpFamily has a grad_bound)
    reducing: bool = False  # sums over an axis (the reduction-order classes apply)
    # input index -> the dim that is the reduction axis; permuting it (the same way on every listed
    # input) is a valid reordering of the same sum
    reduction_axes: dict[int, int] = field(default_factory=dict)
    k_dim: int | None = None  # position of the reduction length in the case shape
    matmul_like: bool = False  # an (m, k) @ (k, n) product: Freivalds applies
    plain_product: bool = False  # the output is exactly a @ b (matmul, bmm): no bias, no scale
    exp: bool = False  # computes exp: a NaN/Inf where the oracle is finite is an overflow of exp
    normalizes: bool = False  # divides by a row statistic (a norm): large-mean inputs probe it
    # which classes apply beyond the ones for every family (kcgate.vocab.classes reads these):
    offset_probes: bool = False  # C-PRC-02: a row reduction the cancellation and overflow probes apply to
    operand_products: bool = False  # C-PRC-03: multiplies operands that a kernel may round (TF32, bf16)
    fp8_output: bool = False  # C-PRC-04: kcgate can store its output in fp8 and check the saturation
    # input indices of the fp8 dequantisation scales the kernel is given: the static-scale probe divides them
    # so that inputs reach past the fp8 range (kcgate draws them as amax / fp8 max, which never does)
    static_scales: tuple[int, ...] = ()
    indexed: bool = False  # C-EXC-02: reads at indices, so out-of-range indices have a policy
    own_rows: bool = True  # C-ORD-03: the output has rows of its own (not rope's pair, a mean loss)
    # gradient name -> the case-shape position of that gradient's reduction length (dW sums over M): the
    # accumulator fit of a failed backward reads it
    grad_reduction: dict[str, int] = field(default_factory=dict)
    # the family's own ``params`` (its OpFamily.configure reads them; docs/ops.md explains each)
    params: dict[str, ParamSpec] = field(default_factory=dict)
    # dim index -> constraint every drawn shape respects (held-out, boundary and class shapes; grammar:
    # kcgate.contracts.shape_class); the OpFamily reads it from here (quant_gemm's follows its group_size)
    shape_constraints: dict[int, str] = field(default_factory=dict)
    # (dim, other dim) pairs whose relation is a feature a kernel may or may not have (heads = kv_heads is
    # multi-head attention, not grouped-query): C-CMP-03's held-out shapes keep the equality or divisibility
    # every declared shape shows, unless the contract's shape_class or shape_constraints name either dim.
    # Coincidences (a square matmul) are not listed: held-out shapes exist to vary them.
    related: tuple[tuple[str, str], ...] = ()

    def matmul_mkn(self, shape: tuple[int, ...]) -> tuple[int, int, int]:
        """(m, k, n) of a matmul-like case shape, m including any batch: bmm (B, M, K, N) is (B*M, K, N)."""
        sizes = dict(zip(self.dims or (), shape, strict=False))
        return sizes.get("batch", 1) * sizes["m"], sizes["k"], sizes["n"]


CATALOGUE: dict[str, Op] = {
    op.name: op
    for op in (
        Op(
            "matmul",
            operand_products=True,
            fp8_output=True,
            plain_product=True,
            grad_reduction={"a": 2, "b": 0},
            dims=("m", "k", "n"),
            inputs=("a", "b"),
            dim_sources={"m": (0, 0), "k": (0, 1), "n": (1, 1)},
            default_shapes=((64, 1024, 64), (33, 257, 65)),
            reducing=True,
            reduction_axes={0: 1, 1: 0},
            k_dim=1,
            matmul_like=True,
        ),
        Op(
            "bmm",
            operand_products=True,
            plain_product=True,
            grad_reduction={"a": 3, "b": 1},
            dims=("batch", "m", "k", "n"),
            inputs=("a", "b"),
            dim_sources={"batch": (0, 0), "m": (0, 1), "k": (0, 2), "n": (1, 2)},
            default_shapes=((4, 32, 512, 32),),
            reducing=True,
            reduction_axes={0: 2, 1: 1},
            k_dim=2,
            matmul_like=True,
        ),
        Op(
            "linear",
            operand_products=True,
            grad_reduction={"x": 2, "w": 0, "b": 0},
            dims=("m", "k", "n"),
            inputs=("x", "w", "b"),
            dim_sources={"m": (0, 0), "k": (0, 1), "n": (1, 0)},
            default_shapes=((64, 512, 96),),
            reducing=True,
            reduction_axes={0: 1, 1: 1},
            k_dim=1,
            matmul_like=True,
        ),
        Op(
            "sum",
            offset_probes=True,
            dims=("rows", "n"),
            inputs=("x",),
            dim_sources={"rows": (0, 0), "n": (0, -1)},
            default_shapes=((64, 4096),),
            reducing=True,
            reduction_axes={0: -1},
            k_dim=-1,
        ),
        Op(
            "mean",
            offset_probes=True,
            dims=("rows", "n"),
            inputs=("x",),
            dim_sources={"rows": (0, 0), "n": (0, -1)},
            default_shapes=((64, 4096),),
            reducing=True,
            reduction_axes={0: -1},
            k_dim=-1,
        ),
        Op(
            "softmax",
            exp=True,
            offset_probes=True,
            dims=("rows", "n"),
            inputs=("x",),
            dim_sources={"rows": (0, 0), "n": (0, -1)},
            default_shapes=((64, 1024),),
            reducing=True,
            k_dim=-1,
        ),
        Op(
            "logsumexp",
            exp=True,
            offset_probes=True,
            dims=("rows", "n"),
            inputs=("x",),
            dim_sources={"rows": (0, 0), "n": (0, -1)},
            default_shapes=((64, 1024),),
            reducing=True,
            k_dim=-1,
        ),
        Op(
            "layernorm",
            normalizes=True,
            offset_probes=True,
            grad_reduction={"w": 0, "b": 0},
            dims=("rows", "n"),
            inputs=("x", "w", "b"),
            dim_sources={"rows": (0, 0), "n": (0, -1)},
            default_shapes=((64, 1024),),
            reducing=True,
            k_dim=-1,
            params={"eps": _EPS},
        ),
        Op(
            "rmsnorm",
            normalizes=True,
            offset_probes=True,
            grad_reduction={"w": 0},
            dims=("rows", "n"),
            inputs=("x", "w"),
            dim_sources={"rows": (0, 0), "n": (0, -1)},
            default_shapes=((64, 1024),),
            reducing=True,
            k_dim=-1,
            params={
                "eps": _EPS,
                "weight_offset": ParamSpec(
                    float, 0.0, help="y = x̂·(weight_offset + w): Gemma stores w with 1 (Liger's offset)"
                ),
                "casting_mode": ParamSpec(
                    str,
                    "llama",
                    ("llama", "gemma", "none"),
                    "llama: x̂ rounded to the input dtype before the weight; gemma: all in fp32; none: all in "
                    "the input dtype (Liger's LigerRMSNorm)",
                ),
            },
        ),
        Op(
            "log_softmax",
            exp=True,
            offset_probes=True,
            dims=("rows", "n"),
            inputs=("x",),
            dim_sources={"rows": (0, 0), "n": (0, -1)},
            default_shapes=((64, 1024),),
            reducing=True,
            k_dim=-1,
        ),
        Op(
            "l2norm",
            dims=("rows", "n"),
            inputs=("x",),
            dim_sources={"rows": (0, 0), "n": (0, -1)},
            default_shapes=((64, 1024),),
            reducing=True,
            k_dim=-1,
            params={
                "eps": ParamSpec(
                    float, 1e-12, help="x / max(‖x‖, eps), F.normalize's (the kernel's own; 0 = none)"
                )
            },
        ),
        Op(
            "sdpa",
            exp=True,
            operand_products=True,
            dims=("batch", "heads", "length", "head_dim"),
            inputs=("q", "k", "v"),
            dim_sources={"batch": (0, 0), "heads": (0, 1), "length": (0, 2), "head_dim": (0, 3)},
            default_shapes=((2, 4, 128, 64),),
            reducing=True,
        ),
        Op(
            "attention",
            exp=True,
            operand_products=True,
            dims=("batch", "heads", "kv_heads", "length", "head_dim"),
            inputs=("q", "k", "v"),
            dim_sources={
                "batch": (0, 0),
                "heads": (0, 1),
                "kv_heads": (1, 1),
                "length": (0, 2),
                "head_dim": (0, 3),
            },
            default_shapes=((2, 4, 2, 128, 64),),
            reducing=True,
            related=(("heads", "kv_heads"),),
            params={
                "causal": ParamSpec(
                    bool, False, help="mask keys after the query (aligned as causal_align says)"
                ),
                "scale": ParamSpec(float, 0.0, help="softmax scale; 0 = 1/sqrt(head_dim)"),
                "varlen": ParamSpec(bool, False, help="packed variable-length sequences with cu_seqlens"),
                "p_dtype": ParamSpec(
                    str, "", _FLOATS, "precision of P before P·V; default: the input dtype for 16-bit inputs"
                ),
                "q_len": ParamSpec(
                    int, 0, help="the queries' length where it differs from the keys' (decode: 1); 0 = length"
                ),
                "causal_align": ParamSpec(
                    str,
                    "top-left",
                    ("top-left", "bottom-right"),
                    "where the causal mask's diagonal starts when q_len != length: top-left (torch's sdpa) "
                    "or bottom-right (FlashAttention >= 2.1: the last query sees every key)",
                ),
                "softcap": ParamSpec(
                    float,
                    0.0,
                    help="scores capped to softcap·tanh(s / softcap) before the mask (Gemma 2: 50); 0 = none",
                ),
                "window": ParamSpec(
                    int,
                    0,
                    help="sliding window: each query sees its window latest keys, its own included; 0 = all",
                ),
            },
            shape_constraints={1: "multiple_of(kv_heads)"},  # each kv head serves a whole group of q heads
        ),
        Op(
            "cross_entropy",
            exp=True,
            offset_probes=True,
            own_rows=False,
            dims=("rows", "vocab"),
            inputs=("logits", "target"),
            dim_sources={"rows": (0, 0), "vocab": (0, 1)},
            default_shapes=((32, 4096),),
            reducing=True,
            params={
                "reduction": ParamSpec(
                    str, "mean", ("mean", "none"), "the mean over rows not ignored, or per row"
                ),
                "ignore_index": ParamSpec(
                    int, -100, help="target value whose rows are ignored (1 row in 8 has it)"
                ),
                "label_smoothing": ParamSpec(float, 0.0, help="label smoothing ε in [0, 1)"),
                "softcap": ParamSpec(
                    float,
                    0.0,
                    help="logits capped to softcap·tanh(logits / softcap) before the loss (Gemma 2: 30); 0 = none",
                ),
            },
        ),
        Op(
            "scaled_mm",
            own_rows=False,
            static_scales=(2, 3),
            dims=("m", "k", "n"),
            inputs=("a", "b", "scale_a", "scale_b"),
            dim_sources={"m": (0, 0), "k": (0, 1), "n": (1, 1)},
            default_shapes=((64, 512, 64),),
            backward=False,
            reducing=True,
            params={
                "fp8": ParamSpec(
                    str, "e4m3", ("e4m3", "e5m2"), "the fp8 format both operands are quantized to"
                ),
                "scaling": ParamSpec(
                    str, "tensor", ("tensor", "row"), "one scale per tensor, or per row of a / column of b"
                ),
            },
            shape_constraints={1: "multiple_of(16)", 2: "multiple_of(16)"},  # torch._scaled_mm on CUDA
        ),
        Op(
            "quant_gemm",
            dims=("m", "k", "n"),
            inputs=("x", "qweight", "scales", "zeros"),
            dim_sources={"m": (0, 0), "k": (0, 1), "n": (1, 0)},
            default_shapes=((32, 1024, 64),),
            backward=False,
            reducing=True,
            params={
                "bits": ParamSpec(int, 4, (4, 8), "weight bits"),
                "group_size": ParamSpec(int, 128, help="columns per scale group; 0 = per output channel"),
                "zero_point": ParamSpec(
                    bool, True, help="asymmetric (q - zero)·scale; false: symmetric q·scale"
                ),
            },
            shape_constraints={1: "multiple_of(128)"},  # k: whole groups of the default group_size
        ),
        Op(
            "gelu",
            fp8_output=True,
            dims=None,
            inputs=("x",),
            dim_sources={"n": (0, -1)},
            default_shapes=((256, 1024),),
            params={
                "approximate": ParamSpec(
                    str, "none", ("none", "tanh"), "the kernel's gelu: erf, or its tanh approximation"
                )
            },
        ),
        Op(
            "pointwise",
            fp8_output=True,
            dims=None,
            inputs=("x",),
            dim_sources={"n": (0, -1)},
            default_shapes=((256, 1024),),
            params={
                "fn": ParamSpec(
                    str, "", ("", *POINTWISE), 'the function; "" = the one the contract\'s reference computes'
                ),
                "negative_slope": ParamSpec(float, 0.01, help="leaky_relu's slope for x < 0"),
                "alpha": ParamSpec(float, 1.0, help="elu's α: α·(exp(x) − 1) for x < 0"),
            },
        ),
        Op(
            "silu",
            fp8_output=True,
            dims=None,
            inputs=("x",),
            dim_sources={"n": (0, -1)},
            default_shapes=((256, 1024),),
            tolerance="ulp",
        ),
        Op(
            "rope",
            own_rows=False,
            dims=("batch", "heads", "kv_heads", "length", "head_dim"),
            inputs=("q", "k", "cos", "sin"),
            dim_sources={
                "batch": (0, 0),
                "heads": (0, 1),
                "kv_heads": (1, 1),
                "length": (0, 2),
                "head_dim": (0, 3),
            },
            default_shapes=((2, 8, 2, 128, 64),),
            related=(("heads", "kv_heads"),),
            params={
                "layout": ParamSpec(
                    str, "neox", ("neox", "gptj"), "rotate-half (NeoX) or interleaved pairs (GPT-J)"
                ),
                "cos_sin": ParamSpec(bool, True, help="cos and sin are inputs; false: the kernel gets base="),
                "base": ParamSpec(float, 10000.0, help="the angles' base (theta)"),
                "rotary_dim": ParamSpec(
                    int,
                    0,
                    help="partial rotary: the first rotary_dim lanes rotate (even, ≤ head_dim); 0 = all",
                ),
            },
            shape_constraints={4: "even"},  # lanes rotate in pairs
        ),
        Op(
            "swiglu",
            dims=("rows", "n"),
            inputs=("a", "b"),
            dim_sources={"rows": (0, 0), "n": (0, -1)},
            default_shapes=((64, 1024),),
        ),
        Op(
            "geglu",
            dims=("rows", "n"),
            inputs=("a", "b"),
            dim_sources={"rows": (0, 0), "n": (0, -1)},
            default_shapes=((64, 1024),),
            params={
                "approximate": ParamSpec(str, "none", ("none", "tanh"), "erf gelu or its tanh approximation")
            },
        ),
        Op(
            "gather",
            indexed=True,
            dims=("rows", "n", "m"),
            inputs=("x", "index"),
            dim_sources={"rows": (0, 0), "n": (0, 1), "m": (1, 1)},
            default_shapes=((64, 256, 32),),
            tolerance="exact",
        ),
        Op(
            "index_select",
            indexed=True,
            dims=("rows", "n", "m"),
            inputs=("x", "index"),
            dim_sources={"rows": (0, 0), "n": (0, 1), "m": (1, 0)},
            default_shapes=((64, 256, 32),),
            tolerance="exact",
        ),
        Op(
            "embedding",
            indexed=True,
            dims=("vocab", "dim", "m"),
            inputs=("index", "w"),
            dim_sources={"vocab": (1, 0), "dim": (1, 1), "m": (0, 0)},
            default_shapes=((64, 256, 32),),
            tolerance="exact",
        ),
        Op("custom", dims=None, inputs=(), dim_sources={"n": (0, -1)}, tolerance="error-bound"),
    )
}


def families(trait: str) -> tuple[str, ...]:
    """The op families whose catalogue entry has ``trait`` set, in the catalogue's order."""
    return tuple(n for n, op in CATALOGUE.items() if getattr(op, trait))


def has(name: str, trait: str) -> bool:
    """Whether op family ``name`` has ``trait`` (False for a name the catalogue does not know)."""
    op = CATALOGUE.get(name)
    return bool(op is not None and getattr(op, trait))


MATMUL_LIKE = families("matmul_like")
REDUCING = families("reducing")


def default_shapes() -> dict[str, tuple[tuple[int, ...], ...]]:
    """Each built-in family's default shapes (custom ops have none), without importing torch."""
    return {n: op.default_shapes for n, op in CATALOGUE.items() if n != "custom"}


def family_constraints(name: str, params: dict[str, Any] | None = None) -> dict[int, str]:
    """A family's shape constraints for a contract's ``params`` (quant_gemm's k is whole groups of its
    group_size; 0, per output channel, leaves k free)."""
    op = CATALOGUE.get(name)
    if op is None:
        return {}
    if name == "quant_gemm":
        group = int((params or {}).get("group_size", op.params["group_size"].default))
        return {1: f"multiple_of({group})"} if group > 0 else {}
    return dict(op.shape_constraints)


def dims_of(name: str) -> tuple[str, ...] | None:
    """The family's shape form (its case-shape dimension names); None for any arity or an unknown op."""
    return CATALOGUE[name].dims if name in CATALOGUE else None


def params_of(name: str) -> dict[str, ParamSpec]:
    """The family's own parameters, accepted in a contract's ``params`` beside its class's ({} if none)."""
    return CATALOGUE[name].params if name in CATALOGUE else {}
