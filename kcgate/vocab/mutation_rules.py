"""The mutation rules of ``kcgate mutate``: one table (``RULES``), one row per bug that kernels ship.

Each rule names the bug it models, where it applies, and its transform: given one AST node of a kernel's
source and where the node sits (``Where``), the replacement nodes it could become (none when it does not
apply there). The rules are AST-only, so a Triton ``@triton.jit`` kernel is mutated from its source text
without Triton installed; a torch function, an ``autograd.Function`` (its ``backward`` included) and a
Triton launcher are mutated alike. Torch-free.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

FAMILIES = ("precision", "masks", "constants", "stability", "accumulation", "backward")

# the names a kernel gives a dtype it upcasts to (``x.to(torch.float32)``, ``tl.float32``)
FP32 = frozenset({"float32", "float", "float64", "double"})
# constructors whose fp32 ``dtype=`` is an accumulator: dropping it means a low-precision accumulator
CONSTRUCTORS = frozenset({"zeros", "full", "empty", "ones", "zeros_like", "full_like", "empty_like"})
MAX_NAMES = frozenset({"max", "amax", "maximum"})
# names a kernel gives a running or row maximum (``m_i``, ``row_max``); anything containing "max" too
MAX_VARS = frozenset({"m", "mx", "m_i", "m_ij", "m_new", "m_prev"})
SCALE_WORDS = ("scale", "inv_", "rsqrt", "norm")
ROOTS = frozenset({"sqrt", "rsqrt"})
RANGES = frozenset({"range", "static_range"})  # ``range``, ``tl.range``, ``tl.static_range``
BACKWARD_WORDS = ("backward", "bwd")  # a function whose name holds one is a gradient expression
# a sum in a backward that names one of these is address or index arithmetic, not a gradient's term
# names of pointers, offsets, indices and sizes: a sum of them is address arithmetic, not a gradient's term
# (``X_ptr + row_id * stride``), though ``cos_row`` (a loaded row of values) is not one of them
INDEX_PARTS = (
    "ptr",
    "stride",
    "offs",
    "offset",
    "program_id",
    "arange",
    "numel",
    "shape",
)  # anywhere in a name
INDEX_NAMES = frozenset({"row", "col", "pid", "idx", "index", "start", "i", "j", "k", "n"})
INDEX_PREFIXES = ("n_", "num_", "block")
INDEX_SUFFIXES = ("_idx", "_id", "_size", "_start", "_index")
POINTER_WORDS = ("ptr", "offs", "offset", "idx", "stride")  # a name advanced by += that is not an accumulator


@dataclass(frozen=True)
class Where:
    """Where a node sits: the functions around it (outermost first), whether it is a control-flow test,
    whether it is an argument of a call, and the names its function assigns from ``exp(a - b)``."""

    functions: tuple[str, ...] = ()
    in_test: bool = False  # the test of an if / while / assert: control flow, not a mask value
    call_arg: bool = False  # a positional or keyword argument of a call
    rescales: frozenset[str] = frozenset()

    @property
    def in_backward(self) -> bool:
        return any(w in f.lower() for f in self.functions for w in BACKWARD_WORDS)


Change = tuple[ast.AST, str]  # (the node that replaces the matched one, what changed, in words)
Transform = Callable[[ast.AST, Where], list[Change]]


@dataclass(frozen=True)
class Rule:
    """One row of the table: a bug kernels ship and the transform that plants it."""

    name: str
    family: str  # one of FAMILIES
    bug: str  # the bug it models
    applies: str  # where it applies
    transform: Transform


# ---- helpers ----------------------------------------------------------------------------------------


def _name(node: ast.AST) -> str:
    """The last identifier of a name or attribute (``torch.float32`` -> float32), else ""."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _func(node: ast.AST) -> str:
    return _name(node.func) if isinstance(node, ast.Call) else ""


N = TypeVar("N", bound=ast.AST)


def _c(x: N) -> N:
    return copy.deepcopy(x)


def _num(value: float) -> ast.expr:
    return ast.Constant(value=value)


