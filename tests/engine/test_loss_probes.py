"""The inputs real loss kernels break on, drawn by default (issue 56): a TVD whose gradient is wrong at ties
(p == q) and a JSD whose exp underflows to 0 on peaked distributions pass every draw of a contract's own
generator; kcgate's ties and peaked probes (inferred from what the generator draws) catch both and name them
(``ties``; ``underflow``, never overflow), and the fixed twins pass. Liger-Kernel's code re-implemented in
torch: tests/testing/kernels/losses.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kcgate.numerics import domains
from tests.engine.test_input_roles import _run

MOD = "tests.testing.kernels.losses"


def _contract(
    kernel: str, ref: str, gen: str, no_grad: str, dtypes: str = '"float32"', extra: str = ""
) -> str:
    return (
        f'class = "C-PRC-01"\nop = "custom"\nkernel = "{MOD}:{kernel}"\nreference = "{MOD}:{ref}"\n'
        f'inputs = "{MOD}:{gen}"\ndtypes = [{dtypes}]\nshapes = [[8, 128]]\ndirection = "both"\n'
        f'no_grad = ["{no_grad}"]\nprotocol = {{ seeds = 1 }}\n{extra}'
    )


@pytest.mark.slow
def test_a_jsd_that_underflows_is_named_underflow_not_overflow(tmp_path: Path) -> None:
    for r in _run(tmp_path, _contract("jsd_shipped", "jsd_ref", "log_probs_gen", "log_p")):
        assert r.status == "fail" and r.signature is not None, r.message
        assert r.signature.cause == "underflow", r.signature
        assert dict(r.signature.evidence)["probe"] == "peaked", r.signature.evidence
        assert "overflow" not in r.signature.summary and "exp underflowed to 0" in r.signature.summary


@pytest.mark.slow
def test_a_tvd_gradient_wrong_at_ties_is_named_ties_on_its_gradient(tmp_path: Path) -> None:
    for r in _run(tmp_path, _contract("tvd_shipped", "tvd_ref", "probs_gen", "q")):
        assert r.status == "fail" and r.signature is not None, r.message
        assert r.signature.cause == "ties", r.signature
        ev = dict(r.signature.evidence)
        assert ev["probe"] == "ties" and ev["grad"] == "p", ev
        assert "input 'p' equal to input 'q' on every other row" in r.signature.summary


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kernel", "ref", "gen", "no_grad"),
    [("jsd_fixed", "jsd_ref", "log_probs_gen", "log_p"), ("tvd_fixed", "tvd_ref", "probs_gen", "q")],
)
def test_the_fixed_twins_pass_with_the_probes_inferred(
    tmp_path: Path, kernel: str, ref: str, gen: str, no_grad: str
) -> None:
    for r in _run(tmp_path, _contract(kernel, ref, gen, no_grad, '"float32", "bfloat16"')):
        assert r.status == "pass", (r.case_id, r.message)
        notes = dict(r.metrics.extra)
        assert any(k.startswith("inferred_ties_probe_") for k in notes), notes
        assert any(k.startswith("inferred_peaked_probe_") for k in notes), notes


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kernel", "ref", "gen", "no_grad"),
    [("jsd_shipped", "jsd_ref", "log_probs_gen", "log_p"), ("tvd_shipped", "tvd_ref", "probs_gen", "q")],
)
def test_the_shipped_bugs_pass_the_contracts_own_draws(
    tmp_path: Path, kernel: str, ref: str, gen: str, no_grad: str
) -> None:
    """What issue 56 measured: without the probes, the contract's own draws never tie and never underflow."""
    body = _contract(kernel, ref, gen, no_grad).replace(
        "protocol = { seeds = 1 }", "protocol = { seeds = 1, probes = false }"
    )
    for r in _run(tmp_path, body):
        assert r.status == "pass", (r.case_id, r.message)


def test_distributions_are_read_from_the_generators_draws() -> None:
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4, 32, generator=g, dtype=torch.float64)
    probs, logs = torch.softmax(z, -1), torch.log_softmax(z, -1)
    assert domains.kind(probs.to(torch.bfloat16)) == "prob" and domains.kind(logs.float()) == "log"
    assert domains.kind(z) == "" and domains.kind(probs[:, :1]) == "" and domains.kind(probs.abs() * 2) == ""
    assert domains.distributions([(z, probs, logs)]) == ((1, "prob"), (2, "log"))
    peaked = domains.peaked(logs.float(), "log", g)
    assert domains.kind(peaked) == "log" and float(peaked.min()) < -domains.PEAK


def test_ties_copy_whole_rows_between_inputs_of_one_shape_and_dtype() -> None:
    a, b = torch.rand(5, 8), torch.rand(5, 8)
    assert domains.tie_pairs((a, b, torch.rand(8), b.double(), torch.zeros(5, 8, dtype=torch.long))) == (
        (0, 1),
    )
    t = domains.tied(a, b)
    assert torch.equal(t[::2], b[::2]) and torch.equal(t[1::2], a[1::2]) and torch.equal(a, a.clone())
