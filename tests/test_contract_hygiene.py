"""Contract hygiene: the declared out_dtype is part of every postcondition (wrong-dtype), shape arity
and placeholders checked by validate with file:line and fix, and ``env`` applied in the worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcgate.contracts.load import load_project
from kcgate.errors import ContractsError
from kcgate.results.model import load_run
from tests.conftest import ROOT, kcgate
from tests.engine.test_backward import run_contract


@pytest.mark.parametrize("klass", ["C-PRC-01", "C-PRC-02", "C-ORD-02", "C-CMP-03"])
def test_fp64_output_for_an_fp32_contract_is_wrong_dtype_whatever_the_class(
    tmp_path: Path, klass: str
) -> None:
    op = "sum" if klass == "C-PRC-02" else "matmul"
    kernel = f"tests.testing.kernels.shipped:{op}_fp64"
    shape = "[[16, 64]]" if op == "sum" else "[[16, 64, 8]]"
    body = (
        f'class = "{klass}"\nkernel = "{kernel}"\nop = "{op}"\nshapes = {shape}\nprotocol = {{ seeds = 1 }}'
    )
    results = run_contract(tmp_path, body)
    assert results and all(r.status == "fail" for r in results), [r.message for r in results]
    assert all(r.signature is not None and r.signature.cause == "wrong-dtype" for r in results)


def test_fp32_output_for_a_declared_bf16_output_is_wrong_dtype(tmp_path: Path) -> None:
    body = (
        'class = "C-PRC-02"\nkernel = "tests.testing.kernels.shipped:sum_fp32_out"\nop = "sum"\n'
        'dtypes = ["bfloat16"]\nout_dtype = "bfloat16"\nshapes = [[16, 64]]'
    )
    (r, *_) = run_contract(tmp_path, body)
    assert r.status == "fail" and r.signature is not None and r.signature.cause == "wrong-dtype", r.message
    assert "float32" in r.message and "bfloat16" in r.message


BAD = [
    ('op = "matmul"\nshapes = [[64, 64]]', 6, "shapes[0]", "matmul shapes have 3 dimensions [m, k, n]"),
    (
        'op = "layernorm"\ncall = { args = ["x", ["{k}"]] }',
        6,
        "call.args[1]",
        "'{k}' is not a size of op 'layernorm'",
    ),
    ('op = "matmul"\ninit = { size = "{rows}" }', 6, "init.size", "'{rows}' is not a size of op 'matmul'"),
    ('op = "matmul"\ncall = { argz = [] }', 6, "call.argz", "unknown key"),
    ('op = "matmul"\nenv = { TRITON_INTERPRET = 1 }', 6, "env.TRITON_INTERPRET", 'NAME = "string"'),
    ('op = "matmul"\ndirection = "sideways"', 6, "direction", "unknown direction"),
    (
        'class = "C-PRC-03"\nop = "matmul"\ndirection = "both"',
        6,
        "direction",
        "C-PRC-03 measures a forward path only",
    ),
]


@pytest.mark.parametrize(("body", "line", "key", "message"), BAD)
def test_validate_names_file_line_key_and_fix(
    tmp_path: Path, body: str, line: int, key: str, message: str
) -> None:
    f = tmp_path / "contracts.toml"
    klass = "" if body.startswith("class") else 'class = "C-PRC-01"\n'
    f.write_text(f'[[contract]]\nid = "c"\n{klass}kernel = "torch:matmul"\n{body}\n')
    with pytest.raises(ContractsError) as info:
        load_project(f)
    (p,) = info.value.problems
    assert (p.line, p.where, p.fix != "") == (line, f"contract 'c'.{key}", True), p.render()
    assert message in p.message, p.render()


@pytest.mark.slow
def test_env_is_set_in_the_worker_before_the_kernel_is_imported(tmp_path: Path) -> None:
    body = 'class = "C-PRC-01"\nkernel = "tests.testing.kernels.envprobe:matmul"\nop = "matmul"\nshapes = [[16, 64, 8]]\n'
    body += "protocol = { seeds = 1, trials = 1 }\n"
    f = tmp_path / "contracts.toml"
    f.write_text(
        f'[project]\npaths = ["{ROOT}"]\n\n[[contract]]\nid = "with-env"\n{body}env = {{ KCGATE_TEST_ENV_PROBE = "on" }}\n'
        f'\n[[contract]]\nid = "without-env"\n{body}'
    )
    out = tmp_path / "r.json"
    proc = kcgate("run", "--contracts", str(f), "--results", str(out), cwd=tmp_path)
    cases = {c.contract_id: c for c in load_run(out).cases} if out.exists() else {}
    assert cases["with-env"].status == "pass", proc.stdout + proc.stderr
    assert cases["without-env"].status == "fail"  # its worker never saw the variable


def test_schema_covers_call_init_direction_env_and_the_output_dtype_rule() -> None:
    import json

    proc = kcgate("schema", "contracts")
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    text = json.dumps(schema)
    for key in ('"call"', '"init"', '"direction"', '"env"', "wrong-dtype", "TRITON_INTERPRET", "{n}"):
        assert key in text, key


def test_repo_contracts_include_a_shipped_kernel_backward_contract() -> None:
    project = load_project(ROOT / "contracts.toml")
    c = project.contract("layer-norm-backward")
    assert c.direction == "both" and c.kernel == "torch.nn.functional:layer_norm" and c.call_args