def _add(node: ast.expr, k: int) -> ast.expr:
    op: ast.operator = ast.Add() if k > 0 else ast.Sub()
    return ast.BinOp(left=_c(node), op=op, right=_num(abs(k)))


def _is_neg_inf(node: ast.AST) -> bool:
    """``-inf`` however a kernel spells it: -math.inf, -torch.inf, -float("inf"), float("-inf")."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _name(node.operand) == "inf" or _float_of(node.operand) == "inf"
    return _float_of(node) == "-inf"


def _float_of(node: ast.AST) -> object:
    """The constant argument of ``float(<constant>)``, else None."""
    if (
        isinstance(node, ast.Call)
        and _func(node) == "float"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        return node.args[0].value
    return None


def _has_call(node: ast.AST, names: frozenset[str]) -> bool:
    return any(_func(n) in names for n in ast.walk(node))


def _is_max(node: ast.AST) -> bool:
    """A row or running maximum: a max/amax call in it, or a variable named like one."""
    if _has_call(node, MAX_NAMES):
        return True
    ident = _name(node).lower()
    return ident in MAX_VARS or "max" in ident


def _is_factor(node: ast.AST) -> bool:
    """A scale factor: a float constant, a (r)sqrt, a ** ±0.5, ``1/sqrt(d)``, or a name saying scale."""
    if isinstance(node, ast.Constant) and type(node.value) is float:
        return True
    if _func(node) in ROOTS:
        return True
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            return (
                abs(getattr(node.right, "value", 0) or 0) == 0.5
                if isinstance(node.right, ast.Constant)
                else False
            )
        return isinstance(node.op, ast.Div) and isinstance(node.left, ast.Constant) and _is_factor(node.right)
    ident = _name(node).lower()
    return bool(ident) and any(w in ident for w in SCALE_WORDS)


def _is_arange(node: ast.AST) -> bool:
    return _func(node) == "arange"


# ---- the transforms ---------------------------------------------------------------------------------


def upcast_dropped(node: ast.AST, where: Where) -> list[Change]:
    """``x.float()`` / ``x.to(torch.float32)`` / ``x.to(tl.float32)`` -> ``x``."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return []
    recv, attr = node.func.value, node.func.attr
    if attr in ("float", "double") and not node.args and not node.keywords:
        return [(_c(recv), f".{attr}() dropped")]
    if attr == "to":
        given = [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]
        if len(given) == 1 and len(node.args) + len(node.keywords) == 1 and _name(given[0]) in FP32:
            return [(_c(recv), f".to({ast.unparse(given[0])}) dropped")]
    return []


def accumulator_dropped(node: ast.AST, where: Where) -> list[Change]:
    """``dtype=torch.float32`` removed from an op (a reduction in the input dtype); an fp32 accumulator
    (``tl.zeros(..., dtype=tl.float32)``, ``torch.zeros(..., dtype=torch.float32)``) made bf16."""
    if not isinstance(node, ast.Call):
        return []
    for i, kw in enumerate(node.keywords):
        if kw.arg == "dtype" and _name(kw.value) in FP32:
            new = _c(node)
            assert isinstance(new, ast.Call)
            if _func(node) in CONSTRUCTORS and isinstance(kw.value, ast.Attribute):
                new.keywords[i].value = ast.Attribute(
                    value=_c(kw.value.value), attr="bfloat16", ctx=ast.Load()
                )
                return [(new, f"accumulator dtype {ast.unparse(kw.value)} -> bfloat16")]
            del new.keywords[i]
            return [(new, f"dtype={ast.unparse(kw.value)} removed: computed in the input dtype")]
    return []


def neg_inf_to_zero(node: ast.AST, where: Where) -> list[Change]:
    """A ``-inf`` fill (``other=-inf`` of a masked load, a masked_fill / where value) -> ``0.0``."""
    if where.call_arg and _is_neg_inf(node):
        return [(_num(0.0), f"{ast.unparse(node)} -> 0.0")]
    return []


