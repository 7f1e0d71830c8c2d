"""The three incident examples in examples/incidents/ run end to end and fail for the documented reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kcgate.results.model import load_run

pytestmark = pytest.mark.slow  # each incident runs kcgate end to end

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
INCIDENTS = ROOT / "examples" / "incidents"

# contract id -> (class, expected status, signature cause, words the summary must contain)
EXPECTED: dict[str, dict[str, tuple[str, str, str | None, tuple[str, ...]]]] = {
    "ascend-fp16-coercion": {
        "ascend-faithful": ("C-PRC-01", "pass", None, ()),
        "ascend-coerced": ("C-PRC-01", "fail", "low-precision-accumulator", ("fp16", "effective bits")),
    },
    "sakana-reward-hacking": {
        "sakana-honest": ("C-CMP-03", "pass", None, ()),
        "sakana-stale-buffer": ("C-CMP-03", "fail", "stale-output", ("stale",)),
        "sakana-benchmark-only": ("C-CMP-03", "fail", "shape-overfitting", ("held-out",)),
    },
    "amd-oob-silent-acceptance": {
        "amd-checked": ("C-EXC-02", "pass", None, ()),
        "amd-wrapped": ("C-EXC-02", "fail", "out-of-bounds", ("wrapped", "raise")),
        "amd-zero-filled": ("C-EXC-02", "fail", "out-of-bounds", ("zero", "raise")),
    },
}


def _run(name: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    out = tmp_path / f"{name}.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kcgate",
            "run",
            "--contracts",
            str(INCIDENTS / name / "contracts.toml"),
            "--results",
            str(out),
            "-q",
            "--seed",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return load_run(out)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_incident(name: str, tmp_path: Path) -> None:
    for extra in ("README.md", "contracts.toml"):
        assert (INCIDENTS / name / extra).is_file()
    run = _run(name, tmp_path)
    expected = EXPECTED[name]
    seen: set[str] = set()
    for case in run.cases:
        klass, status, cause, words = expected[case.contract_id]
        seen.add(case.contract_id)
        assert case.klass == klass, case.case_id
        assert case.status == status, f"{case.case_id}: {case.status} {case.message}"
        if status == "pass":
            continue
        assert case.signature is not None, case.case_id
        assert case.signature.cause == cause, f"{case.case_id}: {case.signature}"
        summary = case.signature.summary.lower()
        for word in words:
            assert word in summary, f"{case.case_id}: {word!r} not in {summary!r}"
        if cause == "low-precision-accumulator":  # the fitted accumulator is fp16's 11 significant bits
            bits = float(dict(case.signature.evidence)["effective_bits"])
            assert 10.0 <= bits <= 12.0, f"{case.case_id}: {bits} effective bits"
    assert seen == set(expected), f"contracts without cases: {set(expected) - seen}"
