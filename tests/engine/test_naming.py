"""The diagnosis table (kcgate/engine/naming.py, issue 48): every row names a test that exists; precision names are
refused past the error their effect gives at the case's dtype and shape (the case then says where it exceeds
the bound and why); the shipped bug classes are named by their known mistake; and on the held-out naming set
(tests/testing/faults/naming_sets.py) no failing case gets a misleading name, on two seeds."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from kcgate.engine import naming as N
from tests.testing.faults import naming_sets as NS
from tests.testing.faults import semantic as S

ROOT = Path(__file__).resolve().parents[2]
PRECISION = {"noise", "biased-rounding", "row-scale", "low-precision-accumulator", "low-precision-reduction"}


def _named(bug: S.Bug, seed: int) -> tuple[str, str, str]:
    finding = S.diagnose(bug, seed)
    sig = finding.signature
    return finding.status, sig.cause if sig else "", sig.summary if sig else finding.message


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_row_is_described_and_names_a_test_that_exists() -> None:
    assert len({r.name for r in N.RULES}) == len(N.RULES)
    for rule in N.RULES:
        assert rule.evidence and rule.limit, rule.name
        path, _, func = rule.test.partition("::")
        assert func in _tests_in(ROOT / path), f"{rule.name}: {rule.test} does not exist"


def _custom(kernel, reference, shape=(32, 256), dtype="float32"):  # type: ignore[no-untyped-def]
    def inputs(shape, dtype, gen):  # type: ignore[no-untyped-def]
        return (torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype),)

    return S.Bug("custom", "custom", dtype, shape, kernel, "", "", custom=(inputs, reference))


def _ramp(x: torch.Tensor) -> torch.Tensor:
    """2x with an error that grows along the rows: diffuse and unbiased, but a structure, not noise."""
    rows = torch.linspace(0, 1, x.shape[0], dtype=torch.float64)[:, None]
    return (2 * x.double() + 0.05 * rows**3 * x.double().roll(1, -1)).to(x.dtype)


def _iid(x: torch.Tensor) -> torch.Tensor:
    g = torch.Generator().manual_seed(int(x.abs().sum().item() * 1e3) % 2**31)
    return (2 * x.double() + 0.05 * torch.randn(x.shape, generator=g, dtype=torch.float64)).to(x.dtype)


def test_precision_names_are_refused_past_their_limit() -> None:
    """A structured error thousands of budgets past the bound is no rounding noise: "exceeds the bound", where
    and why noise does not fit; independent draws of the same size stay noise."""
    for seed in (0, 1):
        status, cause, summary = _named(_custom(_ramp, lambda x: 2 * x), seed)
        assert (status, cause) == ("fail", "exceeds-bound"), summary
        assert "not noise" in summary and "structured" in summary, summary
        assert "in the output:" in summary and "rows" in summary, summary
        status, cause, summary = _named(_custom(_iid, lambda x: 2 * x), seed)
        assert (status, cause) == ("fail", "noise"), summary


def _tail(frac: float):  # type: ignore[no-untyped-def]
    def kernel(x: torch.Tensor) -> torch.Tensor:
        y = x.double().exp()
        y[..., int(x.shape[-1] * (1 - frac)) :] = 0
        return y.to(x.dtype)

    return kernel


def test_a_tail_that_is_most_of_the_row_is_no_tail_tile() -> None:
    status, cause, summary = _named(_custom(_tail(0.125), lambda x: x.exp()), 0)
    assert (status, cause) == ("fail", "tail-pattern"), summary
    status, cause, summary = _named(_custom(_tail(0.75), lambda x: x.exp()), 0)
    assert status == "fail" and cause != "tail-pattern", summary


def test_a_constant_output_is_no_stale_output() -> None:
    """A loop that never runs returns zeros on every call: equal outputs, the same verdict, but no stale buffer."""
    status, cause, summary = _named(_custom(lambda x: torch.zeros_like(x), lambda x: x.exp()), 0)
    assert (status, cause) == ("fail", "constant-output"), summary


# the families' known mistakes (custom ops have none; a Gemma-cast rmsnorm stays within its bound: not caught)
KNOWN = [
    n
    for n in NS.TUNING + NS.HELD_OUT
    if "wrong-semantics" in n.right and n.bug.op != "custom" and n.bug.id != "rmsnorm-cast-before-weight"
]


@pytest.mark.parametrize("named", KNOWN, ids=[n.bug.id for n in KNOWN])
def test_known_mistakes_name_the_shipped_bugs(named: NS.Named) -> None:
    for seed in (0, 1):
        status, cause, summary = _named(named.bug, seed)
        assert NS.verdict(named, status, cause, summary) == "right", summary


def test_no_misleading_name_on_the_held_out_set() -> None:
    rows = NS.measure(NS.HELD_OUT)
    misleading = [(n.bug.id, g[2], g[3][:120]) for n, got in rows for g in got if g[0] == "misleading"]
    assert misleading == []
    precision_on_semantic = [
        (n.bug.id, g[2]) for n, got in rows for g in got if g[2] in PRECISION and not n.right & PRECISION
    ]
    assert precision_on_semantic == []