_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
}
_SYMBOL: dict[type[ast.cmpop], str] = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def mask_boundary(node: ast.AST, where: Where) -> list[Change]:
    """``<`` <-> ``<=`` (``>`` <-> ``>=``) in a comparison computed as a value: a mask, a where condition."""
    if where.in_test or not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return []
    op = type(node.ops[0])
    if op not in _FLIP:
        return []
    new = _c(node)
    assert isinstance(new, ast.Compare)
    new.ops = [_FLIP[op]()]
    return [(new, f"{_SYMBOL[op]} -> {_SYMBOL[_FLIP[op]]}")]


def offset_off_by_one(node: ast.AST, where: Where) -> list[Change]:
    """An offset ± 1: ``pid * BLOCK + tl.arange(0, BLOCK)`` + 1 / - 1; a slice bound ``x[:k]`` ± 1."""
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add)
        and (_is_arange(node.left) or _is_arange(node.right))
    ):
        return [(_add(node, 1), "offsets + 1"), (_add(node, -1), "offsets - 1")]
    if isinstance(node, ast.Slice):
        out: list[Change] = []
        for part in ("lower", "upper"):
            bound = getattr(node, part)
            if bound is None:
                continue
            for k in (1, -1):
                new = _c(node)
                setattr(new, part, _add(bound, k))
                out.append((new, f"slice {part} bound {'+' if k > 0 else '-'} 1"))
        return out
    return []


def tail_dropped(node: ast.AST, where: Where) -> list[Change]:
    """A loop bound that drops the last block: ``range(0, n, B)`` -> ``range(0, n - B, B)``;
    ``cdiv(n, B)`` -> ``n // B``; ``(n + B - 1) // B`` -> ``n // B``."""
    if not isinstance(node, (ast.Call, ast.BinOp)):
        return []
    if isinstance(node, ast.Call) and _func(node) == "cdiv" and len(node.args) == 2:
        return [
            (
                ast.BinOp(left=_c(node.args[0]), op=ast.FloorDiv(), right=_c(node.args[1])),
                "cdiv(n, B) -> n // B",
            )
        ]
    if isinstance(node, ast.Call) and _func(node) in RANGES and node.args:
        new = _c(node)
        assert isinstance(new, ast.Call)
        stop_at = 1 if len(node.args) >= 2 else 0
        step = node.args[2] if len(node.args) >= 3 else _num(1)
        new.args[stop_at] = ast.BinOp(left=_c(node.args[stop_at]), op=ast.Sub(), right=_c(step))
        return [(new, "loop stops one step early")]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
        left = node.left
        if (
            isinstance(left, ast.BinOp)
            and isinstance(left.op, ast.Sub)
            and getattr(left.right, "value", None) == 1
            and isinstance(left.left, ast.BinOp)
            and isinstance(left.left.op, ast.Add)
        ):
            return [
                (
                    ast.BinOp(left=_c(left.left.left), op=ast.FloorDiv(), right=_c(node.right)),
                    "ceil division -> floor",
                )
            ]
    return []


def constant_changed(node: ast.AST, where: Where) -> list[Change]:
    """A scale or eps changed: a float constant × 2, × 1/2; 1e-6 <-> 1e-5."""
    if not isinstance(node, ast.Constant) or type(node.value) is not float:
        return []
    v = node.value
    if v == 0.0 or v != v or abs(v) == float("inf"):
        return []
    out: list[Change] = []
    swap = {1e-6: 1e-5, 1e-5: 1e-6}.get(v)
    if swap is not None:
        out.append((_num(swap), f"{v!r} -> {swap!r}"))
    out += [(_num(v * 2), f"{v!r} x 2"), (_num(v / 2), f"{v!r} x 1/2")]
    return out


def factor_dropped(node: ast.AST, where: Where) -> list[Change]:
    """A factor dropped: ``0.5 * x`` -> ``x``, ``q * scale`` -> ``q``, ``s / math.sqrt(d)`` -> ``s``."""
    if not isinstance(node, ast.BinOp):
        return []
    if isinstance(node.op, ast.Mult):
        out: list[Change] = []
        if _is_factor(node.left):
            out.append((_c(node.right), f"factor {ast.unparse(node.left)} dropped"))
        if _is_factor(node.right):
            out.append((_c(node.left), f"factor {ast.unparse(node.right)} dropped"))
        return out
    if isinstance(node.op, ast.Div) and _is_factor(node.right) and not isinstance(node.left, ast.Constant):
        return [(_c(node.left), f"divisor {ast.unparse(node.right)} dropped")]
    return []


