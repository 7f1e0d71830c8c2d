"""The signature classifiers on injected faults, one function at a time (the end-to-end corpus and its
confusion matrix, docs/signature-accuracy.md, are tests/faults and tests/test_signature_corpus.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kcgate.kernels.emulate import blocked_matmul, round_mantissa  # noqa: E402
from kcgate.signatures import (  # noqa: E402
    CAUSES,
    accumulator_signature,
    dot_scale,
    nan_signature,
    normalized_error,
    operand_signature,
    tail_signature,
)

KS = (64, 256, 1024)


def _mm(a, b):
    return a @ b


def _acc_fault(acc, seed):
    g = torch.Generator().manual_seed(seed)
    nerr = []
    for k in KS:
        a, b = torch.randn(32, k, generator=g), torch.randn(k, 32, generator=g)
        out = a @ b if acc is None else blocked_matmul(a, b, 32, acc)
        nerr.append(normalized_error((out.double() - a.double() @ b.double()).abs(), _scale(a, b)))
    s = accumulator_signature(KS, nerr, 24)
    return "none" if s is None else f"{s.cause}:{dict(s.evidence).get('nearest', '')}"


def _operand_fault(bits, seed):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(64, 32, generator=g), torch.randn(32, 64, generator=g)
    out = round_mantissa(a, bits - 1) @ round_mantissa(b, bits - 1) if bits else a @ b
    s = operand_signature(out, a.double() @ b.double(), (a, b), _mm, (0, 1))
    return "none" if s is None else f"{s.cause}:{int(dict(s.evidence)['operand_bits'])}"


def _tail_fault(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(65, 127, (1,), generator=g))
    ratio = torch.rand(16, n, generator=g) * 0.5
    ratio[:, 64:] = 5.0
    s = tail_signature(ratio)
    return "none" if s is None else s.cause


def _nan_fault(seed):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(32, generator=g).double()
    ref[int(torch.randint(0, 32, (1,), generator=g))] = float("nan")
    s = nan_signature(torch.nan_to_num(ref).float(), ref)
    return "none" if s is None else s.cause


def _scale(a, b):
    scale = dot_scale("matmul", (a, b))
    assert scale is not None
    return scale


CASES = {
    "fp16 accumulator": (lambda s: _acc_fault(torch.float16, s), "low-precision-accumulator:fp16 or tf32"),
    "bf16 accumulator": (lambda s: _acc_fault(torch.bfloat16, s), "low-precision-accumulator:bf16"),
    "fp32 accumulator (no fault)": (lambda s: _acc_fault(None, s), "none"),
    "tf32 operands": (lambda s: _operand_fault(11, s), "operand-truncation:11"),
    "bf16 operands": (lambda s: _operand_fault(8, s), "operand-truncation:8"),
    "exact operands (no fault)": (lambda s: _operand_fault(0, s), "none"),
    "dropped tail tile": (_tail_fault, "tail-pattern"),
    "NaN swallowed": (_nan_fault, "nan-pattern"),
}
SEEDS = range(8)


def test_causes_registry_is_described():
    assert all(isinstance(v, str) and v for v in CAUSES.values())


def test_signature_accuracy_table():
    for name, (run, expected) in CASES.items():
        got = Counter(run(s) for s in SEEDS)
        assert got[expected] == len(SEEDS), f"{name}: {got}"


def test_no_accumulator_width_from_one_magnitude():
    """One K (or two) never claims a width, however low the effective bits; a sweep that is not a power law
    with a rounding accumulator's slope does not either."""
    assert accumulator_signature([1024], [1e-3], 24) is None
    assert accumulator_signature([256, 1024], [1e-3, 2e-3], 24) is None
    assert accumulator_signature([64, 256, 1024], [1e-3, 1e-3, 1e-3], 24) is None  # flat: noise, not rounding
    assert accumulator_signature([64, 256, 1024], [1e-3, 5e-2, 2e-3], 24) is None  # no power law
    fitted = accumulator_signature([64, 256, 1024], [4e-3, 8e-3, 1.6e-2], 24)
    assert fitted is not None and fitted.cause == "low-precision-accumulator"


def test_every_cause_is_documented():
    text = (Path(__file__).resolve().parents[1] / "docs" / "signatures.md").read_text(encoding="utf-8")
    missing = [c for c in CAUSES if f"`{c}`" not in text]
    assert not missing, f"docs/signatures.md does not describe {missing}"
