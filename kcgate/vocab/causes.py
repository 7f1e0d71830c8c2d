"""The failure causes: every name a violation signature, an integrity issue or a renderer uses, defined in
one table. Diagnosis, the class checks and the PR comment read it; nothing else lists causes. No torch.

``kind``: integrity (the harness saw the kernel misbehave: the numbers are not judged), precision (the error
has the shape of a rounding, accumulation or overflow model), semantic (a wrong result: garbage, an offset,
a corrupted element, other semantics) or structural (where the error sits: a tail, a tile, NaN/Inf).
``budget_meaningful``: a failed case of this cause has a budget worth showing; for the integrity causes the
kernel's output was not compared, so a missing budget is expected and is not a NaN/Inf.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    name: str
    kind: str  # integrity | precision | semantic | structural
    label: str  # what it means, in one line (docs/signatures.md)
    issue: str = ""  # integrity only: the failure message the checks print
    keeps: bool = False  # says what happened more precisely than a later K sweep or probe could
    nonfinite: bool = False  # names NaN/Inf where the oracle is finite
    generic: bool = (
        False  # claims no mechanism: a mutant of the reference that reproduces the output may explain it
    )
    on_output: bool = False  # integrity: seen on the forward output unless the check records a gradient
    drawn: bool = False  # a stability probe's cause whose inputs are drawn to a pattern (no offset to shrink)

    @property
    def budget_meaningful(self) -> bool:
        return self.kind != "integrity"

    @property
    def anchor(self) -> str:
        return f"docs/signatures.md#{self.name}"


KINDS = ("integrity", "precision", "semantic", "structural")

# Integrity causes come first, in the order the first present one is named (a case with several issues).
# fmt: off
CAUSE_TABLE: tuple[Cause, ...] = (
    Cause("bad-output", "integrity", "the kernel's output differs from the reference's in shape or structure",
          "the kernel's output differs from the reference's in shape or structure", on_output=True),
    Cause("wrong-dtype", "integrity", "the output's dtype differs from the declared out_dtype",
          "the output's dtype is not the declared out_dtype", on_output=True),
    Cause("input-mutation", "integrity", "the kernel modified its inputs", "the kernel modified its inputs"),
    Cause("out-of-bounds", "integrity", "out-of-range indices or accesses not handled per the declared policy",
          "the kernel wrote outside its buffers (guard band changed)"),
    Cause("stale-output", "integrity", "the output was not computed from this call's inputs (a stale buffer)",
          "the output equals an earlier call's output on different inputs (stale buffer)", on_output=True),
    Cause("constant-output", "integrity",
          "the output is one value everywhere and the same on every call, whatever the inputs (a loop that never "
          "ran, a store skipped): equal to an earlier call's, but no evidence of a stale buffer",
          "the output is one value everywhere, the same on different inputs (a loop that never ran or a store "
          "skipped?)", on_output=True),
    Cause("global-state", "integrity", "the kernel changed process-wide state (RNG, flags, dtype defaults)",
          "the kernel changed torch's global state (restored before the oracle ran)"),
    Cause("missing-gradient", "integrity",
          "the backward gave no gradient for a differentiated input (or the output has no graph)",
          "the backward gave no gradient for a differentiated input"),
    Cause("zero-gradient", "integrity", "the backward returned all zeros for a gradient that is not zero",
          "the backward returned an all-zero gradient where the fp64 gradient is not zero"),
    Cause("raised", "integrity", "the kernel raised an exception", "the kernel raised"),
    Cause("low-precision-accumulator", "precision",
          "accumulation happens at fewer bits than declared (fitted from error vs K)"),
    Cause("operand-truncation", "precision",
          "operands rounded to fewer mantissa bits before the multiply (TF32-, bf16-like)"),
    Cause("biased-rounding", "precision",
          "errors share a sign and grow ~K, not ~√K (truncation, round toward zero, stagnation)"),
    Cause("cancellation", "precision", "catastrophic cancellation: the error scales with |mean|/std or the inputs' offset"),
    Cause("overflow", "structural", "an intermediate overflowed (inf or NaN where the oracle is finite)", keeps=True,
          nonfinite=True),
    Cause("saturation", "semantic",
          "fine on the contract's inputs, wrong on softcapped logits where tanh saturates (padded lanes counted)"),
    Cause("approximation", "precision", "a smooth, systematic error over the input range (a fast-math approximation)"),
    Cause("order-dependence", "precision", "the result depends on the reduction order beyond the non-associativity bound"),
    Cause("nondeterminism", "precision", "identical calls return different bits"),
    Cause("batch-dependence", "semantic", "a row's result depends on batch size, position or batch-mates"),
    Cause("tail-pattern", "structural", "errors concentrated in the last partial tile", keeps=True),
    Cause("tile-pattern", "structural", "errors repeat with a tile period along an index", keeps=True),
    Cause("nan-pattern", "structural", "NaN/Inf appear or vanish against the declared policy", keeps=True,
          nonfinite=True),
    Cause("subnormal-flush", "precision", "subnormal inputs or outputs flushed to zero against the declared policy"),
    Cause("shape-overfitting", "semantic", "correct at the declared shapes, wrong at held-out shapes of the same class"),
    Cause("wrong-semantics", "semantic",
          "the output is the op under other semantics (a dropped mask, another layout, a shifted group index): "
          "the family's known mistakes, each matched against its own oracle"),
    Cause("exceeds-bound", "precision", "error beyond the derived bound with no more specific pattern",
          generic=True),
    Cause("excess-error", "precision", "within the bound, but the error exceeds a correct implementation's on the same inputs"),
    Cause("garbage", "semantic",
          "errors far beyond any precision model: the output is unrelated to the result (not an accumulator)", keeps=True,
          generic=True),
    Cause("offset", "semantic", "a constant or per-block bias added to the output", keeps=True),
    Cause("sparse", "semantic", "a few elements corrupted (their indices are named), the rest within the bound", keeps=True),
    Cause("noise", "precision", "diffuse, unbiased errors over many elements, not fitted by any accumulator width"),
    Cause("underflow", "structural",
          "an intermediate underflowed to 0 (exp of a large negative number), then log 0 or 0/0 gave NaN/Inf where "
          "the oracle is finite", keeps=True, nonfinite=True),
    Cause("ties", "semantic",
          "fine on the contract's inputs, wrong where two inputs are equal (a comparison or subgradient at ties)",
          drawn=True),
    Cause("peaked", "semantic", "fine on the contract's inputs, wrong on peaked, near-one-hot distributions",
          drawn=True),
    Cause("exp-range", "semantic",
          "fine on the contract's inputs, wrong on values near exp's overflow and underflow (an exp without "
          "max-subtraction or a threshold)", drawn=True),
    Cause("log-range", "semantic",
          "fine on the contract's inputs, wrong on values near the smallest normal (a log without a clamp, or an "
          "eps the reference lacks)", drawn=True),
    Cause("subnormal", "semantic",
          "fine on the contract's inputs, wrong on subnormal inputs (flushed to zero, then a log or a division)",
          drawn=True),
    Cause("dynamic-range", "semantic",
          "fine on the contract's inputs, wrong where one row spans many binades (small terms lost, an eps or "
          "threshold in the wrong place)", drawn=True),
    Cause("overflow-nan", "structural", "exp (or another intermediate) overflowed, giving NaN/Inf where the oracle is finite",
          keeps=True, nonfinite=True),
    Cause("row-scale", "precision",
          "each row is off by one common factor: the row's reduction (sum of squares, variance, normaliser) is imprecise"),
    Cause("scaled-output", "semantic",
          "the output (or a gradient) is the right one times a constant: a factor dropped or doubled (gelu's 0.5, "
          "a mean's 1/N), the fitted factor named", keeps=True),
    Cause("sign-scaled", "semantic",
          "one sign of the output is scaled by a constant, the other right (a wrong negative slope)", keeps=True),
    Cause("argument-scale", "semantic",
          "an activation's gate evaluated at a scaled argument (σ(2x) for σ(x), erf(x) for erf(x/√2))", keeps=True),
    Cause("masked-tail", "semantic",
          "lanes past n read 0 into a row sum (a masked load with other = 0.0 where −inf was meant)", keeps=True),
    Cause("overwritten-accumulator", "semantic",
          "only the last block of a reduction counted: the running sum overwritten (acc = instead of acc +=)",
          keeps=True),
    Cause("low-precision-reduction", "precision",
          "a row's statistic (sum of exp, mean of squares) is a bf16 or fp16 value in nearly every row: the row "
          "reduction is kept in that format", keeps=True),
    Cause("scaled-rows", "semantic",
          "each row (or each tile of a row) is the right one times its own factor, far beyond any rounding: the "
          "row's statistic or normaliser is wrong (read from another row, normalised per tile)", keeps=True),
    Cause("wrong-extent", "semantic",
          "a reduction over the wrong extent: a sum that counted a strided or partial subset of its terms, a row "
          "statistic taken over part of the row", keeps=True),
    Cause("missing-term", "semantic",
          "a backward lacks one term of its formula (softmax's −y·Σ(y·dy))", keeps=True),
)
# fmt: on
CAUSE = {c.name: c for c in CAUSE_TABLE}
GENERIC = frozenset(c.name for c in CAUSE_TABLE if c.generic)  # names that claim no mechanism


def of_kind(kind: str) -> tuple[str, ...]:
    """The causes of one kind, in table order."""
    return tuple(c.name for c in CAUSE_TABLE if c.kind == kind)


INTEGRITY = of_kind("integrity")  # also the order the first present issue is named in
ISSUE_MESSAGES = {c.name: c.issue for c in CAUSE_TABLE if c.issue}
KEPT = tuple(c.name for c in CAUSE_TABLE if c.keeps)  # the checks keep these over a later sweep's name
NONFINITE = tuple(c.name for c in CAUSE_TABLE if c.nonfinite)


SLOW_REFERENCE = "kcgate: slow reference: "
"""The worker's stderr line where a custom op's reference is slow enough that its derived bound may outlast
the case's timeout (kcgate.numerics.derived); a timed-out case's message leads with it (execution/executors)."""
DRAWN = tuple(
    c.name for c in CAUSE_TABLE if c.drawn
)  # the ties and peaked probes (engine/checks/stability.py)
ON_OUTPUT = tuple(
    c.name for c in CAUSE_TABLE if c.on_output
)  # named on the forward output of a backward case