def sign_flipped(node: ast.AST, where: Where) -> list[Change]:
    """A sign flipped: ``-x`` -> ``x``; ``a * c - b * s`` -> ``a * c + b * s`` (a rotation's sign, an
    exponent, a gradient's sign). Not on a constant (``dim=-1`` stays) or address arithmetic."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        if not isinstance(node.operand, ast.Constant) and not _is_neg_inf(node):
            return [(_c(node.operand), f"-{ast.unparse(node.operand)} -> {ast.unparse(node.operand)}")]
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Sub)
        and isinstance(node.right, ast.BinOp)
        and isinstance(node.right.op, ast.Mult)
        and not _is_index_arithmetic(node)
    ):
        flipped = ast.BinOp(left=_c(node.left), op=ast.Add(), right=_c(node.right))
        return [(flipped, f"- {ast.unparse(node.right)} -> + {ast.unparse(node.right)}")]
    return []


def max_subtraction_removed(node: ast.AST, where: Where) -> list[Change]:
    """The max subtraction removed: ``exp(x - x.max())`` -> ``exp(x)``; ``qk - m_i`` -> ``qk``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and _is_max(node.right):
        return [(_c(node.left), f"- {ast.unparse(node.right)} removed")]
    return []


def rescale_removed(node: ast.AST, where: Where) -> list[Change]:
    """An online softmax's rescale removed: ``acc * alpha`` -> ``acc`` where ``alpha = exp(m_old - m_new)``."""
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Mult):
        return []
    out: list[Change] = []
    for this, other in ((node.left, node.right), (node.right, node.left)):
        if isinstance(this, ast.Name) and this.id in where.rescales:
            out.append((_c(other), f"rescale by {this.id} removed"))
    return out


def accumulate_overwrites(node: ast.AST, where: Where) -> list[Change]:
    """``acc += x`` -> ``acc = x``; ``acc = acc + x`` -> ``acc = x``: the accumulation lost. A pointer or
    offset advanced (``q_ptr += stride``) is not an accumulator: left alone."""
    target = node.target if isinstance(node, ast.AugAssign) else getattr(node, "targets", [None])[0]
    if target is None or any(w in _name(target).lower() for w in POINTER_WORDS):
        return []
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
        return [(ast.Assign(targets=[_c(node.target)], value=_c(node.value), lineno=node.lineno), "+= -> =")]
    if (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.value, ast.BinOp)
        and isinstance(node.value.op, ast.Add)
        and ast.dump(node.value.left) == ast.dump(_load(node.targets[0]))
    ):
        return [
            (
                ast.Assign(targets=[_c(node.targets[0])], value=_c(node.value.right), lineno=node.lineno),
                "acc = acc + x -> acc = x",
            )
        ]
    return []


def _load(target: ast.AST) -> ast.AST:
    """A store target as the load expression of the same name (to compare with a right-hand side)."""
    t = _c(target)
    for n in ast.walk(t):
        if hasattr(n, "ctx"):
            n.ctx = ast.Load()
    return t


def _is_index_name(ident: str) -> bool:
    return (
        ident in INDEX_NAMES
        or any(p in ident for p in INDEX_PARTS)
        or ident.startswith(INDEX_PREFIXES)
        or ident.endswith(INDEX_SUFFIXES)
    )


def _is_index_arithmetic(node: ast.AST) -> bool:
    """A sum of pointers, offsets or sizes (``X_ptr + row * stride``), or of integer constants only."""
    idents = [_name(n).lower() for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))]
    if any(_is_index_name(i) for i in idents):
        return True
    consts = [n for n in ast.walk(node) if isinstance(n, ast.Constant)]
    return not idents and all(type(c.value) is int for c in consts)


