"""kcgate.engine.multi in the harness, in process: an integer output must be equal, an explicit tolerance
applies to each output, and two inputs whose gradients are the same bits (x and the residual of x + r) are
not a stale output."""

from __future__ import annotations

import itertools
from pathlib import Path

from kcgate.contracts.load import load_project
from kcgate.devices.cpu import CpuBackend
from kcgate.engine.case import execute_case
from kcgate.plan import make_plan

KERNELS = """
import torch

def gen(shape, dtype, g):
    return tuple((torch.randn(shape, generator=g, dtype=torch.float64) * 2).to(dtype) for _ in range(2))

def route_ref(logits, bias):
    w = torch.softmax(logits + bias, dim=-1, dtype=torch.float32)
    tw, ids = torch.topk(w, 2, dim=-1)
    return tw, ids.to(torch.int32)

def route_swapped_ids(logits, bias):
    tw, ids = route_ref(logits, bias)
    return tw, ids.flip(-1)

def add(x, residual):
    return x + residual

class _AddLoudGrad(torch.autograd.Function):  # the forward right, both gradients 10% large (the same bits)
    @staticmethod
    def forward(ctx, x, residual):
        return x + residual

    @staticmethod
    def backward(ctx, dy):
        g = dy * 1.1
        return g, g

def add_loud_grad(x, residual):
    return _AddLoudGrad.apply(x, residual)

def sum_and_state(x, residual):  # a bf16 output beside an fp32 state, as a scan returns its last state
    return x + residual, x.float() * 2

def sum_and_half_state(x, residual):
    return x + residual, (x * 2).half()

def probs(x, residual):  # one fp32 output from bf16 inputs, as a top-p filter's probabilities
    return torch.softmax((x + residual).float(), dim=-1)

def probs_half(x, residual):
    return probs(x, residual).half()

def add_and_scale(x, residual):
    return x + residual, 2 * x

def add_and_scale_off(x, residual):
    return x + residual, 2.02 * x
"""


def _run(tmp_path: Path, kernel: str, ref: str, extra: str = "", dtype: str = "float32") -> list:  # type: ignore[type-arg]
    (tmp_path / "mk.py").write_text(KERNELS)
    (tmp_path / "mk_kernels.py").write_text("from mk import *  # noqa: F403\n")  # the reference's code,
    f = tmp_path / f"{kernel}.toml"  # under another import string: a reference is never the kernel's own
    f.write_text(
        f'[project]\npaths = ["{tmp_path}"]\n\n[[contract]]\nid = "c"\nclass = "C-PRC-01"\nop = "custom"\n'
        f'kernel = "mk_kernels:{kernel}"\nreference = "mk:{ref}"\ninputs = "mk:gen"\ndtypes = ["{dtype}"]\n'
        f"shapes = [[8, 16]]\nprotocol = {{ seeds = 1, trials = 2, boundary = false }}\n{extra}\n"
    )
    project = load_project(f)
    return [
        execute_case(project, case, CpuBackend()) for case in itertools.islice(make_plan(project, 1, {}), 1)
    ]


def test_an_integer_output_must_be_equal_and_is_named(tmp_path: Path) -> None:
    (ok,) = _run(tmp_path, "route_ref", "route_ref", 'outputs = ["weights", "ids"]')
    assert ok.status == "pass", ok.message
    (bad,) = _run(tmp_path, "route_swapped_ids", "route_ref", 'outputs = ["weights", "ids"]')
    assert bad.status == "fail" and bad.metrics.worst_output == "ids", bad.message
    assert dict(bad.metrics.extra)["out_budget.weights"] <= 1, bad.metrics.extra


def test_an_explicit_tolerance_applies_to_each_output(tmp_path: Path) -> None:
    tol = "tolerance = { rtol = 1e-3, atol = 1e-5 }"
    (ok,) = _run(tmp_path, "add_and_scale", "add_and_scale", tol)
    assert ok.status == "pass", ok.message
    (bad,) = _run(tmp_path, "add_and_scale_off", "add_and_scale", tol)
    assert bad.status == "fail" and bad.metrics.worst_output == "out1", bad.message
    assert 5 < bad.metrics.budget_used < 20, bad.metrics  # 1% against 0.1%: about 10 budgets


def test_two_inputs_with_the_same_gradient_bits_are_not_a_stale_output(tmp_path: Path) -> None:
    (ok,) = _run(tmp_path, "add", "add", 'direction = "backward"')
    assert ok.status == "pass", (ok.message, ok.signature)
    (bad,) = _run(tmp_path, "add_loud_grad", "add", 'direction = "backward"')
    assert bad.status == "fail" and bad.signature is not None, bad.message
    assert bad.signature.cause != "stale-output", (
        bad.signature
    )  # this call's own two gradients, not an earlier's


def test_each_output_may_keep_the_dtype_the_reference_gives_it(tmp_path: Path) -> None:
    (ok,) = _run(tmp_path, "sum_and_state", "sum_and_state", dtype="bfloat16")
    assert ok.status == "pass", ok.message
    (bad,) = _run(tmp_path, "sum_and_half_state", "sum_and_state", dtype="bfloat16")
    assert bad.status == "fail" and bad.signature is not None and bad.signature.cause == "wrong-dtype"
    assert "output 'out1' is float16, expected bfloat16 or float32" in bad.message, bad.message


def test_a_single_output_may_keep_the_dtype_the_reference_gives_it(tmp_path: Path) -> None:
    (ok,) = _run(tmp_path, "probs", "probs", dtype="bfloat16")
    assert ok.status == "pass", ok.message
    (bad,) = _run(tmp_path, "probs_half", "probs", dtype="bfloat16")
    assert bad.status == "fail" and bad.signature is not None and bad.signature.cause == "wrong-dtype"
    declared = _run(tmp_path, "probs", "probs", 'out_dtype = "bfloat16"', dtype="bfloat16")[0]
    assert declared.status == "fail" and "the contract declares bfloat16" in declared.message, (
        declared.message
    )
