"""The range probes end to end (kcgate run, kernels in a worker process; issue 56): a planted bug each needs
(an exp without a threshold, a log without its clamp, subnormals flushed to zero, an eps outside the square
root) fails under its probe with the default generator, named by it; the torch op's formulation, a textbook
formula and a stable rewrite pass; naming an input in ``stability`` turns its inferred probes off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import kcgate

ROOT = Path(__file__).resolve().parents[3]
M = "tests.testing.kernels.ranges"
# (contract id, kernel, reference, generator, the probe that must fail it or "" for a pass, extra keys)
ROWS = (
    ("softplus-threshold", "softplus_threshold", "softplus_ref", "normal_gen", "", ""),
    ("softplus-stable", "softplus_stable", "softplus_ref", "normal_gen", "", ""),
    ("softplus-naive", "softplus_naive", "softplus_ref", "normal_gen", "exp-range", ""),
    ("log-clamped", "clamped_log", "clamped_log_ref", "unit_gen", "", ""),
    ("log-unclamped", "unclamped_log", "clamped_log_ref", "unit_gen", "log-range", ""),
    ("silu-textbook", "silu_textbook", "silu_ref", "normal_gen", "", ""),
    ("silu-flushed", "silu_flushed", "silu_ref", "normal_gen", "subnormal", ""),
    ("rms-textbook", "rms_textbook", "rms_ref", "norm_gen", "", ""),
    ("rms-eps-outside", "rms_eps_outside", "rms_ref", "norm_gen", "dynamic-range", ""),
    (
        "rms-eps-outside-declared",
        "rms_eps_outside",
        "rms_ref",
        "norm_gen",
        "",
        "stability = { x = {}, w = {} }",
    ),
)
CONTRACT = (
    '[[contract]]\nid = "{id}"\nclass = "C-PRC-01"\nop = "custom"\nkernel = "{m}:{kernel}"\n'
    'reference = "{m}:{ref}"\ninputs = "{m}:{gen}"\ndtypes = ["float32"]\nshapes = [[16, 64]]\n'
    "protocol = {{ seeds = 1, boundary = false }}\n{extra}\n"
)


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:  # type: ignore[type-arg]
    tmp = tmp_path_factory.mktemp("ranges")
    body = "".join(CONTRACT.format(id=i, m=M, kernel=k, ref=r, gen=g, extra=x) for i, k, r, g, _, x in ROWS)
    (tmp / "contracts.toml").write_text(f'[project]\npaths = ["{ROOT}"]\n\n{body}')
    proc = kcgate("run", "-c", "contracts.toml", "--results", "out.json", cwd=tmp, timeout=900)
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads((tmp / "out.json").read_text())
    rows = [dict(zip(data["case_fields"], row)) for row in data["cases"]]
    out = {}
    for c in rows:
        c["metrics"] = dict(zip(data["metric_fields"], c["metrics"]))
        out[c["contract_id"]] = c
    return out


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_a_range_probe_fails_the_bug_it_targets_and_passes_the_correct_formulations(
    cases: dict[str, dict],  # type: ignore[type-arg]
    row: tuple[str, ...],
) -> None:
    cid, _, _, _, probe, extra = row
    case = cases[cid]
    notes = case["metrics"]["extra"] or {}
    if not probe:
        assert case["status"] == "pass", case
        if extra:  # declared: nothing inferred for the inputs it names
            assert not any(k.startswith("inferred_") for k in notes), notes
        return
    assert case["status"] == "fail", case
    sig = case["signature"]
    assert sig["cause"] == probe or dict(sig["evidence"]).get("probe") == probe, sig
    inferred = f"inferred_{probe}_probe_" in " ".join(notes) and "a probe kcgate inferred" in sig["summary"]
    assert inferred != bool(extra), (notes, sig)  # a declared probe is not said to be inferred
