"""The sensitivity gate's verdict (issue 46): it fails a case only on evidence that is significant over
independent rows, beyond the correct implementations' spread and consistent across trials; below that the
case passes with a limitation note that ``kcgate diff`` shows as drift; a comparison of errors that leave
under 4 correct bits is inconclusive."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest
import torch

from kcgate.contracts.policy import Policy
from kcgate.engine import excess_line, formulations, sensitivity, sequential
from kcgate.gate.diff import diff_runs
from kcgate.numerics.ops import OPS
from kcgate.results.model import CaseResult, Fingerprint, Metrics, RunResult
from kcgate.results.records import is_pass_note


def _excess(rms: float, mx: float = 0.5, ref_rms: float = 1e-7, out_rms: float = 1.0) -> sensitivity.Excess:
    return sensitivity.Excess(rms, mx, 1.5, 1e-7, ref_rms, out_rms=out_rms)


def test_three_rows_are_three_observations_not_three_thousand() -> None:
    """A textbook layer norm's error on 3 rows of 1021 is one shared shift per row: per-row ratios 0.3x,
    1x and 3x pool to 1.8x, whose lower bound over 3 rows is far below the factor (t = 14.1 on 2 degrees of
    freedom) and its upper bound far above: undecided."""
    a, b = np.array([0.09, 1.0, 9.0]) * 1021, np.full(3, 1021.0)
    ev = excess_line.ratio_bound(a, b)
    assert ev.rms_ratio == pytest.approx(math.sqrt(10.09 / 3))
    assert ev.rms_lower < 0.1 and ev.rms_upper > 10 and ev.clusters == 3


def test_noise_at_2x_over_64_rows_is_significant() -> None:
    """Torch + noise at 2x its error: each row's ratio² near 5 (√5 = 2.24x); over 64 rows the lower bound
    stays far above the factor."""
    rng = np.random.default_rng(0)
    b = rng.chisquare(1024, 64)
    a = 5 * rng.chisquare(1024, 64)
    ev = excess_line.ratio_bound(a, b)
    assert ev.rms_ratio == pytest.approx(2.24, abs=0.05)
    assert ev.rms_lower > 2.0


def test_t_quantiles_are_conservative_between_rows() -> None:
    assert sequential.t_look(2) == pytest.approx(14.09)
    assert sequential.t_look(11) == sequential.t_look(10)  # between rows: the larger t
    assert sequential.t_look(10**6) == sequential.Z_LOOK
    assert sequential.t_look(0) == math.inf


def test_the_line() -> None:
    significant = excess_line.Evidence(2.2, 1.9, 128, 2.5)
    shaky = excess_line.Evidence(1.6, 0.9, 6, 2.6)
    within = excess_line.Evidence(1.1, 0.9, 128, 1.3)
    decide = excess_line.decide
    fail, ok, more = sequential.FAIL, sequential.PASS, sequential.MORE
    assert decide(_excess(2.2), [_excess(2.2), _excess(2.1)], significant, False) == (fail, "")
    # significant over the pooled rows: one trial under the factor no longer passes it
    assert decide(_excess(2.2), [_excess(2.2), _excess(1.2)], significant, False) == (fail, "")
    # the interval holds the line: more trials, and at the last look inconclusive
    assert decide(_excess(2.1), [_excess(2.1)], shaky, False) == (more, "")
    verdict, note = decide(_excess(2.1), [_excess(2.1)], shaky, True)
    assert verdict == ok and note.startswith("inconclusive: ") and "from 6 independent rows" in note
    # decided within the line: a pass with no note, whatever one trial showed
    assert decide(_excess(1.6), [_excess(1.6), _excess(1.0)], within, False) == (ok, "")
    # a few corrupted elements: the max statistic's crossings, by Wald's SPRT (one of one is not enough)
    assert decide(_excess(1.0, mx=3.0), [_excess(1.0, mx=3.0)], within, False) == (more, "")
    both = [_excess(1.0, mx=3.0), _excess(1.0, mx=2.5)]
    assert decide(_excess(1.0, mx=3.0), both, within, False) == (fail, "")
    # the correct implementations keep under 4 bits: inconclusive, never fail
    bad = _excess(5.0, mx=5.0, ref_rms=0.1, out_rms=1.0)
    assert decide(bad, [bad], significant, False)[1].startswith("inconclusive: ")


def test_a_limitation_passes_and_diff_shows_it_as_drift() -> None:
    fp = Fingerprint(backend="cpu", device="x", torch="2.13.0")

    def run(message: str) -> RunResult:
        m = Metrics(budget_used=0.01)
        case = CaseResult(
            "c1", "c", "C-PRC-01", "layernorm", "float32", (3, 1021), 0, "pass", m, None, message
        )
        return RunResult("cpu", fp, (case,))

    note = "limitation: forward output: error 2.07x a correct implementation's on the worst trial"
    assert is_pass_note("pass", note) and not is_pass_note("fail", note)
    change = diff_runs(run(""), run(note), "cpu", Policy(), dt.date(2026, 12, 1)).changes[0]
    assert (change.category, change.blocking, change.message) == ("budget-drift", False, note)
    same = diff_runs(run(""), run(""), "cpu", Policy(), dt.date(2026, 12, 1)).changes[0]
    assert same.category == "unchanged"


def test_a_formulation_outside_the_bound_is_no_reference() -> None:
    """The rope formulation is NeoX's: under the GPT-J layout it computes another function, and an
    alternative counts only where it is within the contract's bound."""
    op = OPS["rope"].configure({"cos_sin": False, "layout": "gptj"})  # type: ignore[misc]
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 16, 8, generator=g), torch.randn(1, 1, 16, 8, generator=g)
    y = op.oracle(q.double(), k.double())
    alt = dict(formulations.alternatives(op, (q, k), {"base": 10000.0}))
    (out,) = alt.values()
    e = (out.double() - y).abs()
    allowed = op.bound((q.double(), k.double()), y, sensitivity.BoundArgs(2.0**-24, 2.0**-24, 8.0, 2.0**-24))
    assert not sensitivity._within(e.numpy(), allowed.numpy(), y.numpy())
    neox = OPS["rope"].configure({"cos_sin": False})  # type: ignore[misc]
    y2 = neox.oracle(q.double(), k.double())
    out2 = dict(formulations.alternatives(neox, (q, k), {"base": 10000.0}))
    e2 = (next(iter(out2.values())).double() - y2).abs()
    allowed2 = neox.bound(
        (q.double(), k.double()), y2, sensitivity.BoundArgs(2.0**-24, 2.0**-24, 8.0, 2.0**-24)
    )
    assert sensitivity._within(e2.numpy(), allowed2.numpy(), y2.numpy())
