"""C-EXC-01 nan = "raise" and nan = "mask" (with mask_value), as ashiba-verify's NaN/Inf verifier states
its RAISE and MASK policies; each policy passes its conforming kernel and fails the others."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kcgate.contracts.load import load_project
from kcgate.contracts.records import Contract
from kcgate.engine.case import op_for
from kcgate.engine.checks import CHECKS, Finding
from kcgate.engine.trial import CaseContext
from kcgate.errors import ContractsError
from kcgate.numerics.ops import OPS
from kcgate.plan import Case

F = torch.nn.functional


def _check(op: str, kernel, params: dict, shape=(64, 256), seed: int = 0) -> Finding:  # type: ignore[no-untyped-def]
    params = {"subnormals": "any", **params}  # gelu's subnormal handling is not what these tests are about
    contract = Contract(id="t", klass="C-EXC-01", kernel="x:y", op=op, params=tuple(sorted(params.items())))
    case = Case("t", "t", "C-EXC-01", op, "float32", shape, 0, 7 + seed)
    return CHECKS["C-EXC-01"](CaseContext(contract=contract, case=case, kernel=kernel, op=OPS[op]))


def checked_sum(x: torch.Tensor) -> torch.Tensor:
    if not bool(torch.isfinite(x).all()):
        raise FloatingPointError("non-finite input")
    return x.sum(-1)


def nan_only_sum(x: torch.Tensor) -> torch.Tensor:
    if bool(torch.isnan(x).any()):
        raise ValueError("NaN input")
    return x.sum(-1)


def test_raise_passes_a_kernel_that_raises() -> None:
    for seed in range(3):
        assert _check("sum", checked_sum, {"nan": "raise"}, seed=seed).status == "pass"


def test_raise_fails_a_kernel_that_returns() -> None:
    f = _check("sum", lambda x: x.sum(-1), {"nan": "raise"})
    assert f.status == "fail" and f.signature is not None and f.signature.cause == "nan-pattern"
    assert "NaN, +Inf, -Inf" in f.signature.summary and "instead of raising" in f.signature.summary


def test_raise_names_the_injection_it_returned_on() -> None:
    f = _check("sum", nan_only_sum, {"nan": "raise"})
    assert f.status == "fail" and f.signature is not None
    assert "+Inf, -Inf" in f.signature.summary and "NaN," not in f.signature.summary


def test_raise_on_clean_inputs_is_still_an_error() -> None:
    def always(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("always")

    assert _check("sum", always, {"nan": "raise"}).status == "error"


def masked_gelu(value: float):  # type: ignore[no-untyped-def]
    def kernel(x: torch.Tensor) -> torch.Tensor:
        y = F.gelu(x)
        return torch.where(torch.isfinite(y), y, torch.full_like(y, value))

    return kernel


def masked_softmax(x: torch.Tensor) -> torch.Tensor:
    y = torch.softmax(x, -1)
    return torch.where(torch.isfinite(y), y, torch.zeros_like(y))


def test_mask_passes_the_declared_value() -> None:
    assert _check("gelu", masked_gelu(0.0), {"nan": "mask", "mask_value": 0.0}).status == "pass"
    assert _check("gelu", masked_gelu(-1.0), {"nan": "mask", "mask_value": -1.0}).status == "pass"
    assert _check("softmax", masked_softmax, {"nan": "mask", "mask_value": 0.0}).status == "pass"


@pytest.mark.parametrize(
    ("op", "kernel"),
    [
        ("gelu", F.gelu),  # propagates NaN: not masked
        ("gelu", masked_gelu(-1.0)),  # masks with another value
        ("softmax", lambda x: torch.softmax(x, -1)),
    ],
)
def test_mask_fails_other_values(op: str, kernel) -> None:  # type: ignore[no-untyped-def]
    f = _check(op, kernel, {"nan": "mask", "mask_value": 0.0})
    assert f.status == "fail" and f.signature is not None and f.signature.cause == "nan-pattern", f
    assert "declared nan = mask (0)" in f.signature.summary


def test_mask_still_checks_the_unmasked_outputs() -> None:
    def sloppy(x: torch.Tensor) -> torch.Tensor:
        y = masked_gelu(0.0)(x)
        return y + 1e-3 * torch.isfinite(x).float()  # wrong wherever the input is finite

    f = _check("gelu", sloppy, {"nan": "mask", "mask_value": 0.0})
    assert f.status == "fail"


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ('{ nan = "mask" }', "needs the masked value"),
        ('{ nan = "raise", mask_value = 0.0 }', 'applies to nan = "mask" only'),
        ('{ nan = "ignore" }', "invalid value"),
    ],
)
def test_policy_validation(tmp_path: Path, params: str, words: str) -> None:
    (tmp_path / "k.py").write_text("def f(x):\n    return x\n")
    p = tmp_path / "contracts.toml"
    p.write_text(
        '[project]\npaths = ["."]\n\n[[contract]]\nid = "c"\nclass = "C-EXC-01"\nop = "gelu"\n'
        f'kernel = "k:f"\nparams = {params}\n'
    )
    with pytest.raises(ContractsError) as info:
        load_project(p)
    (prob,) = info.value.problems
    assert words in prob.message and prob.line == 9 and prob.fix, prob
    ok = p.read_text().replace(params, '{ nan = "mask", mask_value = 0.0 }')
    p.write_text(ok)
    assert load_project(p).contracts[0].param("mask_value") == 0.0


def test_embedding_plants_into_its_weight_not_its_indices() -> None:
    """embedding's first input is its index tensor: the subnormal trial called torch.finfo on it (a
    TypeError out of kcgate) and NaN/Inf were never planted. They go into the weight, the first float input."""
    f = _check("embedding", lambda idx, w: w[idx], {"subnormals": "keep"}, shape=(64, 256, 32))
    assert f.status == "pass", f.message
    bug = _check("embedding", lambda idx, w: w.nan_to_num(0.0, 0.0, 0.0)[idx], {}, shape=(64, 256, 32))
    assert bug.status == "fail"  # (named exceeds-bound "0x the bound" for now: the diagnosis misses it)


def test_a_scalar_loss_that_is_nan_is_compared_not_refused() -> None:
    """A NaN logit makes the mean loss NaN: the reference has no finite element, so "allowed / output" had
    no denominator (inf) and the case was refused as unmeasurable. A NaN against a NaN is a category
    comparison, which a kernel returning zeros fails: it is judged."""
    f = _check("cross_entropy", F.cross_entropy, {}, shape=(16, 1024))
    assert f.status == "pass", f.message
    zeros = _check("cross_entropy", lambda x, t, **kw: F.cross_entropy(x, t, **kw) * 0, {}, shape=(16, 1024))
    assert zeros.status == "fail", zeros.message


def test_propagate_names_a_pointwise_kernel_that_swallows_nan() -> None:
    """relu as ``where(x > 0, x, 0)`` maps NaN to 0 (NaN > 0 is false). Its clean trial is exact (budget 0.0),
    which the worst-trial pick once ranked as unmeasured (0.0 is falsy): the diagnosis then read the clean trial
    and said "error 0x the allowed bound". It reads the poisoned trial and names the swallowed NaN."""
    relu = lambda x: torch.where(x > 0, x, torch.zeros_like(x))  # noqa: E731
    contract = Contract(
        id="t", klass="C-EXC-01", kernel="x:y", op="pointwise", params=(("fn", "relu"), ("subnormals", "any"))
    )
    case = Case("t", "t", "C-EXC-01", "pointwise", "float32", (64, 256), 0, 7)
    ctx = CaseContext(contract=contract, case=case, kernel=relu, op=op_for(contract, ()))
    f = CHECKS["C-EXC-01"](ctx)
    assert f.status == "fail" and f.signature is not None, f.message
    assert f.signature.cause == "nan-pattern" and "swallowed" in f.signature.summary, f.signature
    assert _check("sum", lambda x: x.sum(-1), {"nan": "propagate"}).status == "pass"
