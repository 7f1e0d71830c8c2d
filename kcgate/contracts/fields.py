"""The contract format as one declarative table: every key of contracts.toml, one ``Field`` row each. No torch.

A row gives the key's type, default, allowed values (here, or read from the table that owns them: the op
catalogue, the class table, the dtype and diff-category tables), limits, description and since-version.
``kcgate.contracts.validate`` runs the generic checks from the rows (type, allowed value, range, unknown key with the
closest match) and words their messages from them; ``kcgate.render.schema`` generates the JSON Schema from them,
with every row's description. Adding a key is one row here, plus a bespoke check in ``spec`` only if it
needs one (a cross-check between keys).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from kcgate.contracts.policy import BLOCKABLE, WAIVER_KINDS
from kcgate.vocab import dtypes
from kcgate.vocab.catalogue import CATALOGUE
from kcgate.vocab.classes import CLASSES
from kcgate.vocab.device_kinds import DEVICES

# What a row's ``type`` says about its value; spec reads the simple ones generically, schema describes all.
TYPES = {
    "string": "a string",
    "strings": "a list of strings (one string is a list of one)",
    "choice": "one of the row's allowed values",
    "import": 'an import string "package.module:name"',
    "id": "letters, digits, '.', '_', '-' (at most 100)",
    "date": "a TOML date, e.g. 2027-03-01",
    "number": "a finite number within the row's limits",
    "integer": "an integer within the row's limits",
    "integers": "a list of integers within the row's limits",
    "boolean": "true or false",
    "dtype": "a dtype name or alias",
    "dtypes": "a list of dtype names or aliases",
    "shapes": "a list of shapes, each a list of positive integers",
    "constraints": 'a table dim -> "constraint" (grammar: kcgate.contracts.shape_class)',
    "table": "a table of the row's fields",
    "tables": "an array of tables of the row's fields",
    "mapping": "a table of keyword arguments (values may be size placeholders)",
    "array": "a list of argument values (input names, size placeholders, literals)",
    "env": 'a table NAME = "string"',
    "params": "a table of the class's and the op family's parameters",
    "per-input": "a table input name -> a table of the row's fields",
}
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
IMPORT_PATTERN = r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$"


@dataclass(frozen=True)
class Field:
    key: str
    part: str  # which of the paper's eight parts (or "calibration", "harness", "project"...) it belongs to
    description: str
    type: str = "string"  # a TYPES name
    choices: tuple[str, ...] = ()  # the allowed values (of each item, for a list)
    source: str = ""  # the table that defines ``choices`` when another module owns them
    default: Any = None  # None: no default, or one the loader derives (from the class, the op family)
    minimum: float | None = None
    maximum: float | None = None
    exclusive: bool = False  # ``minimum`` itself is not allowed (a positive number)
    below: str = ""  # why a positive value under ``minimum`` is wrong (checked after the sign)
    fields: tuple[Field, ...] = ()  # the keys of a table (or of each table of an array)
    alternative: str = ""  # a second form the key also accepts: "table" (its fields) or "false"
    example: str = ""  # how to write a valid value: the fix a wrong one is told
    since: str = "0.1"  # the kcgate version that introduced the key
    required: bool = False

    def field(self, key: str) -> Field:
        return self.by_key[key]

    @functools.cached_property
    def by_key(self) -> dict[str, Field]:
        """The table's rows by key (computed once: the loader looks rows up for every contract)."""
        return {f.key: f for f in self.fields}

    @functools.cached_property
    def keys(self) -> frozenset[str]:
        return frozenset(self.by_key)

    @functools.cached_property
    def defaults(self) -> dict[str, Any]:
        """The table's rows' defaults by key."""
        return {f.key: f.default for f in self.fields}


def _enum_row(key: str, part: str, description: str, values: tuple[str, ...], **kw: Any) -> Field:
    """A row whose allowed values are defined here (the one list of them), the first being the default."""
    return Field(key, part, description, type="choice", choices=values, default=values[0], **kw)


def _positive(key: str, part: str, description: str, **kw: Any) -> Field:
    """A row for a positive finite number."""
    return Field(key, part, description, type="number", minimum=0, exclusive=True, **kw)


