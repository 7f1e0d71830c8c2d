"""The PR comment a kernel reviewer reads, for the cases that matter, from real diffs of hand-built runs.

Golden files in tests/golden/comment-*.md (regenerate with KCGATE_REGEN_GOLDEN=1 and read the diff).
"""

from __future__ import annotations

import datetime as dt
import re

from kcgate.contracts.policy import DriftRule, Policy, Waiver
from kcgate.gate.diff import make_diff
from kcgate.gate.model import Diff
from kcgate.plan import base_seed_for
from kcgate.render.markdown import RenderContext, Rerun, render_comment
from kcgate.results.model import CaseResult, Fingerprint, RunResult, Signature
from tests.testing.golden_files import check_golden
from tests.testing.report_samples import (
    DESCRIPTIONS,
    FP_AMD,
    FP_INTEL,
    FP_NVIDIA,
    SHA_NEW,
    SHA_OLD,
    passing,
    regressed,
    scenario_case,
)

TODAY = dt.date(2026, 12, 3)
REPO = "https://github.com/acme/kernels"
CTX = RenderContext(
    head_sha=SHA_NEW,
    run_url=f"{REPO}/actions/runs/42",
    source_url=f"{REPO}/blob/{SHA_NEW}/contracts.toml",
    devices=(("nvidia-h100", "cuda H100 80GB sm_90"), ("amd-mi300x", "rocm MI300X gfx942")),
    base_ref=SHA_OLD,
    base_source_url=f"{REPO}/blob/{SHA_OLD}/contracts.toml",
    descriptions=tuple(sorted(DESCRIPTIONS.items())),
    drift_rule=DriftRule().describe(),
    vendor_run_url=f"{REPO}/actions/runs/41",
    job_urls=(
        ("nvidia-h100", f"{REPO}/actions/runs/41/job/9001"),
        ("amd-mi300x", f"{REPO}/actions/runs/41/job/9002"),
    ),
    reruns=(
        ("nvidia-h100", Rerun("cuda", (("CUBLAS_WORKSPACE_CONFIG", ":4096:8"),))),
        ("amd-mi300x", Rerun("rocm", (), ("--held-out", "2"))),
    ),
)


def _run(runner: str, fp: Fingerprint, *groups: tuple[CaseResult, ...]) -> RunResult:
    return RunResult(runner, fp, tuple(c for g in groups for c in g))


def _verdict(
    current: list[RunResult], base: list[RunResult], policy: Policy = Policy(), expect: tuple[str, ...] = ()
) -> Diff:
    return make_diff({r.runner: r for r in current}, {r.runner: r for r in base}, policy, TODAY, expect)


