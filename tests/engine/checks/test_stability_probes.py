"""The stability probes run under every class that compares with the oracle, as boundary shapes do (issue 33):
a bf16 softmax without max subtraction fails under C-PRC-01, the class `kcgate init` writes for softmax; a
softcapped cross-entropy whose padded lanes leak into the logsumexp fails where the cap saturates; torch's own
kernels pass, and ``protocol.probes = false`` turns the probes off."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch

from kcgate.contracts.records import Contract, Protocol
from kcgate.engine.case import op_for
from kcgate.engine.checks import CHECKS, Finding
from kcgate.engine.checks.stability import PROBED_FAMILIES
from kcgate.plan import Case, boundary_shapes
from kcgate.results.model import Status
from kcgate.vocab.classes import CLASSES
from tests.testing.kernels import softcap

F = torch.nn.functional


def _check(
    klass: str,
    op: str,
    kernel: Any,
    dtype: str,
    shape: tuple[int, ...] = (64, 1024),
    seed: int = 0,
    probes: bool = True,
    **kw: Any,
) -> Finding:
    from kcgate.engine.trial import CaseContext

    contract = Contract(
        id="t", klass=klass, kernel="x:y", op=op, dtypes=(dtype,), protocol=Protocol(probes=probes), **kw
    )
    case = Case("t", "t", klass, op, dtype, shape, 0, 7000 + seed)
    return CHECKS[klass](CaseContext(contract=contract, case=case, kernel=kernel, op=op_for(contract, ())))


def naive_softmax(x: torch.Tensor) -> torch.Tensor:
    e = x.float().exp()  # no max subtraction: exp overflows for logits above 88.7
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


def test_which_classes_probe() -> None:
    # C-PRC-02 asserts the probes itself; fp8 output policies and the exceptional classes judge no numbers
    assert {c for c, k in CLASSES.items() if not k.probes} == {"C-PRC-02", "C-PRC-04", "C-EXC-01", "C-EXC-02"}


@pytest.mark.parametrize("klass", ["C-PRC-01", "C-CMP-01", "C-ORD-01", "C-ORD-02"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_softmax_without_max_subtraction_fails_under_every_class(klass: str, dtype: str) -> None:
    f = _check(klass, "softmax", naive_softmax, dtype)
    assert f.status == Status.FAIL and f.signature is not None, f
    assert f.signature.cause in ("overflow", "overflow-nan") and "probe" in f.signature.summary, f.signature
    assert "protocol.probes = false" in f.message


def test_without_the_probes_the_unstable_softmax_passes_at_its_budget() -> None:
    # what the issue measured: C-PRC-01 alone passes it at budget 0.99 in bf16; the probe is what catches it
    f = _check("C-PRC-01", "softmax", naive_softmax, "bfloat16", probes=False)
    assert f.status == Status.PASS and not any("probe" in k for k, _ in f.metrics.extra), f


_TORCH = {
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "logsumexp": lambda x: torch.logsumexp(x, -1),
    "layernorm": lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5),
    "rmsnorm": lambda x, w: F.rms_norm(x, x.shape[-1:], w, 1e-5),
    "cross_entropy": lambda x, t, reduction="mean", **kw: F.cross_entropy(x, t, reduction=reduction, **kw),
    "sum": lambda x: x.sum(-1),
    "mean": lambda x: x.mean(-1),
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("op", sorted(_TORCH))
def test_torch_kernels_pass_every_probe(op: str, dtype: str) -> None:
    assert op in PROBED_FAMILIES
    for seed in range(2):
        f = _check("C-PRC-01", op, _TORCH[op], dtype, shape=(16, 1021), seed=seed)
        assert f.status == Status.PASS, (op, dtype, seed, f)
        assert any(k.endswith("_probe_budget") for k, _ in f.metrics.extra), "the probes ran"


@pytest.mark.parametrize("direction", ["forward", "both"])
def test_a_softmax_from_a_saved_logsumexp_passes_the_probes_of_other_classes(direction: str) -> None:
    # exp(x − lse) loses u·|x|: at C-PRC-02's offset 1e4 that is ~30 budgets (that class asserts it), at the
    # offset every other class probes with (100) it is within the bound: a correct kernel, no false alarm
    from tests.testing.kernels.correct import saved_lse_softmax

    for seed in range(3):
        f = _check("C-PRC-01", "softmax", saved_lse_softmax, "float32", (16, 1024), seed, direction=direction)
        assert f.status == Status.PASS, (seed, f)
        assert "cancellation_probe_budget" in dict(f.metrics.extra)


def test_backward_contracts_probe_their_gradients_too() -> None:
    # (fp32: torch's CPU layernorm backward sums dw and db in bf16, beyond a declared fp32 accumulator)
    for op in ("softmax", "layernorm", "cross_entropy"):
        f = _check("C-PRC-01", op, _TORCH[op], "float32", shape=(8, 509), direction="both")
        assert f.status == Status.PASS, (op, f)
        assert "cancellation_probe_budget" in dict(f.metrics.extra)


def test_an_offset_the_output_cannot_hold_is_scaled_down_and_recorded() -> None:
    # 4096 fp16 values offset by 100 sum past fp16's max whatever the kernel does: the offset is divided
    # by 16 until the exact sums fit in half the range (409,600 / 16 = 25,600 < 65,504 / 2)
    f = _check("C-PRC-01", "sum", _TORCH["sum"], "float16", shape=(4, 4096), accumulate="float32")
    assert f.status == Status.PASS, f
    assert dict(f.metrics.extra)["cancellation_probe_offset"] == 6.25


def _softcapped(kernel: Any, dtype: str, shape: tuple[int, ...], **kw: Any) -> Finding:
    return _check(
        "C-PRC-01",
        "cross_entropy",
        kernel,
        dtype,
        shape=shape,
        params=(("softcap", 30.0), ("reduction", kw.pop("reduction", "mean"))),
        **kw,
    )


def _boundary(shape: tuple[int, ...]) -> tuple[int, ...]:
    c = Contract(id="t", klass="C-PRC-01", kernel="x:y", op="cross_entropy", shapes=(shape,))
    (b,) = boundary_shapes(c, c.shapes)
    return b


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_padded_lanes_leaking_into_a_softcapped_logsumexp_fail_where_the_cap_saturates(
    reduction: str,
) -> None:
    # declared as a new user writes it (one power-of-two shape, fp32, the natural class): the boundary shape
    # gives the row a tail, and the saturation probe makes the tail's −cap lanes weigh as much as real ones
    shape = _boundary((32, 1024))
    assert shape[-1] == 1021
    for seed in range(2):
        f = _softcapped(softcap.leaky_padded, "float32", shape, seed=seed, reduction=reduction)
        assert f.status == Status.FAIL and f.signature is not None, f
        assert f.signature.cause == "saturation" and "−240" in f.signature.summary, f.signature
        # without the probe the same case passes: ordinary logits weigh e^30 more than the padding
        off = _softcapped(
            softcap.leaky_padded, "float32", shape, seed=seed, reduction=reduction, probes=False
        )
        assert off.status == Status.PASS, off
    # and at the power-of-two shape there is no padding to leak
    assert _softcapped(softcap.leaky_padded, "float32", (32, 1024)).status == Status.PASS


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("kernel", [softcap.masked_padded, softcap.torch_softcapped])
def test_correct_softcapped_kernels_pass_the_saturation_probe(kernel: Any, dtype: str) -> None:
    for reduction in ("mean", "none"):
        f = _softcapped(kernel, dtype, (3, 1021), reduction=reduction, direction="both")
        assert f.status == Status.PASS, (reduction, f)
        assert "saturation_probe_budget" in dict(f.metrics.extra), "the saturation probe ran"


def test_the_softcap_is_part_of_the_oracle() -> None:
    # a kernel that forgets the cap fails on ordinary inputs (no probe needed), named as the known mistake
    def uncapped(
        x: torch.Tensor, t: torch.Tensor, reduction: str = "mean", softcap: float = 0.0
    ) -> torch.Tensor:
        return F.cross_entropy(x, t, reduction=reduction)

    f = _softcapped(uncapped, "float32", (16, 1021), probes=False)
    assert f.status == Status.FAIL, f
    assert f.signature is not None and "softcap" in f.signature.summary, f.signature


def test_probes_off_is_a_contract_key() -> None:
    from kcgate.contracts.fields import CONTRACT_FIELD

    assert CONTRACT_FIELD["protocol"].field("probes").default is True
    assert replace(Protocol(), probes=False).probes is False
