"""kcgate.engine.invoke: a kernel called through a ``call`` table receives every input of its configured family."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.test_backward import run_contract

VARLEN = """class = "C-PRC-01"
kernel = "tests.testing.kernels.attention:sdpa_varlen"
op = "attention"
dtypes = ["float32"]
shapes = [[3, 4, 2, 40, 32]]
params = {{ varlen = true, causal = true }}
protocol = {{ seeds = 1, trials = 2 }}
call = {call}"""


@pytest.mark.parametrize(
    "call",
    [
        # flash_attn_varlen_func's positional order, every argument mapped
        '{ args = ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "{length}", "{length}"], '
        "kwargs = { causal = true } }",
        # only keywords mapped: the five inputs go positionally, in the family's order
        '{ kwargs = { max_seqlen_q = "{length}", max_seqlen_k = "{length}", causal = true } }',
    ],
)
def test_varlen_attention_through_a_call_table_gets_cu_seqlens(tmp_path: Path, call: str) -> None:
    (result,) = run_contract(tmp_path, VARLEN.format(call=call))
    assert result.status == "pass", (result.message, result.signature)
