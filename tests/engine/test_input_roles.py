"""Each input's role (issue 56): ``no_grad`` inputs are neither asked for a gradient nor compared, a reference
that detaches a differentiated input is named as the contract's mistake, and every backward failure names the
tensor it was seen on (a gradient by its input, or the forward output), in the summary and the evidence.

The kernels are tests/testing/kernels/losses.py: Liger's KL divergence (no gradient for its target) re-implemented
in torch, and a fault planted in one input's gradient (or the forward) of each multi-input family, as itself and
as a custom op, in turn: the summary, the evidence, the PR comment's row and JUnit name that tensor."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from kcgate.contracts.load import load_project
from kcgate.contracts.policy import Policy
from kcgate.devices.cpu import CpuBackend
from kcgate.engine.case import execute_case
from kcgate.gate.diff import make_diff
from kcgate.numerics.ops import OPS
from kcgate.plan import make_plan
from kcgate.render.junit import render_junit
from kcgate.render.markdown import RenderContext, render_comment
from kcgate.results.model import CaseResult, Fingerprint, RunResult
from tests.conftest import ROOT, kcgate
from tests.testing.kernels import losses

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


# ---- a fault planted in each input's gradient of every multi-input family and custom op, in turn -----------
# Parametrised from the families table (OPS): a new family with a backward and two or more float inputs is
# covered without an edit (at its default shape, unless SHAPES gives a smaller one). Each family runs twice:
# as itself, and as a custom op whose reference is the family's fp64 oracle and whose generator names the
# family's inputs. The kernel is the family's own torch composite with the fault planted (losses.grad_fault).

SHAPES = {
    "matmul": [16, 32, 8],
    "bmm": [2, 8, 16, 8],
    "linear": [8, 32, 16],
    "sdpa": [1, 2, 16, 8],
    "attention": [1, 2, 1, 16, 8],
    "layernorm": [8, 64],
    "rmsnorm": [8, 64],
    "swiglu": [8, 64],
    "geglu": [8, 64],
    "rope": [1, 2, 1, 16, 16],
}
# rope's cos and sin are tables, not activations: the family's gradient bound compares q's and k's alone (a
# custom op, with no such knowledge, compares every float input's)
NOT_COMPARED = {"rope": ("cos", "sin")}
MULTI = sorted(n for n, op in OPS.items() if op.grad_bound is not None and len(op.float_inputs) > 1)
FAULTS = ("scale", "none")
CASES = [
    (path, op, i, how)
    for op in MULTI
    for i in OPS[op].float_inputs
    for path in ("family", "custom")
    for how in FAULTS
    if path == "custom" or OPS[op].input_names[i] not in NOT_COMPARED.get(op, ())
]
MOD = "tests.testing.kernels.losses"


def _shape(op: str) -> list[int]:
    return SHAPES.get(op) or list(OPS[op].default_shapes[0])


def _custom_parts(op: str) -> tuple[str, str]:
    """(generator, reference) import strings of the family as a custom op, registered on the losses module."""
    fam = OPS[op]

    def gen(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> dict[str, torch.Tensor]:
        return dict(zip(fam.input_names, fam.make_inputs(shape, dtype, g, "normal")))

    def ref(*xs: torch.Tensor) -> torch.Tensor:
        return fam.oracle(*xs)

    setattr(losses, f"gen_{op}", gen)
    setattr(losses, f"ref_{op}", ref)
    return f"{MOD}:gen_{op}", f"{MOD}:ref_{op}"


def _planted_case(tmp_path: Path, path: str, op: str, index: int, how: str) -> tuple[CaseResult, str]:
    """The declared-shape case of one planted contract, and its id."""
    kernel = f"planted_{path}_{op}_{index}_{how}"
    setattr(losses, kernel, losses.grad_fault(OPS[op].composite, index, how))  # by import string, here
    body = f'kernel = "{MOD}:{kernel}"\ndtypes = ["float32"]\nshapes = [{_shape(op)}]\ndirection = "both"\n'
    body += "protocol = { seeds = 1, trials = 1 }\n"
    if path == "custom":
        gen, ref = _custom_parts(op)
        body += f'class = "C-PRC-01"\nop = "custom"\ninputs = "{gen}"\nreference = "{ref}"\n'
    else:
        body += f'class = "C-CMP-01"\nop = "{op}"\n'
    cid = f"{path}-{op}-{index}-{how}"
    f = tmp_path / "contracts.toml"
    f.write_text(f'[project]\npaths = ["{ROOT}"]\n\n[[contract]]\nid = "{cid}"\n{body}')
    project = load_project(f)
    case = make_plan(project, 1, {})[0]
    return execute_case(project, case, CpuBackend()), cid


def _rendered(r: CaseResult, cid: str) -> tuple[str, str, dict[str, str]]:
    """The case's PR comment row, its JUnit failure message and its JUnit properties."""
    run = RunResult("cpu", Fingerprint("cpu"), (r,))
    comment = render_comment(make_diff({"cpu": run}, {}, Policy(), dt.date(2026, 12, 7)), RenderContext())
    blocking = comment.split("### Blocking", 1)[1].split("\n#", 1)[0]
    [row] = [line for line in blocking.splitlines() if line.startswith("| ") and f"| {cid} |" in line]
    case = ET.fromstring(render_junit(run).split("\n", 1)[1]).find(".//testcase")
    assert case is not None
    failure = case.find("failure")
    props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
    return row, failure.get("message", "") if failure is not None else "", props


