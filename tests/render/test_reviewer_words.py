"""Every figure and word in the PR comment and a failing case's message explains itself (issue 36).

The fingerprint match is said in words; max ULP is shown only for 16- and 8-bit dtypes, where it is a scale
a reviewer can read (an fp32 SDPA gradient within budget showed 901,644,458 ULP), and the legend says so;
a failing case's two seeds say which is which.
"""

from __future__ import annotations

from kcgate.gate.model import CaseChange, Diff, RunnerDiff
from kcgate.plan import base_seed_for
from kcgate.render.markdown import RenderContext, render_comment
from kcgate.render.violation import render_violation
from kcgate.results.model import CaseResult, Metrics


def _change(dtype: str, ulp: float) -> CaseChange:
    cid = f"k-{dtype}"
    return CaseChange(
        "new-violation", "cpu", f"{cid}/{dtype}/8x8/s0", cid, status="fail", base_status="pass",
        budget_used=3.0, base_budget_used=0.5, blocking=True, dtype=dtype, seed=7, max_ulp=ulp,
        max_abs_err=0.1,
    )  # fmt: skip


def _row(text: str, cid: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith("| ❌ | " + cid))
    return [cell.strip() for cell in line.split("|")[1:-1]]


def test_max_ulp_only_where_it_means_something_and_the_legend_says_so() -> None:
    changes = (_change("float32", 901_644_458.0), _change("bfloat16", 3.0), _change("float16", 12.0))
    text = render_comment(Diff((RunnerDiff("cpu", "abc", "abc", changes),)), RenderContext())
    ulp = 9  # the column: icon, contract, change, runners, dtype, shape, cases, severity, budget, max ULP
    assert _row(text, "k-float32")[ulp] == "–" and "901,644,458" not in text
    assert _row(text, "k-bfloat16")[ulp] == "3.00" and _row(text, "k-float16")[ulp] == "12.00"
    assert "**max ULP**: units in the last place, shown for 16- and 8-bit outputs only" in text


def test_the_fingerprint_match_is_said_in_words() -> None:
    same = RunnerDiff("cpu-a", "0a7f4a48c323", "0a7f4a48c323", (_change("float32", 1.0),))
    other = RunnerDiff("cpu-b", "0a7f4a48c323", "99999999aaaa", (_change("bfloat16", 1.0),))
    text = render_comment(Diff((same, other)), RenderContext())
    assert "verified against" not in text
    assert "verified (fingerprint `0a7f4a48c323`)" in text  # the sentence is said once, in the legend
    assert "unverified: other hardware or software (fingerprint `99999999aaaa` → `0a7f4a48c323`)" in text
    assert (
        "**verified**: the baseline ran on the same device, driver, torch version and numerics settings"
        in text
    )


def test_a_failing_cases_two_seeds_say_which_is_which() -> None:
    cid = "mm/float32/8x8x8/s0"
    case = CaseResult(
        cid, "mm", "C-PRC-01", "matmul", "float32", (8, 8, 8), 3121, "fail", Metrics(budget_used=2.0)
    )
    run_seed = base_seed_for(3121, cid)
    text = render_violation(case, f"kcgate run -c contracts.toml -k '{cid}' --seed {run_seed}")
    assert "case seed 3121 (drew this case's inputs)" in text
    assert f"run seed {run_seed} (what `kcgate run --seed` takes" in text
    assert f"--seed {run_seed}" in text.splitlines()[-1]


def test_the_console_table_shows_max_ulp_for_16_and_8_bit_cases_only() -> None:
    from kcgate.render.console import render_run
    from kcgate.results.model import Fingerprint, RunResult

    cases = [
        CaseResult(f"k/{d}/8/s0", "k", "C-PRC-01", "matmul", d, (8,), 1, "pass", Metrics(0.5, max_ulp=u))
        for d, u in (("float32", 901_644_458.0), ("bfloat16", 3.0))
    ]
    text = render_run(RunResult("cpu", Fingerprint("cpu"), cases))
    assert "901644458" not in text and "max ulp (16/8-bit)" in text
    assert next(ln for ln in text.splitlines() if "k/bfloat16" in ln).split()[4] == "3"
