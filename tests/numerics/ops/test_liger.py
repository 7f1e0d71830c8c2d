"""Liger-Kernel (the ``liger`` test extra) under ``TRITON_INTERPRET=1``, set through the contracts' ``env``,
forward and backward, with no adapter module (tests/data/liger/contracts.toml). Skipped when
liger-kernel or triton is not installed.

Measured once, 2026-12-03, with Liger-Kernel 0.8.5, Triton 3.9 and torch 2.13.0+cpu on a 2-vCPU AMD EPYC VM
(docs/liger.md): softmax and rope passed in fp32 forward and backward (rope later timed out on a 2-core
machine: skipped here when it does); cross-entropy writes its gradient into its logits during the forward
(input-mutation); bf16 softmax and rope give non-finite gradients in the interpreter; rms_norm, layer_norm,
swiglu and geglu cannot run in the interpreter at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.results.model import CaseResult, load_run
from tests.conftest import DATA, kcgate

pytest.importorskip("liger_kernel")
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def liger(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CaseResult]:
    tmp = tmp_path_factory.mktemp("liger")
    out = tmp / "results.json"
    proc = kcgate(
        "run", "--contracts", str(DATA / "liger" / "contracts.toml"), "--results", str(out), cwd=tmp
    )
    assert out.exists(), proc.stdout + proc.stderr
    return {c.case_id.rsplit("/", 2)[0]: c for c in load_run(out).cases}


@pytest.mark.parametrize("kernel", ["liger-softmax", "liger-rope"])
def test_fp32_forward_and_backward_pass(liger: dict[str, CaseResult], kernel: str) -> None:
    r = liger[f"{kernel}/float32"]
    if r.status == "error" and "timed out" in r.message:
        pytest.skip(f"{kernel} under the interpreter timed out on this machine: {r.message.splitlines()[0]}")
    assert r.status == "pass", r.message
    assert any(k.startswith("grad_budget.") for k, _ in r.metrics.extra)  # the gradients were compared


def test_cross_entropy_writes_its_gradient_into_the_logits(liger: dict[str, CaseResult]) -> None:
    r = liger["liger-cross-entropy/float32"]
    assert r.status == "fail" and r.signature is not None and r.signature.cause == "input-mutation", r.message
    # the forward writes the logits: reported on the forward, never as a gradient's finding
    assert "during the forward" in r.signature.summary and "gradient of" not in r.signature.summary


@pytest.mark.parametrize("kernel", ["liger-softmax", "liger-rope"])
def test_bf16_in_the_interpreter_gives_nan_gradients(liger: dict[str, CaseResult], kernel: str) -> None:
    r = liger[f"{kernel}/bfloat16"]
    assert r.status == "fail" and r.signature is not None, r.message
    assert ("nan" in r.signature.cause or "overflow" in r.signature.cause) and r.metrics.worst_grad, (
        r.signature
    )


@pytest.mark.parametrize("kernel", ["liger-rms-norm", "liger-layer-norm", "liger-swiglu", "liger-geglu"])
def test_kernels_the_interpreter_cannot_run_are_errors(liger: dict[str, CaseResult], kernel: str) -> None:
    r = liger[f"{kernel}/float32"]
    assert r.status == "error" and "InterpreterError" in r.message, r.message


def test_the_contracts_need_no_adapter_module() -> None:
    text = (DATA / "liger" / "contracts.toml").read_text()
    assert text.count('env = { TRITON_INTERPRET = "1" }') == text.count("[[contract]]")
    assert "tests.testing.kernels" not in text and Path(DATA / "liger").is_dir()
