"""The signature classifiers on injected faults, one function at a time (the end-to-end corpus and its
confusion matrix, docs/signature-accuracy.md, are tests/faults and tests/test_signature_corpus.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kcgate.engine.accumulator import (  # noqa: E402
    accumulator_signature,
    dot_scale,
    normalized_error,
    operand_signature,
    output_grid,
)
from kcgate.engine.diagnosis import nan_signature, overflow_where, tail_signature  # noqa: E402
from kcgate.numerics.emulate import blocked_matmul, round_mantissa  # noqa: E402
from kcgate.vocab.causes import CAUSE  # noqa: E402

KS = (64, 256, 1024)


def _mm(a, b):
    return a @ b


def _acc_fault(acc, seed):
    g = torch.Generator().manual_seed(seed)
    nerr, outs = [], []
    for k in KS:
        a, b = torch.randn(32, k, generator=g), torch.randn(k, 32, generator=g)
        out = a @ b if acc is None else blocked_matmul(a, b, 32, acc)
        outs.append(out)
        nerr.append(normalized_error((out.double() - a.double() @ b.double()).abs(), _scale(a, b)))
    s = accumulator_signature(KS, nerr, 24, output_grid(outs))  # as signatures._accumulator calls it
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
    assert all(isinstance(c.label, str) and c.label for c in CAUSE.values())


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


def _sweep(fn, ks, seed=0):  # type: ignore[no-untyped-def]
    """(nerr per K, outputs) of fn(a, b) over a K sweep of 32x32 outputs."""
    g = torch.Generator().manual_seed(seed)
    nerr, outs = [], []
    for k in ks:
        a, b = torch.randn(32, k, generator=g), torch.randn(k, 32, generator=g)
        out = fn(a, b)
        outs.append(out)
        nerr.append(normalized_error((out.double() - a.double() @ b.double()).abs(), _scale(a, b)))
    return nerr, outs


@pytest.mark.parametrize("seed", range(4))
def test_a_sequential_bf16_sum_is_bf16_not_fp8(seed):
    """Rounded to bf16 after every add (torch's CPU bf16 layer_norm dβ): ≈8 bits with the rounding interval
    fitted; the old fit, which assumed a rounding every 32 terms, read ≈5.5 bits and said "fp8 e4m3". The
    outputs are bf16 tensors here, so their grid tells nothing: the fit alone names it."""
    ks = (64, 256, 1024)
    nerr, _ = _sweep(lambda a, b: blocked_matmul(a, b, 1, torch.bfloat16).to(torch.bfloat16), ks, seed)
    s = accumulator_signature(ks, nerr, 24, None)
    assert s is not None and s.cause == "low-precision-accumulator"
    ev = dict(s.evidence)
    assert ev["nearest"] == "bf16" and ev["block"] <= 2.0, s  # 1 and 2 fit alike: √K from the first add
    assert "rounding after every add" in s.summary or "rounding every 1-" in s.summary, s


@pytest.mark.parametrize("seed", range(4))
def test_blocks_of_128_in_bf16_are_named_with_their_interval(seed):
    """tests/testing/kernels/accumulate.bf16_blocks' pattern: flat below K = 128, √K above; a power law's slope (0.3)
    sat on the old fit's limit, so it was noise on 7 of 20 seeds."""
    ks = (64, 256, 1024, 2048)
    nerr, outs = _sweep(lambda a, b: blocked_matmul(a, b, 128, torch.bfloat16), ks, seed)
    assert output_grid(outs) == "bf16"
    s = accumulator_signature(ks, nerr, 24, output_grid(outs))
    assert s is not None and dict(s.evidence)["nearest"] == "bf16", s
    assert dict(s.evidence)["block"] in (64.0, 128.0, 256.0) and "bf16 values" in s.summary


def test_the_output_grid_needs_a_wide_output_on_a_narrow_grid():
    x = torch.randn(64, 64)
    assert output_grid([x]) is None
    assert output_grid([x.to(torch.bfloat16).float()]) == "bf16"
    assert output_grid([x.to(torch.float16).float()]) == "fp16 or tf32"
    assert output_grid([x.to(torch.bfloat16)]) is None  # a bf16 output carries no evidence


def test_a_width_no_format_fits_is_not_named():
    """Synthetic: the curve of a rounding after every add at ≈17 bits (no format within 0.75 bits of any
    interval that fits): the cause, the bits, no format."""
    ks = (64, 256, 1024)
    u = 2.0**-17
    nerr = [8 * 0.0588 * u * ((k + 1) / 2) ** 0.5 for k in ks]
    s = accumulator_signature(ks, nerr, 24)
    assert s is not None and s.cause == "low-precision-accumulator"
    assert dict(s.evidence)["nearest"] == "" and "no standard format fits" in s.summary


@pytest.mark.parametrize(
    ("op", "grad", "advice"),
    [
        ("softmax", "", "subtract the row max"),
        ("softmax", "x", "in the backward"),
        ("cross_entropy", "logits", "in the backward"),
        ("layernorm", "", "past exp's range"),
        ("rmsnorm", "x", "past exp's range"),
    ],
)
def test_overflow_nan_advice_fits_where_the_nan_is(op, grad, advice):
    """ "subtract the row max" is the forward's fix; a NaN in a gradient, or in a family without exp whose
    inputs were past exp's range, gets its own."""
    ref = torch.ones(8, dtype=torch.float64)
    out = ref.clone()
    out[3] = float("nan")
    s = nan_signature(out.float(), ref, True, overflow_where(op, grad))
    assert s is not None and s.cause == "overflow-nan" and advice in s.summary, s
    assert ("row max" in s.summary) == (advice == "subtract the row max")


def test_every_cause_is_documented():
    text = (Path(__file__).resolve().parents[2] / "docs" / "signatures.md").read_text(encoding="utf-8")
    missing = [c for c in CAUSE if f"`{c}`" not in text]
    assert not missing, f"docs/signatures.md does not describe {missing}"
