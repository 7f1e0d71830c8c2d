"""Custom ops with several outputs, end to end (kcgate run, kernels in a worker process): each output compared
under its own derived bound and named in the message, the signature and the results file; a kernel whose
outputs differ in structure from the reference's fails, never crashes; a wrong ``outputs`` count is the
case's error naming the key; inputs and gradients named by the generator's dict."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import kcgate

# The kernels under their own import string: a reference is never the kernel's own (#54).
KK_KERNELS = "from kk import *  # noqa: F403\n"
KERNELS = """
import torch

def gen(shape, dtype, g):
    x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    r = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return x, r, (torch.randn(shape[-1:], generator=g, dtype=torch.float64) * 0.5 + 1).to(dtype)

def ref(x, residual, weight):  # fused add + RMSNorm: (normed, new residual)
    r = x + residual
    return r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + 1e-6) * weight, r

def good(x, residual, weight):
    h = x.float() + residual.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype), h.to(x.dtype)

def bad_residual(x, residual, weight):  # the normed output right, the residual 5% off
    out, r = good(x, residual, weight)
    return out, r * 1.05

def three(x, residual, weight):
    return (*good(x, residual, weight), x)

def dict_ref(x, residual, weight):
    out, r = ref(x, residual, weight)
    return {"out": out, "residual": r}

def dict_good(x, residual, weight):  # another key order: matched by key
    out, r = good(x, residual, weight)
    return {"residual": r, "out": out}

def dict_missing(x, residual, weight):
    return {"out": good(x, residual, weight)[0]}

def named_gen(shape, dtype, g):  # names the inputs itself; the reference's parameters say a and b
    x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return {"hidden": x, "gamma": (torch.randn(shape[-1:], generator=g, dtype=torch.float64) + 1).to(dtype)}

def scale_ref(a, b):
    return a * b, a + b

def scale_detached_gamma(a, b):  # no gradient reaches gamma
    return a * b.detach(), a + b.detach()
"""

CONTRACTS = {
    "tuple-bad": ("bad_residual", "ref", "gen", 'outputs = ["out", "residual"]\ndirection = "both"'),
    "dict-good": ("dict_good", "dict_ref", "gen", 'direction = "both"'),
    "dict-missing": ("dict_missing", "dict_ref", "gen", ""),
    "three": ("three", "ref", "gen", 'outputs = ["out", "residual"]'),
    "count": ("good", "ref", "gen", 'outputs = ["out", "residual", "extra"]'),
    "named": ("scale_detached_gamma", "scale_ref", "named_gen", 'direction = "backward"'),
}


def _contract(cid: str, kernel: str, ref: str, gen: str, extra: str) -> str:
    return (
        f'[[contract]]\nid = "{cid}"\nclass = "C-PRC-01"\nop = "custom"\nkernel = "kk_kernels:{kernel}"\n'
        f'reference = "kk:{ref}"\ninputs = "kk:{gen}"\ndtypes = ["float32"]\nshapes = [[4, 64]]\n'
        f"protocol = {{ boundary = false }}\n{extra}\n"
    )


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("multi")
    (tmp / "kk.py").write_text(KERNELS)
    (tmp / "kk_kernels.py").write_text(KK_KERNELS)
    body = "\n".join(_contract(cid, *row) for cid, row in CONTRACTS.items())
    (tmp / "contracts.toml").write_text(f'[project]\npaths = ["."]\n\n{body}')
    proc = kcgate(
        "run", "-c", str(tmp / "contracts.toml"), "--results", str(tmp / "out.json"), cwd=tmp, timeout=900
    )
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads((tmp / "out.json").read_text())
    out: dict[str, list[dict[str, Any]]] = {}
    for row in data["cases"]:
        case = dict(zip(data["case_fields"], row))
        out.setdefault(case["contract_id"], []).append(case)
    return out


def _extra(case: dict[str, Any]) -> dict[str, float]:
    return case["metrics"][8] if isinstance(case["metrics"], list) else case["metrics"]["extra"]


@pytest.mark.slow
def test_the_wrong_output_of_a_tuple_is_named_and_its_budget_decides(cases: dict[str, Any]) -> None:
    for c in cases["tuple-bad"]:
        assert c["status"] == "fail", c
        extra = _extra(c)
        assert extra["out_budget.residual"] > 1 >= extra["out_budget.out"], extra
        msg, grads = c["message"], [v for k, v in extra.items() if k.startswith("grad_budget.")]
        assert "output 'out'" not in msg, msg  # within its bound: never named
        if extra["out_budget.residual"] >= max(grads):  # the output decided (the seed draws which is worse)
            assert "in output 'residual'" in msg, msg
            assert "output 'residual'" in c["signature"]["summary"], c["signature"]
            assert c["signature"]["evidence"]["output"] == "residual"
        else:  # the gradient through it decided: named, and the output over its bound beside it
            assert "in the gradient of" in msg and "also over:" in msg and "output 'residual'" in msg, msg
            assert c["signature"]["evidence"]["grad"] in ("x", "residual"), c["signature"]


@pytest.mark.slow
def test_a_dict_is_matched_by_key_and_a_missing_key_fails_with_what_is_missing(cases: dict[str, Any]) -> None:
    assert {c["status"] for c in cases["dict-good"]} == {"pass"}, cases["dict-good"]
    for c in cases["dict-missing"]:
        assert c["status"] == "fail" and c["signature"]["cause"] == "bad-output", c
        assert "missing 'residual'" in c["message"], c["message"]
    for c in cases["three"]:
        assert c["status"] == "fail" and "returned 3 outputs, the reference returns 2" in c["message"], c


@pytest.mark.slow
def test_an_outputs_key_of_another_count_is_the_cases_error_naming_key_and_fix(cases: dict[str, Any]) -> None:
    for c in cases["count"]:
        assert c["status"] == "error", c
        assert "outputs = ['out', 'residual', 'extra'] names 3 outputs" in c["message"], c["message"]
        assert "the reference returns 2; fix:" in c["message"], c["message"]


@pytest.mark.slow
def test_inputs_and_gradients_are_named_by_the_generators_dict(cases: dict[str, Any]) -> None:
    for c in cases["named"]:
        assert c["status"] == "fail", c
        assert "no gradient for input 'gamma'" in c["message"], c["message"]
        assert "input1" not in c["message"] and "'b'" not in c["message"], c["message"]
