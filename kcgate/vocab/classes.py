"""The twelve contract classes: identity, family, provenance and the defaults for parts 4 to 8.

Torch-free metadata used by the loader, the schema, the docs and ``--help``. Each class's measuring
code lives in ``kcgate.engine.checks`` (which needs torch).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from kcgate.vocab.catalogue import CATALOGUE, ParamSpec, families


@dataclass(frozen=True)
class ContractClass:
    """Defaults a class supplies for the postcondition, tolerance, oracle, protocol and signature."""

    id: str
    family: str
    name: str
    asserts: str
    provenance: str  # "paper" (public material) or "kcgate" (our definition)
    ops: tuple[str, ...]  # op families the class applies to
    trait: str = ""  # the catalogue trait ``ops`` is read from ("" = every family; TRAIT_WHY says it)
    postcondition: str = "within-bound"
    tolerance: str = "error-bound"
    oracle: str = "fp64"
    trials: int = 2
    seeds: int = 2
    signatures: tuple[str, ...] = ()
    params: dict[str, ParamSpec] = field(default_factory=dict)
    # Whether the measurement carries over to gradients (docs/classes/*.md, "Backward"): not for operand
    # rounding (C-PRC-03), output rounding and saturation (C-PRC-04), nor out-of-range indices (C-EXC-02).
    backward: bool = True
    # Whether its check is followed by the stability probes on the families with the ``offset_probes`` trait
    # (kcgate.engine.checks.stability): every class that compares outputs with the oracle. Not C-PRC-02 (it
    # asserts them itself), C-PRC-04 (fp8 outputs: the output format's policy), nor the exceptional classes
    # (a special-value or index policy, not the numbers).
    probes: bool = True


_ALL = tuple(CATALOGUE)  # every op family, in the catalogue's order


# Why a class applies to an op: the catalogue trait its ``ops`` are read from, in words ("" = every family).
# ``kcgate validate --op`` and the fix of a refused class print these.
TRAIT_WHY: dict[str, str] = {
    "": "every op family",
    "reducing": "ops that sum over an axis (their accumulator and reduction order matter)",
    "offset_probes": "row reductions where a large offset cancels or overflows (softmax, logsumexp, norms)",
    "operand_products": "ops that multiply operands a kernel may round first (TF32, bf16)",
    "fp8_output": "ops whose output can be stored in fp8, so rounding and saturation are checkable",
    "own_rows": "ops whose output has rows of its own, which batch-mates must not change",
    "indexed": "ops that read at indices, so out-of-range indices need a policy",
}
# The plain correctness class: its check is the output within the family's bound of the fp64 oracle (and
# the sensitivity gate), nothing more; it applies to every family.
PLAIN = "C-CMP-01"


def _c(trait: str, **kw: Any) -> ContractClass:
    """A class whose ops are the families with ``trait`` (kcgate.vocab.catalogue), custom ops included."""
    ops = families(trait) if trait else _ALL
    return ContractClass(trait=trait, ops=ops + (() if "custom" in ops else ("custom",)), **kw)


CLASSES: dict[str, ContractClass] = {
    c.id: c
    for c in (
        _c(
            id="C-PRC-01",
            family="precision",
            name="accumulator precision",
            provenance="paper",
            asserts="accumulation really happens at the declared accumulator precision",
            trait="reducing",
            signatures=("low-precision-accumulator", "biased-rounding"),
        ),
        _c(
            id="C-PRC-02",
            family="precision",
            name="numerical stability",
            provenance="paper",
            asserts="stable under cancellation and overflow (softmax, logsumexp, norms with a large mean)",
            trait="offset_probes",
            probes=False,
            signatures=("cancellation", "overflow", "saturation", "nan-pattern"),
            params={
                "offset": ParamSpec(
                    float,
                    1e4,
                    help="cancellation probe: mean added (norms) or logit shift (softmax); capped per dtype (bf16 16, fp16 128)",
                ),
            },
        ),
        _c(
            id="C-PRC-03",
            backward=False,
            family="precision",
            name="operand rounding",
            provenance="paper",
            asserts="operands are not silently rounded (TF32, HF32, bf16) unless declared",
            trait="operand_products",
            signatures=("operand-truncation",),
            params={
                "operand_bits": ParamSpec(int, 0, help="declared operand mantissa bits; 0 = the dtype's own"),
            },
        ),
        _c(
            id="C-PRC-04",
            backward=False,
            family="precision",
            name="output rounding and saturation",
            provenance="paper",
            asserts="low-precision outputs round and saturate as declared (RNE, fp8 saturate or NaN)",
            trait="fp8_output",
            probes=False,
            # the family's bound: every output is held to it, a rounded one also to ½ ulp (c_prc_04.py)
            postcondition="policy",
            signatures=("biased-rounding", "overflow"),
            params={
                "rounding": ParamSpec(str, "nearest-even", ("nearest-even",), "declared rounding mode"),
                "overflow": ParamSpec(
                    str, "saturate", ("saturate", "inf", "nan"), "declared overflow result"
                ),
            },
        ),
        _c(
            id="C-ORD-01",
            family="ordering",
            name="reduction-order bound",
            provenance="paper",
            asserts="results across valid reduction orders stay within the non-associativity bound",
            trait="reducing",
            signatures=("order-dependence", "low-precision-accumulator"),
            params={"orders": ParamSpec(int, 4, help="number of permuted reduction orders tried")},
        ),
        _c(
            id="C-ORD-02",
            family="ordering",
            name="run-to-run determinism",
            provenance="paper",
            asserts="run-to-run determinism at the declared level (bitwise, bounded, none)",
            trait="",
            postcondition="invariant",
            signatures=("nondeterminism",),
            params={
                "level": ParamSpec(str, "bitwise", ("bitwise", "bounded", "none"), "declared determinism"),
                "repeats": ParamSpec(int, 5, help="identical calls compared"),
            },
        ),
        _c(
            id="C-ORD-03",
            family="ordering",
            name="batch invariance",
            provenance="kcgate",
            asserts="a row's result does not depend on batch size, position or batch-mates",
            # not where the output has no rows of its own: rope's (q, k) pair flattened, a mean loss, and
            # scaled_mm's per-tensor scales
            trait="own_rows",
            postcondition="invariant",
            signatures=("batch-dependence",),
            params={"level": ParamSpec(str, "bitwise", ("bitwise", "bounded"), "declared invariance")},
        ),
        _c(
            id="C-CMP-01",
            family="compiler",
            name="fusion equivalence",
            provenance="kcgate",
            asserts="a fused kernel matches the unfused composition within the propagated bound",
            trait="",
            signatures=("approximation",),
        ),
        _c(
            id="C-CMP-02",
            family="compiler",
            name="every autotuning configuration",
            provenance="kcgate",
            asserts="every autotuning configuration satisfies the contract, not only the winner",
            trait="",
            signatures=("tail-pattern", "tile-pattern"),
            params={"configs": ParamSpec(list, [], help="configurations passed to the kernel as config=")},
        ),
        _c(
            id="C-CMP-03",
            family="compiler",
            name="shape-class generalisation",
            provenance="kcgate",
            asserts="correct over the declared shape class, held-out shapes and fresh inputs included",
            trait="",
            trials=3,
            signatures=("stale-output", "shape-overfitting"),
            params={"held_out": ParamSpec(int, 3, help="extra shapes drawn from the shape class per seed")},
        ),
        _c(
            id="C-EXC-01",
            family="exceptional",
            name="NaN, Inf and subnormal policy",
            provenance="kcgate",
            asserts="NaN/Inf propagate per declared policy; subnormals kept or flushed as declared",
            trait="",
            probes=False,
            postcondition="policy",
            signatures=("nan-pattern", "subnormal-flush"),
            params={
                "nan": ParamSpec(
                    str,
                    "propagate",
                    ("propagate", "any", "raise", "mask"),
                    "declared NaN/Inf policy: propagate (IEEE), raise (on NaN/Inf input), mask (mask_value)",
                ),
                "mask_value": ParamSpec(
                    float, 0.0, help='nan = "mask": the value every output IEEE would make NaN/Inf must hold'
                ),
                "subnormals": ParamSpec(str, "keep", ("keep", "flush", "any"), "declared subnormal policy"),
            },
        ),
        _c(
            id="C-EXC-02",
            backward=False,
            family="exceptional",
            name="out-of-bounds policy",
            provenance="kcgate",
            asserts="out-of-bounds indices and accesses follow the declared policy (raise, clamp, zero, undefined)",
            trait="indexed",
            probes=False,
            postcondition="policy",
            tolerance="exact",
            signatures=("out-of-bounds",),
            params={
                "oob": ParamSpec(
                    str, "raise", ("raise", "clamp", "zero", "undefined"), "declared OOB policy"
                ),
            },
        ),
    )
}


def applicable(op: str) -> tuple[str, ...]:
    """The classes that apply to op family ``op``, in the table's order."""
    return tuple(cid for cid, c in CLASSES.items() if op in c.ops)


def why(cid: str, op: str) -> str:
    """Why class ``cid`` does or does not apply to ``op``: "applies to <the ops it is for>"."""
    c = CLASSES[cid]
    verb = "applies" if op in c.ops else "does not apply"
    return f"{verb}: {c.id} is for {TRAIT_WHY[c.trait]}"


def refusal_fix(cid: str, op: str) -> str:
    """The fix line of a class refused for an op: the classes that do apply to it, and why this one does not."""
    return (
        f"{cid} is for {TRAIT_WHY[CLASSES[cid].trait]}; for {op!r} use one of {', '.join(applicable(op))} "
        f"({PLAIN} is plain correctness; `kcgate validate --op {op}` says why each applies)"
    )


def suggest(name: str, choices: list[str] | tuple[str, ...]) -> str:
    """'; did you mean X?' for a near miss, else the list of choices."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return "choose one of: " + ", ".join(choices)


def backward_classes() -> tuple[str, ...]:
    """The classes that apply to a backward contract (``ContractClass.backward``)."""
    return tuple(k for k, c in CLASSES.items() if c.backward)