EXCESS_FACTOR = 1.5  # the sensitivity gate's default factor (kcgate.engine.sensitivity, docs/sensitivity.md)
EXCESS_REFERENCES = ("composite", "sequential")  # the sensitivity gate's floor (docs/sensitivity.md)
RELATIVE_FACTOR = 2.0  # FlashAttention's: error at most 2x the same-precision PyTorch implementation's
FREIVALDS_VECTORS = 10  # a row with an element over the threshold is missed with probability <= 2^-10

TOLERANCE_FIELDS = (
    _enum_row(
        "method",
        "5 tolerance",
        "how the allowed error is computed (default: the class's, or the op family's own)",
        ("error-bound", "ulp", "abs-rel", "exact", "relative"),
    ),
    _positive("lambda", "5 tolerance", "λ of the probabilistic error bound", default=8.0),
    _positive("ulp", "5 tolerance", "method 'ulp': allowed units in the last place", default=4.0),
    _positive("rtol", "5 tolerance", "method 'abs-rel': relative tolerance", default=0.0),
    _positive("atol", "5 tolerance", "method 'abs-rel': absolute tolerance", default=0.0),
    Field(
        "factor",
        "5 tolerance",
        "method 'relative': allowed error as a multiple of the baseline's error",
        type="number",
        default=RELATIVE_FACTOR,
        minimum=1,
        below="would fail the baseline itself",
        example="factor = 2.0 (FlashAttention's)",
        since="0.2",
    ),
    Field(
        "baseline",
        "5 tolerance",
        "method 'relative': the baseline implementation (default: the composite)",
        type="import",
        since="0.2",
    ),
    Field(
        "excess",
        "5 tolerance",
        "the sensitivity gate's factor (at least 1), or false to turn the gate off",
        type="number",
        minimum=1,
        default=EXCESS_FACTOR,
        alternative="false",
        example=f"excess = {EXCESS_FACTOR} (the default), a larger factor, or false to turn the gate off",
        since="0.2",
    ),
    _enum_row(
        "excess_reference",
        "5 tolerance",
        "what the sensitivity gate holds the error to: the composite's (torch's, and for row sums an emulated "
        "blocked kernel's), or a sequential accumulator's model, for kernels that sum left to right",
        EXCESS_REFERENCES,
        since="0.2",
    ),
)
PROTOCOL_LIMITS = {
    "seeds": 1000,
    "trials": 1000,
    "guard": 1 << 20,
    "freivalds_vectors": 256,
    "held_out": 1000,
    "fresh": 100,
}
"""Upper bounds on protocol sizes (README): a plan of 10^8 seeds would exhaust memory before it ran."""
PROTOCOL_FIELDS = (
    Field(
        "seeds",
        "7 protocol",
        "input seeds per case (default: the class's)",
        type="integer",
        minimum=1,
        maximum=PROTOCOL_LIMITS["seeds"],
    ),
    Field(
        "trials",
        "7 protocol",
        "runs per seed (default: the class's)",
        type="integer",
        minimum=1,
        maximum=PROTOCOL_LIMITS["trials"],
    ),
    Field("poison", "7 protocol", "fill output buffers with NaN first", type="boolean", default=True),
    Field(
        "guard",
        "7 protocol",
        "guard-band elements around each output, checked untouched",
        type="integer",
        default=16,
        minimum=0,
        maximum=PROTOCOL_LIMITS["guard"],
    ),
    _positive(
        "timeout_s",
        "7 protocol",
        "seconds a case may take before it is an error (`kcgate run --timeout` overrides it; the results "
        "record the override)",
        default=120.0,
    ),
    Field(
        "held_out",
        "7 protocol",
        "C-CMP-03: held-out shapes per seed besides the shape class's extremes (default: params.held_out, the "
        "class's 3); `kcgate run --held-out` overrides it and the results record the override",
        type="integer",
        minimum=0,
        maximum=PROTOCOL_LIMITS["held_out"],
        example="protocol = { held_out = 8 }",
        since="0.2",
    ),
    Field(
        "k_sweep",
        "7 protocol",
        "reduction lengths K to sweep (C-ORD-02)",
        type="integers",
        default=(),
        minimum=1,
        example="k_sweep = [256, 1024, 4096]",
    ),
    Field(
        "boundary",
        "7 protocol",
        "also run boundary shapes derived from the declared ones: the last dimension and the reduction "
        "length off powers of two and tiles (n - 1, a prime near n), a single row, the smallest sizes "
        "(kcgate.plan.boundary_shapes; C-CMP-03 has its own held-out search)",
        type="boolean",
        default=True,
        since="0.2",
    ),
    Field(
        "fresh",
        "7 protocol",
        "cases at a fresh, unpredictable seed per dtype and declared shape, run beside the cases that replay "
        "the baseline's seeds (their ids end in /f0, /f1, ...): no kernel can be tuned to the baseline's "
        "inputs (docs/diff.md#same-inputs-on-both-sides); 0: none",
        type="integer",
        default=1,
        minimum=0,
        maximum=PROTOCOL_LIMITS["fresh"],
        example="protocol = { fresh = 2 }",
        since="0.2",
    ),
    Field(
        "probes",
        "7 protocol",
        "also run the stability probes after the class's check, on the families C-PRC-02 applies to: "
        "cancellation (a large input offset), overflow (logits past exp's range), saturation (softcapped "
        "logits where tanh saturates); C-PRC-02 always runs them (kcgate.engine.checks.stability)",
        type="boolean",
        default=True,
        since="0.2",
    ),
    Field(
        "freivalds_vectors",
        "7 protocol",
        "random vectors per Freivalds check (default 10: a bad row missed w.p. <= 1e-3)",
        type="integer",
        default=FREIVALDS_VECTORS,
        minimum=1,
        maximum=PROTOCOL_LIMITS["freivalds_vectors"],
        since="0.2",
    ),
)
STABILITY_FIELDS = (
    Field(
        "offset",
        "7 protocol",
        "a constant added to the input (a large mean): capped per dtype so that unit-spread inputs keep ~16 "
        "values per unit (bf16 16, fp16 128), as C-PRC-02's params.offset",
        type="number",
        minimum=0,
        exclusive=True,
        example="x = { offset = 1e4 }",
        since="0.2",
    ),
    Field(
        "scale",
        "7 protocol",
        "a factor the input is multiplied by (a statistic computed in the input dtype overflows)",
        type="number",
        minimum=2,
        below="(a scale probe moves inputs toward overflow: use 2 or more)",
        example="x = { scale = 256 }",
        since="0.2",
    ),
    Field(
        "saturation",
        "7 protocol",
        "a softcap c: the input drawn near -8c with spread c, where tanh(x / c) saturates",
        type="number",
        minimum=0,
        exclusive=True,
        example="logits = { saturation = 30.0 }",
        since="0.2",
    ),
    Field(
        "exp_range",
        "7 protocol",
        "the exp-range probe: the input scaled so its largest value is this and its most negative minus half "
        "of it (kcgate infers 91.7, past fp32's exp overflow, where the reference takes an exp)",
        type="number",
        minimum=0,
        exclusive=True,
        example="x = { exp_range = 91.7 }",
        since="0.3",
    ),
    Field(
        "log_range",
        "7 protocol",
        "the log-range probe: every other element near the input dtype's smallest normal (kcgate infers it on "
        "non-negative inputs where the reference takes a log)",
        type="boolean",
        example="p = { log_range = true }",
        since="0.3",
    ),
    Field(
        "subnormal",
        "7 protocol",
        "the subnormal probe: every other element a subnormal of the input dtype, its sign kept (kcgate infers "
        "it on every non-integer float input)",
        type="boolean",
        example="x = { subnormal = true }",
        since="0.3",
    ),
    Field(
        "binades",
        "7 protocol",
        "the dynamic-range probe: rows and elements scaled by powers of two spanning about this many binades "
        "each way (kcgate infers 20, fp16 6, where the reference reduces)",
        type="number",
        minimum=1,
        example="x = { binades = 30 }",
        since="0.3",
    ),
)
CALL_FIELDS = (
    Field(
        "args", "2 scope", 'positional arguments, e.g. ["x", ["{n}"], "w", "b"]', type="array", since="0.2"
    ),
    Field("kwargs", "2 scope", "keyword arguments, e.g. { eps = 1e-5 }", type="mapping", since="0.2"),
)
SHAPE_CLASS_FIELDS = (
    Field(
        "dims", "3 precondition", "C-CMP-03: the class held-out shapes span", type="constraints", since="0.2"
    ),
    Field(
        "max_elements",
        "3 precondition",
        "cap on a held-out shape's product of dims (default: kcgate.contracts.shape_class.MAX_ELEMENTS)",
        type="integer",
        minimum=1,
        maximum=1 << 40,
        since="0.2",
    ),
)
WAIVER_FIELDS = (
    Field("runner", "gate", "the runners it applies to (a glob pattern, e.g. apple-*)", required=True),
    Field("until", "gate", "its expiry date: every waiver expires", type="date", required=True),
    Field("reason", "gate", "why the violation is accepted (non-empty)", required=True),
    Field("owner", "gate", "who answers for it", default=""),
    Field(
        "kind",
        "gate",
        "violation (default): failing cases; error: cases that cannot run",
        type="choice",
        choices=WAIVER_KINDS,
        source="kcgate.contracts.policy.WAIVER_KINDS",
        default=WAIVER_KINDS[0],
        since="0.2",
    ),
)
CONTRACT_FIELDS: tuple[Field, ...] = (
    Field(
        "id",
        "1 identifier",
        "stable identifier; baselines and waivers are keyed on it",
        type="id",
        required=True,
    ),
    Field(
        "class",
        "1 identifier",
        "one of the twelve contract classes; it supplies parts 4-8",
        type="choice",
        choices=tuple(CLASSES),
        source="kcgate.vocab.classes.CLASSES",
        required=True,
    ),
    Field(
        "kernel",
        "2 scope",
        "the kernel under contract: an import string pkg.mod:fn",
        type="import",
        required=True,
    ),
    Field(
        "op",
        "2 scope",
        "the op family (call convention, inputs, fp64 oracle, error bound)",
        type="choice",
        choices=tuple(CATALOGUE),
        source="kcgate.vocab.catalogue.CATALOGUE",
        required=True,
    ),
    Field("description", "1 identifier", "free text shown in reports", default=""),
    Field(
        "devices",
        "2 scope",
        "device kinds the contract applies to (default: all); on another device kcgate run and the pytest plugin leave it out and say so",
        type="strings",
        choices=DEVICES,
        source="kcgate.vocab.device_kinds.DEVICE_KINDS",
        default=DEVICES,
    ),
    Field(
        "dtypes",
        "3 precondition",
        "input dtypes, one case per dtype",
        type="dtypes",
        default=("float32",),
        choices=dtypes.TENSOR_DTYPES,
        source="kcgate.vocab.dtypes.TENSOR_DTYPES",
    ),
    Field(
        "accumulate",
        "3 precondition",
        "the declared accumulator precision the bound assumes",
        type="dtype",
        choices=dtypes.ACCUMULATORS,
        source="kcgate.vocab.dtypes.ACCUMULATORS",
        default="float32",
    ),
    Field(
        "out_dtype",
        "3 precondition",
        "the output's dtype (default: the input dtype); part of every postcondition: "
        "a kernel returning another dtype fails with signature wrong-dtype, whatever the class",
        type="dtype",
        choices=dtypes.TENSOR_DTYPES,
        source="kcgate.vocab.dtypes.TENSOR_DTYPES",
    ),
    Field(
        "shapes",
        "3 precondition",
        "case shapes in the op family's shape form (default: the family's)",
        type="shapes",
        example="shapes = [[128, 4096, 128], [1, 8192, 256]]",
    ),
    _enum_row(
        "distribution",
        "3 precondition",
        "how inputs are drawn",
        ("normal", "uniform", "positive", "integers", "large-mean"),
    ),
    _enum_row(
        "layout",
        "3 precondition",
        "contiguous or transposed operands",
        ("contiguous", "transposed"),
    ),
    Field(
        "postcondition",
        "4 postcondition",
        "within-bound, bitwise, invariant or policy (default: the class's)",
        type="choice",
        choices=("within-bound", "bitwise", "invariant", "policy"),
    ),
    Field(
        "tolerance",
        "5 tolerance",
        "how much error is allowed: method and its parameters",
        type="table",
        fields=TOLERANCE_FIELDS,
    ),
    Field(
        "oracle",
        "6 oracle",
        "what the output is compared with (fp64, freivalds, auto, property, user; default: the class's)",
        type="choice",
        choices=("fp64", "freivalds", "auto", "property", "user"),
    ),
    Field(
        "reference",
        "6 oracle",
        'oracle = "user": the reference implementation (import string)',
        type="import",
    ),
    Field("inputs", "3 precondition", "a custom input generator (import string)", type="import"),
    Field(
        "protocol",
        "7 protocol",
        "the measurement protocol: seeds, trials, poison, guard bands, timeout",
        type="table",
        fields=PROTOCOL_FIELDS,
    ),
    Field(
        "signature", "8 signatures", "violation signatures to test for (default: the class's)", type="strings"
    ),
    Field("params", "class", "the class's parameters and the op family's own", type="params"),
    Field(
        "call",
        "2 scope",
        'how the kernel is called: "return" or "out" (an out= buffer), or a table mapping the op\'s inputs '
        'and sizes to the kernel\'s signature: args = ["x", ["{n}"], "w", "b"], kwargs = { eps = 1e-5 }',
        type="choice",
        choices=("return", "out"),
        default="return",
        alternative="table",
        fields=CALL_FIELDS,
        since="0.2",
    ),
    Field(
        "good",
        "calibration",
        "a correct implementation: calibrate checks the contract accepts it",
        type="import",
    ),
    Field(
        "bad",
        "calibration",
        "a wrong implementation: calibrate checks the contract rejects it",
        type="import",
    ),
    Field("baseline", "calibration", "a reference implementation for calibrate's third state", type="import"),
    Field(
        "waiver",
        "gate",
        "known violations (or errors) accepted on matching runners until a date",
        type="tables",
        fields=WAIVER_FIELDS,
    ),
    _enum_row(
        "direction",
        "4 postcondition",
        "forward (default), backward (every input and parameter gradient against fp64 autograd) or both",
        ("forward", "backward", "both"),
        since="0.2",
    ),
    Field(
        "shape_constraints",
        "3 precondition",
        "dim (letter or index) -> constraint every drawn shape respects",
        type="constraints",
        since="0.2",
    ),
    Field(
        "stability",
        "7 protocol",
        "custom ops: stability probes per input, keyed by the reference's parameter name (offset, scale, "
        "saturation); kcgate also probes, by default, an input the fp64 reference is shift- or "
        "scale-invariant in (a softmax's logits, a normaliser's x); an empty table (x = {}) turns that off "
        "for the input, protocol.probes = false for all (kcgate.engine.checks.stability)",
        type="per-input",
        fields=STABILITY_FIELDS,
        example="stability = { x = { offset = 1e4 }, logits = { saturation = 30.0 } }",
        since="0.2",
    ),
    Field(
        "shape_class",
        "3 precondition",
        "C-CMP-03: the class of shapes held-out shapes span",
        type="table",
        fields=SHAPE_CLASS_FIELDS,
        since="0.2",
    ),
    Field(
        "init",
        "2 scope",
        'constructor kwargs when the kernel is an nn.Module class, e.g. { hidden_size = "{n}" }; '
        "its weight and bias take the op's w and b inputs",
        type="mapping",
        since="0.2",
    ),
    Field(
        "mutates",
        "2 scope",
        'inputs the kernel overwrites by design, by name, e.g. ["logits"] (Liger\'s cross-entropy writes its '
        "gradient into them): not an input-mutation finding; the oracle, the bounds and the gradients' "
        "references read the values drawn",
        type="strings",
        since="0.2",
    ),
    Field(
        "no_grad",
        "2 scope",
        'inputs that take no gradient, by name, e.g. ["target"] (a loss\'s target, labels, a mask, an `out` '
        'buffer): with direction = "backward" or "both" kcgate neither asks the kernel for their gradients nor '
        "compares them (every other floating-point input is differentiated); index inputs never are",
        type="strings",
        since="0.2",
    ),
    Field(
        "outputs",
        "4 postcondition",
        "names of the outputs when the kernel and its reference return several tensors as a plain tuple, e.g. "
        '["out", "residual"]: one per tensor, in order (a dict\'s keys or a named tuple\'s fields name them '
        "otherwise); each output is compared, bounded and named on its own",
        type="strings",
        since="0.2",
    ),
    Field(
        "env",
        "harness",
        'environment set in the worker before the kernel is imported, e.g. { TRITON_INTERPRET = "1" }',
        type="env",
        since="0.2",
    ),
)
PROJECT_FIELDS = (
    Field("name", "project", "the project's name in reports (default: the directory's)"),
    Field(
        "paths", "project", "directories searched for kernel modules, relative to this file", type="strings"
    ),
    Field("baselines", "project", "the directory of baseline results files"),
    Field("results", "project", "the directory results files are written to", default="results"),
    Field(
        "track",
        "project",
        "installed distributions whose versions `kcgate run` records (the diff and the PR comment show "
        '"liger-kernel 0.5.8 → 0.5.9" when base and PR differ)',
        type="strings",
        example='track = ["liger-kernel"]',
        since="0.2",
    ),
    Field(
        "discover",
        "project",
        "modules whose @kcgate.contract declarations are read (statically) as contracts",
        type="strings",
        since="0.2",
    ),
)
DRIFT_EXAMPLE = "budget_drift = { ratio = 4.0, floor = 1e-3 } (a rise of more than 4x), or { absolute = 0.5 }"
DRIFT_FIELDS = (
    Field(
        "ratio",
        "gate",
        "a rise of more than this factor is drift",
        type="number",
        default=4.0,
        minimum=1,
        exclusive=True,
        below="would flag every rise",
        example=DRIFT_EXAMPLE,
        since="0.2",
    ),
    _positive(
        "floor",
        "gate",
        "both budgets are floored at this first, so noise far below the bound is not drift",
        default=1e-3,
        since="0.2",
    ),
    _positive("absolute", "gate", "a rise of more than this amount is drift", since="0.2"),
    Field(
        "rounding_floor",
        "gate",
        "16- and 8-bit outputs: the share of elements not correctly rounded is compared by ratio too, both "
        "sides floored at this share (and at 8 elements' worth) first: a correct kernel misses on a few elements",
        type="number",
        default=1e-3,
        minimum=0,
        maximum=1,
        exclusive=True,
        example="budget_drift = { ratio = 4.0, rounding_floor = 0.01 }",
        since="0.2",
    ),
)
POLICY_FIELDS = (
    Field(
        "block_on",
        "gate",
        "the diff categories that fail the gate",
        type="strings",
        choices=BLOCKABLE,
        source="kcgate.gate.model.CATEGORY_TABLE",
    ),
    _positive(
        "budget_drift",
        "gate",
        "a rise of more than ratio x (default 4, floor 1e-3) and/or absolute; a bare number is the absolute rule",
        alternative="table",
        fields=DRIFT_FIELDS,
        example=DRIFT_EXAMPLE,
    ),
    Field(
        "required_runners", "gate", "runner patterns that must report; a missing one blocks", type="strings"
    ),
    Field("acknowledge_removed", "gate", "contract ids whose removal is intended", type="strings"),
)
FILE_FIELDS = (
    Field(
        "project",
        "project",
        "the project: name, kernel paths, baseline and results directories",
        type="table",
        fields=PROJECT_FIELDS,
    ),
    Field("policy", "gate", "what blocks a pull request", type="table", fields=POLICY_FIELDS),
    Field(
        "contract",
        "contract",
        "the kernel contracts, one [[contract]] table each",
        type="tables",
        fields=CONTRACT_FIELDS,
        required=True,
    ),
)
CONTRACT_FIELD = {f.key: f for f in CONTRACT_FIELDS}
REQUIRED_KEYS = tuple(f.key for f in CONTRACT_FIELDS if f.required)
PROJECT_FIELD = {f.key: f for f in PROJECT_FIELDS}
POLICY_FIELD = {f.key: f for f in POLICY_FIELDS}
FILE_KEYS = frozenset(f.key for f in FILE_FIELDS)
