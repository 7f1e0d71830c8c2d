"""The contract format's keys, one row each: what ``[[contract]]`` accepts, documented once. No torch.

``kcgate.spec`` takes its list of known keys from here (an unknown key is an error naming the closest
one), ``kcgate.schema`` gives every key of ``kcgate schema contracts`` this row's description, and a test
checks that the README's contract-language section names every key. Adding a key is one row here plus its
check in ``spec``; the value types and allowed values stay in the schema and loader that validate them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    key: str
    part: str  # which of the paper's eight parts (or "calibration", "harness") the key belongs to
    description: str
    since: str = "0.1"  # the kcgate version that introduced the key
    required: bool = False


CONTRACT_FIELDS: tuple[Field, ...] = (
    Field("id", "1 identifier", "stable identifier; baselines and waivers are keyed on it", required=True),
    Field(
        "class", "1 identifier", "one of the twelve contract classes; it supplies parts 4-8", required=True
    ),
    Field("kernel", "2 scope", "the kernel under contract: an import string pkg.mod:fn", required=True),
    Field(
        "op", "2 scope", "the op family (call convention, inputs, fp64 oracle, error bound)", required=True
    ),
    Field("description", "1 identifier", "free text shown in reports"),
    Field("devices", "2 scope", "device kinds the contract applies to (default: all)"),
    Field("dtypes", "3 precondition", "input dtypes, one case per dtype"),
    Field("accumulate", "3 precondition", "the declared accumulator precision the bound assumes"),
    Field(
        "out_dtype",
        "3 precondition",
        "the output's dtype (default: the input dtype); part of every postcondition: "
        "a kernel returning another dtype fails with signature wrong-dtype, whatever the class",
    ),
    Field("shapes", "3 precondition", "case shapes in the op family's shape form (default: the family's)"),
    Field("distribution", "3 precondition", "how inputs are drawn"),
    Field("layout", "3 precondition", "contiguous or transposed operands"),
    Field("postcondition", "4 postcondition", "within-bound, bitwise, invariant or policy"),
    Field("tolerance", "5 tolerance", "how much error is allowed: method and its parameters"),
    Field("oracle", "6 oracle", "what the output is compared with (fp64, freivalds, auto, property, user)"),
    Field("reference", "6 oracle", 'oracle = "user": the reference implementation (import string)'),
    Field("inputs", "3 precondition", "a custom input generator (import string)"),
    Field("protocol", "7 protocol", "the measurement protocol: seeds, trials, poison, guard bands, timeout"),
    Field("signature", "8 signatures", "violation signatures to test for (default: the class's)"),
    Field("params", "class", "the class's parameters and the op family's own"),
    Field(
        "call",
        "2 scope",
        'how the kernel is called: "return" or "out" (an out= buffer), or a table mapping the op\'s inputs '
        'and sizes to the kernel\'s signature: args = ["x", ["{n}"], "w", "b"], kwargs = { eps = 1e-5 }',
        since="0.2",
    ),
    Field("good", "calibration", "a correct implementation: calibrate checks the contract accepts it"),
    Field("bad", "calibration", "a wrong implementation: calibrate checks the contract rejects it"),
    Field("baseline", "calibration", "a reference implementation for calibrate's third state"),
    Field("waiver", "gate", "known violations (or errors) accepted on matching runners until a date"),
    Field(
        "direction",
        "4 postcondition",
        "forward (default), backward (every input and parameter gradient against fp64 autograd) or both",
        since="0.2",
    ),
    Field(
        "shape_constraints",
        "3 precondition",
        "dim (letter or index) -> constraint every drawn shape respects",
        since="0.2",
    ),
    Field("shape_class", "3 precondition", "C-CMP-03: the class of shapes held-out shapes span", since="0.2"),
    Field(
        "init",
        "2 scope",
        'constructor kwargs when the kernel is an nn.Module class, e.g. { hidden_size = "{n}" }; '
        "its weight and bias take the op's w and b inputs",
        since="0.2",
    ),
    Field(
        "env",
        "harness",
        'environment set in the worker before the kernel is imported, e.g. { TRITON_INTERPRET = "1" }',
        since="0.2",
    ),
)
CONTRACT_FIELD = {f.key: f for f in CONTRACT_FIELDS}
REQUIRED_KEYS = tuple(f.key for f in CONTRACT_FIELDS if f.required)
