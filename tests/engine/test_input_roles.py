"""Each input's role (issue 56): ``no_grad`` inputs are neither asked for a gradient nor compared, a reference
that detaches a differentiated input is named as the contract's mistake, and every backward failure names the
tensor it was seen on (a gradient by its input, or the forward output), in the summary and the evidence.

The kernels are tests/testing/kernels/losses.py: Liger's KL divergence (no gradient for its target) re-implemented
in torch, and a fault planted in one input's gradient of each multi-input family in turn."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.nn.functional as F

from kcgate.contracts.load import load_project
from kcgate.devices.cpu import CpuBackend
from kcgate.engine.case import execute_case
from kcgate.numerics.ops import OPS
from kcgate.numerics.ops import rope as rope_ops
from kcgate.plan import make_plan
from kcgate.results.model import CaseResult
from tests.conftest import ROOT, kcgate
from tests.testing.kernels import losses
from tests.testing.kernels.backward import FAMILY_FNS

KL = (
    'class = "C-PRC-01"\nop = "custom"\ninputs = "tests.testing.kernels.losses:kl_gen"\nshapes = [[8, 128]]\n'
    'direction = "both"\nprotocol = { seeds = 1, trials = 2 }\n'
)


def _run(tmp_path: Path, body: str) -> list[CaseResult]:
    """One contract, planned and executed case by case in this process (the declared shape and the boundary)."""
    f = tmp_path / "contracts.toml"
    f.write_text(f'[project]\npaths = ["{ROOT}"]\n\n[[contract]]\nid = "c"\n{body}\n')
    project = load_project(f)
    return [execute_case(project, case, CpuBackend()) for case in make_plan(project, 1, {})]


def _kl(kernel: str, ref: str = "kl_ref", dtype: str = "float32", extra: str = "") -> str:
    mod = "tests.testing.kernels.losses"
    return f'{KL}kernel = "{mod}:{kernel}"\nreference = "{mod}:{ref}"\ndtypes = ["{dtype}"]\n{extra}'


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_no_grad_target_passes_a_loss_that_gives_its_target_no_gradient(tmp_path: Path, dtype: str) -> None:
    """Liger's KL gives no gradient for y_true; declared, the case passes on y_pred's gradient alone."""
    for r in _run(tmp_path, _kl("kl", dtype=dtype, extra='no_grad = ["y_true"]')):
        assert r.status == "pass", r.message
        assert not any(k.startswith("grad_budget.y_true") for k, _ in r.metrics.extra), r.metrics.extra


def test_a_reference_that_detaches_a_differentiated_input_is_the_contracts_mistake(tmp_path: Path) -> None:
    """Undeclared, the same kernel is no missing-gradient failure: the reference detaches y_true too."""
    for r in _run(tmp_path, _kl("kl")):
        assert r.status == "error" and r.signature is None, (r.status, r.signature)
        assert "neither the kernel nor the reference gives it a gradient" in r.message, r.message
        assert 'declare no_grad = ["y_true"]' in r.message, r.message


def test_a_missing_gradient_the_reference_has_fails_named_on_that_input(tmp_path: Path) -> None:
    for r in _run(tmp_path, _kl("kl", ref="kl_ref_both")):
        assert r.status == "fail" and r.signature is not None, r.message
        assert r.signature.cause == "missing-gradient", r.signature
        assert r.signature.summary.startswith("gradient of 'y_true': "), r.signature.summary
        assert dict(r.signature.evidence)["grad"] == "y_true", r.signature.evidence


@pytest.mark.parametrize(("kernel", "cause"), [("kl_fp32_out", "wrong-dtype"), ("kl_nan_forward", None)])
def test_a_forward_failure_of_a_backward_case_names_the_forward_output(
    tmp_path: Path, kernel: str, cause: str | None
) -> None:
    """A loss returned in fp32, or NaN, is the forward's failure, never a gradient's (each was summarised as
    "gradient of 'y_pred'")."""
    r = _run(tmp_path, _kl(kernel, dtype="bfloat16", extra='no_grad = ["y_true"]'))[0]
    assert r.status == "fail" and r.signature is not None, r.message
    assert cause is None or r.signature.cause == cause, r.signature
    assert r.signature.summary.startswith("forward output: "), r.signature.summary
    ev = dict(r.signature.evidence)
    assert ev.get("tensor") == "forward output" and "grad" not in ev, ev


def test_no_grad_names_are_checked(tmp_path: Path) -> None:
    """On a family, by validate (exit 2, file, line and key); on a custom op, when its generator names them."""
    f = tmp_path / "contracts.toml"
    f.write_text(
        '[[contract]]\nid = "mm"\nclass = "C-PRC-01"\nkernel = "torch:matmul"\nop = "matmul"\n'
        'direction = "both"\nno_grad = ["a", "x"]\n'
    )
    proc = kcgate("validate", str(f), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "contract 'mm'.no_grad[1]" in proc.stdout + proc.stderr and "not an input of op 'matmul'" in (
        proc.stdout + proc.stderr
    )
    r = _run(tmp_path, _kl("kl", extra='no_grad = ["target"]'))[0]
    assert r.status == "error" and "no_grad names 'target'" in r.message and "y_pred, y_true" in r.message


# ---- a fault planted in each input's gradient of every multi-input family, in turn --------------------------


def _rope(q, k, cos, sin):  # type: ignore[no-untyped-def]
    return tuple(rope_ops.apply(t, cos[:, None], sin[:, None], "neox") for t in (q, k))


FNS = {
    **{op: FAMILY_FNS[op] for op in ("matmul", "bmm", "linear", "sdpa", "layernorm", "rmsnorm")},
    "swiglu": lambda a, b: F.silu(a) * b,
    "geglu": lambda a, b: F.gelu(a) * b,
    "rope": _rope,
}
SHAPES = {
    "matmul": [16, 32, 8],
    "bmm": [2, 8, 16, 8],
    "linear": [8, 32, 16],
    "sdpa": [1, 2, 16, 8],
    "layernorm": [8, 64],
    "rmsnorm": [8, 64],
    "swiglu": [8, 64],
    "geglu": [8, 64],
    "rope": [1, 16, 2, 2, 16],
}
# rope's cos and sin are tables, not activations: the family's gradient bound compares q's and k's alone
COMPARED = {"rope": ("q", "k")}
CASES = [(op, i) for op in FNS for i, n in enumerate(OPS[op].input_names) if n in COMPARED.get(op, (n,))]


def test_every_multi_input_family_with_a_gradient_is_covered() -> None:
    multi = {n for n, op in OPS.items() if op.grad_bound is not None and len(op.input_names) > 1}
    index_inputs = {"cross_entropy", "gather", "index_select", "embedding"}  # one float input
    assert multi - index_inputs - {"attention"} == set(FNS), multi


@pytest.mark.slow
@pytest.mark.parametrize(("op", "index"), CASES)
def test_a_fault_in_one_gradient_is_named_on_that_input(tmp_path: Path, op: str, index: int) -> None:
    name = OPS[op].input_names[index]
    planted = losses.grad_fault(FNS[op], index, "scale")
    setattr(losses, f"planted_{op}_{index}", planted)  # found by import string in this process
    body = (
        f'class = "C-CMP-01"\nop = "{op}"\nkernel = "tests.testing.kernels.losses:planted_{op}_{index}"\n'
        f'dtypes = ["float32"]\nshapes = [{SHAPES[op]}]\ndirection = "both"\nprotocol = {{ seeds = 1, trials = 1 }}'
    )
    r = _run(tmp_path, body)[0]
    assert r.status == "fail" and r.signature is not None, (r.status, r.message)
    assert r.metrics.worst_grad == name, (r.metrics.worst_grad, r.metrics.extra)
    assert dict(r.signature.evidence).get("grad") == name, r.signature
    assert f"gradient of {name!r}" in r.signature.summary or f"gradient of {name}" in r.signature.summary, (
        r.signature.summary
    )