def test_every_multi_input_family_with_a_gradient_is_covered() -> None:
    """The cases come from the families table: every family with a backward and two or more float inputs,
    each of its inputs, as a family and as a custom op (a family with one float input and index tensors,
    cross-entropy's or gather's, has one gradient: nothing to tell apart)."""
    want = {"matmul", "bmm", "linear", "sdpa", "attention", "layernorm", "rmsnorm", "swiglu", "geglu", "rope"}
    assert want <= set(MULTI), MULTI
    for op in MULTI:
        names = {OPS[op].input_names[i] for _, o, i, _ in CASES if o == op}
        assert names == {OPS[op].input_names[i] for i in OPS[op].float_inputs}, (op, names)


@pytest.mark.slow
@pytest.mark.parametrize(("path", "op", "index", "how"), CASES)
def test_a_fault_in_one_gradient_is_named_on_that_input_everywhere(
    tmp_path: Path, path: str, op: str, index: int, how: str
) -> None:
    """25% too large (a fit names it) or not given (an integrity issue): the summary line, the signature's
    evidence, the PR comment's row and the JUnit failure and properties name that input's gradient, never
    another tensor and never the forward output."""
    name = OPS[op].input_names[index]
    r, cid = _planted_case(tmp_path, path, op, index, how)
    assert r.status == "fail" and r.signature is not None, (r.status, r.message)
    cause = {"scale": "scaled-output", "none": "missing-gradient"}[how]
    assert r.signature.cause == cause, r.signature
    ev = dict(r.signature.evidence)
    assert ev.get("grad") == name and "tensor" not in ev, r.signature
    assert r.tensor == ("grad", name), r.tensor
    said = f"gradient of {name!r}" if how == "none" else f"the gradient of {name} "
    assert said in r.signature.summary, r.signature.summary
    others = [n for n in OPS[op].input_names if n != name]
    row, failure, props = _rendered(r, cid)
    for text in (r.signature.summary, row, failure):
        assert said in text and "forward output" not in text, text
        assert not any(f"gradient of {o} " in text or f"gradient of {o!r}" in text for o in others), text
    assert props.get("grad") == name and "output" not in props, props


@pytest.mark.slow
@pytest.mark.parametrize(("path", "op"), [(p, op) for op in MULTI for p in ("family", "custom")])
def test_a_fault_in_the_forward_of_a_backward_case_names_the_forward(
    tmp_path: Path, path: str, op: str
) -> None:
    """The forward output 25% too large, every gradient right: named on the output, in every rendering."""
    r, cid = _planted_case(tmp_path, path, op, 0, "forward")
    assert r.status == "fail" and r.signature is not None, (r.status, r.message)
    assert "grad" not in dict(r.signature.evidence) and r.tensor[0] != "grad", r.signature
    row, failure, props = _rendered(r, cid)
    for text in (r.signature.summary, row, failure):
        assert "forward output: " in text and "gradient of" not in text, text
    assert "grad" not in props, props


def test_a_liger_loss_names_the_input_whose_gradient_it_fails(tmp_path: Path) -> None:
    """Liger's KL as a custom op differentiated in both inputs: a fault in either input's gradient is named on
    that input (y_pred's 25% too large; y_true's the same)."""
    for kernel, name in (("kl_grad_pred", "y_pred"), ("kl_grad_true", "y_true")):
        for r in _run(tmp_path, _kl(kernel, ref="kl_ref_both"))[:1]:
            assert r.status == "fail" and r.signature is not None, r.message
            assert dict(r.signature.evidence).get("grad") == name, r.signature
            assert f"gradient of {name}" in r.signature.summary, r.signature.summary
