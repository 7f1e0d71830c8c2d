"""The planted-fault corpus (tests/faults): signature accuracy >= 90%, the same name on every seed, and
docs/signature-accuracy.md regenerated from it (python -m tests.testing.faults.report)."""

from __future__ import annotations

import pytest

from tests.testing.faults import corpus as C
from tests.testing.faults import report


def test_corpus_is_large_and_covers_every_new_cause() -> None:
    faults = C.corpus()
    assert len(faults) >= 150
    assert len({f.id for f in faults}) == len(faults)
    causes = {f.expected for f in faults}
    for cause in (
        "garbage",
        "offset",
        "sparse",
        "noise",
        "overflow-nan",
        "input-mutation",
        "wrong-dtype",
        "stale-output",
    ):
        assert cause in causes
    assert {f.dtype for f in faults} >= {"float32", "bfloat16"}


@pytest.mark.parametrize(
    "fault_id",
    [
        "garbage-huge/matmul/bfloat16",
        "offset-const-0.001/sum/float32",
        "sparse-1/layernorm/float32",
        "noise-0.3/softmax/bfloat16",
        "input-mutated/softmax/float32",
        "exp-overflow-fp32-exp/softmax/float32",
        "row-scale-float16/rmsnorm/float32",
    ],
)
def test_one_of_each_kind_is_named_alike_on_five_seeds(fault_id: str) -> None:
    fault = next(f for f in C.corpus() if f.id == fault_id)
    assert [C.diagnose(fault, s) for s in range(5)] == [fault.expected] * 5


@pytest.mark.slow
def test_accuracy_and_the_doc() -> None:
    results = report.measure()
    right = [fid for fid, (f, got) in results.items() if all(g == f.expected for g in got)]
    assert len(right) / len(results) >= report.REQUIRED, [fid for fid in results if fid not in right]
    assert all(len(set(got)) == 1 for _, got in results.values()), (
        "a fault was named differently across seeds"
    )
    text = report.render(results)
    assert report.DOC.read_text(encoding="utf-8") == text, (
        "docs/signature-accuracy.md is stale: python -m tests.testing.faults.report"
    )