def gradient_term_dropped(node: ast.AST, where: Where) -> list[Change]:
    """In a backward (a function named ``backward`` / ``*_bwd``): one term of a ``+`` / ``-`` dropped."""
    if (
        not where.in_backward
        or not isinstance(node, ast.BinOp)
        or not isinstance(node.op, (ast.Add, ast.Sub))
        or _is_index_arithmetic(node)
    ):
        return []
    right = (
        _c(node.right) if isinstance(node.op, ast.Add) else ast.UnaryOp(op=ast.USub(), operand=_c(node.right))
    )
    return [
        (_c(node.left), f"term {ast.unparse(node.right)} dropped"),
        (right, f"term {ast.unparse(node.left)} dropped"),
    ]


# ---- the table --------------------------------------------------------------------------------------

RULES: tuple[Rule, ...] = (
    Rule(
        "upcast-dropped",
        "precision",
        "an upcast dropped: the math runs in the input's low precision",
        "x.float(), x.double(), x.to(torch.float32 | tl.float32)",
        upcast_dropped,
    ),
    Rule(
        "accumulator-dropped",
        "precision",
        "an fp32 accumulator or reduction dtype dropped: the sum runs in the input dtype",
        "dtype=float32 in a call; tl.zeros / torch.zeros(..., dtype=float32) accumulators",
        accumulator_dropped,
    ),
    Rule(
        "neg-inf-to-zero",
        "masks",
        "a masked-out lane filled with 0.0 instead of -inf (it joins the max and sum)",
        "a -inf argument: other=-inf of tl.load, masked_fill, where",
        neg_inf_to_zero,
    ),
    Rule(
        "mask-boundary",
        "masks",
        "an off-by-one mask: < where <= was meant, or the other way round",
        "a <, <=, >, >= comparison computed as a value (not an if / while / assert test)",
        mask_boundary,
    ),
    Rule(
        "offset-off-by-one",
        "masks",
        "an offset one element off: the block reads its neighbour's data",
        "offsets built on arange (pid * BLOCK + tl.arange(0, BLOCK)); slice bounds",
        offset_off_by_one,
    ),
    Rule(
        "tail-dropped",
        "masks",
        "a loop bound or grid that drops the last (partial) block",
        "range / tl.range / tl.static_range stops; cdiv(n, B); (n + B - 1) // B",
        tail_dropped,
    ),
    Rule(
        "constant-changed",
        "constants",
        "a scale or eps off by a factor (x 2, x 1/2; 1e-6 <-> 1e-5)",
        "float constants",
        constant_changed,
    ),
    Rule(
        "factor-dropped",
        "constants",
        "a factor dropped: 0.5 *, a softmax scale, 1/sqrt(d)",
        "a product or quotient with a float constant, a (r)sqrt, ** 0.5, or a name saying scale",
        factor_dropped,
    ),
    Rule(
        "sign-flipped",
        "constants",
        "a sign flipped (rotate-half, an exponent, a gradient)",
        "unary minus on an expression",
        sign_flipped,
    ),
    Rule(
        "max-subtraction-removed",
        "stability",
        "softmax / logsumexp without the max subtraction: exp overflows",
        "a - b whose b is a max (a max / amax call, or m_i, row_max, ...)",
        max_subtraction_removed,
    ),
    Rule(
        "rescale-removed",
        "stability",
        "an online softmax that forgets to rescale its running sums",
        "a product with a name assigned exp(a - b) in the same function",
        rescale_removed,
    ),
    Rule(
        "accumulate-overwrites",
        "accumulation",
        "+= written as =: only the last block is kept",
        "acc += x; acc = acc + x",
        accumulate_overwrites,
    ),
    Rule(
        "gradient-term-dropped",
        "backward",
        "a term dropped from a gradient expression",
        "a + or - inside a function named backward or *_bwd (an autograd.Function, a Triton backward kernel)",
        gradient_term_dropped,
    ),
)

BY_NAME = {r.name: r for r in RULES}
assert all(r.family in FAMILIES for r in RULES)
