"""Kernels as they ship, written the short way (no adapter module): torch functions, re-exported names,
an nn.Module class built from ``init``, an autograd.Function called through ``.apply``, with ``call``
mapping the family's inputs and sizes onto their signatures. One ``kcgate run`` in a real worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.results.model import load_run
from tests.conftest import ROOT, kcgate

pytestmark = pytest.mark.slow  # end to end: every test runs kcgate in subprocesses

LAYER_NORM_CALL = 'call = { args = ["x", ["{n}"], "w", "b"], kwargs = { eps = 1e-5 } }'
SHIPPED = {
    "f-layer-norm": ('kernel = "torch.nn.functional:layer_norm"', LAYER_NORM_CALL, 'op = "layernorm"'),
    "m-layer-norm": (
        'kernel = "torch.nn:LayerNorm"',
        'init = { normalized_shape = ["{n}"], eps = 1e-5 }',
        'op = "layernorm"',
    ),
    "matmul": ('kernel = "torch:matmul"', 'op = "matmul"', "shapes = [[48, 96, 40]]"),
    "softmax": (
        'kernel = "torch.nn.functional:softmax"',
        "call = { kwargs = { dim = -1 } }",
        'op = "softmax"',
    ),
    "function": (
        'kernel = "tests.testing.kernels.shipped:RowSoftmax"',
        'call = { args = ["x", -1, 1.0] }',
        'op = "softmax"',
    ),
    "module": (
        'kernel = "tests.testing.kernels.shipped:ScaledRMSNorm"',
        'init = { hidden_size = "{n}", eps = 1e-5 }',
        'op = "rmsnorm"',
    ),
}
# Measured, and named by kcgate: torch's CPU bf16 layer_norm backward sums dγ/dβ in bf16.
BF16_BACKWARD_FINDING = ("f-layer-norm", "m-layer-norm")


def _contracts(tmp_path: Path) -> Path:
    blocks = [f'[project]\npaths = ["{ROOT}"]\n']
    for cid, lines in SHIPPED.items():
        for dtype in ("float32", "bfloat16"):
            directions = ["both"]
            if dtype == "bfloat16" and cid in BF16_BACKWARD_FINDING:
                directions = ["forward", "backward"]
            for direction in directions:
                shape = "" if any(x.startswith("shapes") for x in lines) else "shapes = [[24, 192]]"
                blocks.append(
                    "[[contract]]\n"
                    + f'id = "{cid}-{dtype}-{direction}"\nclass = "C-CMP-03"\ndtypes = ["{dtype}"]\n'
                    + f'direction = "{direction}"\nprotocol = {{ seeds = 1, trials = 2 }}\n'
                    + "\n".join((*lines, shape))
                    + "\n"
                )
    f = tmp_path / "contracts.toml"
    f.write_text("\n".join(blocks))
    return f


@pytest.fixture(scope="module")
def shipped_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("shipped")
    contracts = _contracts(tmp)
    valid = kcgate("validate", str(contracts))
    assert valid.returncode == 0, valid.stdout + valid.stderr
    out = tmp / "results.json"
    proc = kcgate("run", "--contracts", str(contracts), "--results", str(out), cwd=tmp)
    assert out.exists(), proc.stdout + proc.stderr
    return {"validate": valid, "cases": {c.contract_id: c for c in load_run(out).cases}}


def test_validate_sees_torchs_own_names_without_a_warning(shipped_run: dict[str, object]) -> None:
    valid = shipped_run["validate"]
    assert "static lookup" not in valid.stderr  # type: ignore[attr-defined]
    assert "OK" in valid.stdout  # type: ignore[attr-defined]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("cid", sorted(SHIPPED))
def test_shipped_kernel_passes_forward_and_backward(
    shipped_run: dict[str, object], cid: str, dtype: str
) -> None:
    cases = shipped_run["cases"]
    if dtype == "bfloat16" and cid in BF16_BACKWARD_FINDING:
        fwd = cases[f"{cid}-{dtype}-forward"]  # type: ignore[index]
        assert fwd.status == "pass", fwd.message
        bwd = cases[f"{cid}-{dtype}-backward"]  # type: ignore[index]
        # the module's gradients are named by its parameters, the function's by the op's inputs
        names = ("weight", "bias") if cid.startswith("m-") else ("w", "b")
        assert bwd.status == "fail" and bwd.metrics.worst_grad in names, bwd.message
        return
    r = cases[f"{cid}-{dtype}-both"]  # type: ignore[index]
    assert r.status == "pass", r.message