def _rows(text: str, section: str) -> list[str]:
    body = text.split(f"### {section}", 1)[1].split("\n\n", 2)[1]
    return [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| |")]


def test_three_regressions_on_two_runners_are_three_rows_not_twelve() -> None:
    contracts = ("gemm-bf16", "softmax-fp32", "layernorm-fp16")
    base = [_run(r, fp, *(passing(c) for c in contracts), passing("gelu-fp32")) for r, fp in _RUNNERS]
    now = [
        _run(r, fp, *(regressed(c, scale=k) for c in contracts), passing("gelu-fp32"))
        for (r, fp), k in zip(_RUNNERS, (1.0, 1.5))
    ]
    verdict = _verdict(now, base)
    assert len(verdict.blocking) == 12
    text = render_comment(verdict, CTX)
    rows = _rows(text, "Blocking")
    assert len(rows) == 3, rows
    assert all("amd-mi300x, nvidia-h100" in row and "4 (s0, s1)" in row for row in rows)
    assert "bf16 GEMM with fp32 accumulation" in rows[0] and "1.5 → 70.5" not in rows[0]
    worst = next(c for c in verdict.blocking if c.runner == "amd-mi300x" and c.case_id.endswith("s1"))
    command = (
        "kcgate run -c contracts.toml --runner amd-mi300x --device rocm --held-out 2 "
        f"-k {worst.case_id} --seed {base_seed_for(worst.seed or 0, worst.case_id)} --dtype"
    )
    assert command in text and "[job log](https://github.com/acme/kernels/actions/runs/41/job/9002)" in text
    assert f"Baselines from `{SHA_OLD[:12]}`" in text and "**budget used**: measured error" in text
    check_golden("comment-regressions.md", text)


_RUNNERS = (("nvidia-h100", FP_NVIDIA), ("amd-mi300x", FP_AMD))


def _one_failure_with_no_budget(signature: Signature) -> str:
    """gemm-bf16 passed at budget 0.01 on the base and fails now with no budget (nothing finite to measure)."""
    base = [
        _run("nvidia-h100", FP_NVIDIA, (scenario_case("gemm-bf16", 0, "pass", 0.01),), passing("gelu-fp32"))
    ]
    now = [
        _run(
            "nvidia-h100",
            FP_NVIDIA,
            (scenario_case("gemm-bf16", 0, "fail", None, signature=signature),),
            passing("gelu-fp32"),
        )
    ]
    return render_comment(_verdict(now, base), CTX)


def test_a_nan_failure_says_nan_and_never_shows_the_baselines_number() -> None:
    text = _one_failure_with_no_budget(
        Signature("nan-pattern", "NaN/Inf at 12 of 524288 elements where the oracle is finite")
    )
    [row] = _rows(text, "Blocking")
    assert "| NaN/Inf |" in row and "0.01" not in row
    assert "❌ fail NaN/Inf" in text  # the matrix cell: status, then what it measured
    check_golden("comment-nan.md", text)


def test_a_wrong_shape_failure_names_its_cause_never_nan() -> None:
    """An integrity failure has no budget because nothing was compared: the row says what the kernel did."""
    text = _one_failure_with_no_budget(
        Signature("bad-output", "the kernel returned no tensor of the right shape")
    )
    [row] = _rows(text, "Blocking")
    assert "NaN/Inf" not in row and "no tensor of the right shape" in row and "fail NaN/Inf" not in text
    check_golden("comment-bad-output.md", text)


def test_a_missing_runner_says_no_results() -> None:
    base = [_run(r, fp, passing("gemm-bf16")) for r, fp in _RUNNERS]
    now = [_run("nvidia-h100", FP_NVIDIA, passing("gemm-bf16"))]
    text = render_comment(_verdict(now, base, expect=("amd-mi300x",)), CTX)
    [row] = _rows(text, "Blocking")
    assert "missing runner" in row and "no results" in row and "fingerprint" not in row
    [amd] = [r for r in _rows(text, "Runners") if r.startswith("| amd-mi300x")]
    assert "❌ no results" in amd and "other fingerprint" not in amd
    check_golden("comment-missing-runner.md", text)


def test_a_runner_without_a_baseline_is_unverified_never_green() -> None:
    """Its passes are unverified; its failures block on their own verdict (#44: a fresh runner name is no way
    around the gate)."""
    base = [_run("nvidia-h100", FP_NVIDIA, passing("gemm-bf16"))]
    now = [
        _run("nvidia-h100", FP_NVIDIA, passing("gemm-bf16")),
        _run("intel-max", FP_INTEL, regressed("gemm-bf16"), passing("gelu-fp32")),
    ]
    text = render_comment(_verdict(now, base), CTX)
    assert text.startswith("## ❌ kcgate: 1 blocking change (2 cases on 1 runner)")
    assert "| unverified (pass) | intel-max |" in text and "| new violation | intel-max |" in text
    [intel] = [r for r in _rows(text, "Runners") if r.startswith("| intel-max")]
    assert "unverified: no baseline" in intel and "✅" not in intel
    matrix = text.split("Contract × runner", 1)[1]
    intel_cells = [line.split(" | ")[1] for line in matrix.splitlines() if line.startswith("| g")]
    assert intel_cells and not any("✅" in cell for cell in intel_cells), intel_cells
    check_golden("comment-unverified.md", text)


def test_a_waived_error_is_reported_as_waived() -> None:
    waiver = Waiver(
        "fused-moe",
        "amd-*",
        dt.date(2027, 1, 15),
        "no ROCm build of the fused kernel yet, issue 140",
        "bob",
        kind="error",
    )
    crash = "HIP error: invalid device function (hipErrorInvalidDeviceFunction)"
    errors = tuple(scenario_case("fused-moe", s, "error", None, message=crash) for s in range(2))
    base = [_run("amd-mi300x", FP_AMD, passing("gelu-fp32"))]
    now = [_run("amd-mi300x", FP_AMD, errors, passing("gelu-fp32"))]
    verdict = _verdict(now, base, Policy(waivers=(waiver,)))
    assert verdict.passed
    text = render_comment(verdict, CTX)
    assert text.startswith("## ✅ kcgate: no blocking changes")
    assert re.search(
        r"\| waived \(error\) \| amd-mi300x \| float32 \| 128x4096 \| 2 \(s0, s1\) \| error \| – \|", text
    )
    assert (
        "waiver until 2027-01-15, owner bob: no ROCm build" in text
        and "hipErrorInvalidDeviceFunction" in text
    )
    check_golden("comment-waived-error.md", text)


def test_a_note_is_shown_under_the_header_escaped() -> None:
    from dataclasses import replace

    note = "Not started after 90 minutes (reported as missing runners by the watchdog): contracts (@amd <b>)"
    text = render_comment(
        _verdict([], [_run("amd-mi300x", FP_AMD, passing("gemm-bf16"))]), replace(CTX, notes=(note,))
    )
    assert "Not started after 90 minutes" in text and "@\u200bamd \\<b\\>" in text
    assert text.index("Not started") < text.index("### Runners")


def test_attribution_rows_say_pre_existing_or_introduced_with_base_evidence() -> None:
    """Issues 53 and 57: main's failures and crashes show, counted, never blocking, with the base commit's
    rerun as evidence; the PR's own failure blocks, attributed to it; the tracked library's version moves."""
    from dataclasses import replace
    from pathlib import Path

    from kcgate.render.diff_formats import render_markdown
    from kcgate.results.model import load_run

    data = Path(__file__).parents[1] / "data" / "diff"
    base, now = load_run(data / "base-attributed.json"), load_run(data / "current-attributed.json")
    base = replace(base, fingerprint=base.fingerprint.with_tracked({"liger-kernel": "0.5.8"}))
    now = replace(now, fingerprint=now.fingerprint.with_tracked({"liger-kernel": "0.5.9"}))
    verdict = _verdict([now], [base])
    text = render_comment(verdict, CTX)
    assert "Versions: liger-kernel 0.5.8 → 0.5.9" in text
    assert "pre-existing: on base 0123456789ab, the same seed fails too" in text
    assert "introduced: on base 0123456789ab, the same seed passes" in text
    check_golden("comment-attributed.md", text)
    check_golden("diff-attributed.md", render_markdown(verdict))
