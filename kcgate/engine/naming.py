"""The diagnosis table: each known mistake, fit and error pattern is one row (its name, the evidence it reads,
the limit of its claim and the test that holds it to that), and ``diagnose`` names a failed case by the first
row whose evidence is found and whose claim limit holds. A precision row states the largest error its effect
gives at the case's dtype and shape and is refused past it: the case then says "exceeds the bound", where, and
why each refused name does not fit (docs/signatures.md#claim-limits). A new bug class is one row and one test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from kcgate.engine import accumulator as A
from kcgate.engine import diagnosis as D
from kcgate.engine import mistakes as M
from kcgate.engine import transforms as T
from kcgate.engine.echo import input_echo_signature
from kcgate.engine.explain import explain
from kcgate.engine.multi import failed_tensor
from kcgate.engine.trial import severity
from kcgate.results.model import Signature
from kcgate.vocab.catalogue import CATALOGUE, MATMUL_LIKE
from kcgate.vocab.causes import GENERIC

NOISE_C = 4.0  # rounding noise: rms error ≤ NOISE_C·√K·u of the output's rms (a generous √K random walk)
BIAS_C = 4.0  # biased rounding: rms error ≤ BIAS_C·K·u (error growing like K, not √K)
U_TF32 = 2.0**-11  # an fp32 matmul may round its operands to tf32 without saying so
# Independent draws, told from a structured field by three statistics, each allowed its sampling spread on
# n elements (the thresholds hold a gaussian field of 64 elements on five seeds of the planted corpus):
STRUCTURE_CV = 3.0  # energy spread of rows (or chunks) within this many times an iid field's, plus 0.1
STRUCTURE_KURTOSIS = 6.0  # kurtosis ≤ 3 + this many standard errors √(24/n): a few hot places are far heavier
ROW_BIAS_T = 8.0  # noise is unbiased: no row's relative error sign(ref)·e/|ref| has a t statistic past this
STRUCTURE_LAG = 5.0  # |lag-1 correlation| ≤ max(0.3, this many standard errors 1/√pairs)


@dataclass(frozen=True)
class Evidence:
    """What every row reads: the case's context, its worst trial (the one that decides) and all its trials."""

    ctx: Any
    worst: Any
    ts: tuple[Any, ...]

    @property
    def cmp(self) -> Any:
        return self.worst.cmp

    @cached_property
    def u(self) -> float:
        """The widest unit roundoff the case's dtypes allow (inputs, output, accumulator; tf32 for an fp32
        matmul): the largest rounding a correct-in-form kernel makes at each step."""
        ba = self.ctx.grad_bound_args() if self.worst.grad else self.ctx.bound_args()
        u = max(ba.u_in, ba.u_out, ba.u_acc)
        return max(u, U_TF32) if self.ctx.op.name in MATMUL_LIKE else u

    @cached_property
    def k(self) -> int:
        """The longest reduction a rounding can accumulate over in the deciding tensor."""
        shape = self.worst.shape
        ks = [int(self.ctx.op.reduction_len(shape))] if shape else [1]
        grad = CATALOGUE[self.ctx.op.name].grad_reduction if self.ctx.op.name in CATALOGUE else {}
        if self.worst.grad in grad:
            ks.append(int(shape[grad[self.worst.grad]]))
        return max(1, *ks)

    @cached_property
    def rel(self) -> float:
        return relative_rms(self.cmp)


Find = Callable[[Evidence], "Signature | None"]
Refuse = Callable[[Evidence, Signature], "str | None"]


@dataclass(frozen=True)
class Rule:
    """One row: ``find`` returns its signature where its evidence is there; ``refuse`` (precision rows) says
    why the error is past what its effect can produce, or None where the claim holds."""

    name: str
    find: Find
    evidence: str
    limit: str
    test: str  # the test that holds the row to its evidence and its limit: path::function
    refuse: Refuse | None = None


# ---- claim limits --------------------------------------------------------------------------------------


def relative_rms(cmp: Any) -> float:
    """rms error over the rms of the oracle's values (finite elements)."""
    ok = cmp.signed.isfinite() & cmp.ref.isfinite()
    if not bool(ok.any()):
        return math.inf
    r = _rms(cmp.ref[ok].to(torch.float64))
    return _rms(cmp.signed[ok].to(torch.float64)) / r if r > 0 else math.inf


def _rms(x: torch.Tensor) -> float:
    return float((x**2).mean().sqrt()) if x.numel() else 0.0


def _fmt(u: float) -> str:
    bits = round(-math.log2(u))
    return {24: "fp32", 11: "fp16/tf32", 8: "bf16", 4: "fp8", 53: "fp64"}.get(bits, f"{bits}-bit")


def structure(e: torch.Tensor) -> str | None:
    """Why an error field is not independent noise (its energy piles on some rows or chunks, a heavy tail,
    neighbours alike), or None where it looks like independent draws."""
    e = e.to(torch.float64)
    if not bool(e.isfinite().all()) or e.numel() < 32:
        return "too few finite errors to show they are independent"
    flat = e.flatten()
    m2 = float((flat**2).mean())
    if m2 == 0:
        return None
    kurt = float((flat**4).mean()) / m2**2
    if kurt > 3 + STRUCTURE_KURTOSIS * math.sqrt(24 / flat.numel()):
        return f"a heavy tail (kurtosis {kurt:.1f}, independent noise ≈ 3): the error sits on a few places"
    rows = e.reshape(-1, e.shape[-1]) if e.dim() >= 2 else flat[: flat.numel() // 8 * 8].reshape(8, -1)
    tests = [("rows", rows.pow(2).mean(1), rows.shape[1]), ("columns", rows.pow(2).mean(0), rows.shape[0])]
    if rows.shape[0] < 4 and rows.shape[1] >= 64:  # a boundary shape's few rows: 8 chunks of each row instead
        m = rows.shape[1] // 8
        tests.append(("chunks of its rows", rows[:, : 8 * m].reshape(-1, m).pow(2).mean(1), m))
    for what, energy, n in tests:
        if energy.numel() < 4 or n < 2:
            continue
        cv = float(energy.std() / energy.mean())
        if cv > STRUCTURE_CV * math.sqrt(2 / n) + 0.1:
            return f"its energy differs across {what} (spread {cv:.2f}, independent noise ≈ {math.sqrt(2 / n):.2f})"
    lag = float((rows[:, 1:] * rows[:, :-1]).mean()) / m2 if rows.shape[1] > 1 else 0.0
    pairs = rows.shape[0] * (rows.shape[1] - 1)
    if pairs and abs(lag) > max(0.3, STRUCTURE_LAG / math.sqrt(pairs)):
        return f"neighbouring errors alike (correlation {lag:.2f}): one smooth field"
    return None


FOLLOWS_INPUT = (
    0.5  # mean |correlation| per row of the error with an input of its shape: independent draws ≈ 0
)


def follows_input(ev: Evidence) -> str | None:
    """Why an error field is no independent noise though its statistics look it: each row of it follows an
    input of the same shape (a norm backward's dx off by c_row·x̂ on a boundary shape's three rows)."""
    e = ev.cmp.signed.to(torch.float64)
    if e.dim() < 1 or e.shape[-1] < 16 or not bool(e.isfinite().all()):
        return None
    rows = e.reshape(-1, e.shape[-1])
    for i, x in enumerate(ev.worst.inputs):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.shape != e.shape:
            continue
        xs = x.detach().to(torch.float64).reshape(rows.shape)
        a, b = rows - rows.mean(1, keepdim=True), xs - xs.mean(1, keepdim=True)
        den = (a.pow(2).sum(1) * b.pow(2).sum(1)).sqrt()
        ok = den > 0
        if not bool(ok.any()):
            continue
        corr = float(((a * b).sum(1)[ok] / den[ok]).abs().mean())
        if corr > FOLLOWS_INPUT:
            name = ev.ctx.op.input_name(i)
            return f"each row of the error follows input {name} (mean |correlation| {corr:.2f} per row)"
    return None


def refuse_noise(ev: Evidence, s: Signature) -> str | None:
    """Rounding noise gives at most NOISE_C·√K·u relative rms; past that only independent draws are noise, and
    never past D.ROUNDING_SCALE (fp8's unit roundoff), which no rounding of any format gives."""
    biased = row_bias(ev.cmp.signed, ev.cmp.ref)
    if biased:
        return f"noise ({biased})"
    if ev.rel > D.ROUNDING_SCALE:  # first: a long reduction's √K cap can pass it (bf16 over 256 terms: 0.25)
        return (
            f"noise (rms error {ev.rel:.3g} of the output's, past the {D.ROUNDING_SCALE:.3g} that any rounding, "
            "even fp8's, gives)"
        )
    cap = NOISE_C * math.sqrt(ev.k) * ev.u
    if ev.rel <= cap:
        return None
    why = structure(ev.cmp.signed) or follows_input(ev)
    if why is None:
        return None
    return (
        f"noise (rms error {ev.rel:.3g} of the output's, past the {cap:.2g} that rounding at {_fmt(ev.u)} over "
        f"{ev.k} terms gives, and structured: {why})"
    )


def row_bias(signed: torch.Tensor, ref: torch.Tensor) -> str | None:
    """Why the errors are no unbiased noise: within some row, the relative errors e/ref sit off zero (a robust
    t statistic past ROW_BIAS_T over its nonzero references): one factor per row, as a renormaliser over the
    wrong set of tokens gives (llama.cpp's top-p one token short), which a whole-tensor bias test misses when
    rows differ."""
    e, r = signed.to(torch.float64), ref.to(torch.float64)
    if e.dim() < 1 or e.shape != r.shape or e.shape[-1] < 16:
        return None
    d = (e / r).reshape(-1, e.shape[-1])
    ok = (r.reshape(d.shape) != 0) & d.isfinite()
    n = ok.sum(1)
    if not bool((n >= 16).any()):
        return None
    # robust, per row at once: the median over its spread (1.4826·MAD), so one dropped element (relative error
    # −1) cannot hide a row's constant factor on the rest
    d = d.where(ok, torch.nan)
    med = d.nanmedian(1).values
    mad = 1.4826 * (d - med[:, None]).abs().nanmedian(1).values
    t = med.abs() / (
        mad / n.clamp(min=1).sqrt()
    )  # inf where mad is 0 and the median is not; NaN where both are
    t = t.where((n >= 16) & ~t.isnan(), 0.0)
    worst = float(t.max())
    if worst <= ROW_BIAS_T:
        return None
    return f"a row's relative errors sit off zero (t statistic {worst:.3g}, past {ROW_BIAS_T:g}): one factor per row"


def refuse_bias(ev: Evidence, s: Signature) -> str | None:
    """Biased rounding gives at most BIAS_C·K·u relative rms (and never past fp8's unit roundoff)."""
    cap = min(D.ROUNDING_SCALE, BIAS_C * ev.k * ev.u)
    if ev.rel <= cap:
        return None
    return f"biased rounding (rms error {ev.rel:.3g} of the output's, past the {cap:.2g} that a biased rounding at {_fmt(ev.u)} over {ev.k} terms gives)"


def refuse_row_scale(ev: Evidence, s: Signature) -> str | None:
    """A row statistic rounded (even to fp8) moves its row by at most ROW_FACTOR_MIN."""
    f = float(dict(s.evidence).get("max_row_factor", 0.0))
    if f <= T.ROW_FACTOR_MIN:
        return None
    return f"row-scale (rows off by up to {f:.3g}, past the {T.ROW_FACTOR_MIN:.3g} any rounding of a row statistic gives)"


def refuse_tail(ev: Evidence, s: Signature) -> str | None:
    """A mishandled tail tile is the minority of the row, after at least two right columns."""
    ev_ = dict(s.evidence)
    tail, n = float(ev_.get("tail_columns", 0.0)), float(ev_.get("columns", 0.0))
    if tail <= n / 2 and n - tail >= 2:
        return None
    return f"tail-pattern (the last {tail:.0f} of {n:.0f} columns are most of the row, not a tail tile)"


# ---- the table ----------------------------------------------------------------------------------------


def _fit_row(row: T.FitRow) -> Find:
    return lambda ev: T.run_fit(row, ev.ctx, ev.worst)


def _operand(ev: Evidence) -> Signature | None:
    return A._operand(ev.ctx, ev.worst)


def _underflow(ev: Evidence) -> Signature | None:
    if ev.ctx.op.name in D.EXP_FAMILIES or not D.underflow_inputs(ev.worst.inputs):
        return None  # an exp family's advice (subtract the row max) covers its underflow too
    return D.underflow_signature(ev.worst.out, ev.cmp.ref)


def _nan(ev: Evidence) -> Signature | None:
    exp = ev.ctx.op.name in D.EXP_FAMILIES or D._large_inputs(ev.worst.inputs)
    return D.nan_signature(ev.worst.out, ev.cmp.ref, exp, D.overflow_where(ev.ctx.op.name, ev.worst.grad))


def _in_gradient(ev: Evidence, s: Signature | None) -> Signature | None:
    """A pattern found in a gradient says so ("added to the gradient of x", not "to the output")."""
    if s is None or not ev.worst.grad:
        return s
    return Signature(s.cause, s.summary.replace("the output", f"the gradient of {ev.worst.grad}"), s.evidence)


_DIAG = "tests/engine/test_diagnosis.py"
_NAMING = "tests/engine/test_naming.py"
_CORPUS = "tests/test_signature_corpus.py::test_one_of_each_kind_is_named_alike_on_five_seeds"

RULES: tuple[Rule, ...] = (
    Rule(
        "known mistake, non-finite",
        lambda ev: M.nonfinite_semantics_signature(ev.ctx, ev.worst),
        "NaN/Inf exactly where a known mistake's oracle has them",
        "the rest within that mistake's bound; NaN in at most half the output",
        "tests/engine/test_heldout_signatures.py::test_a_mask_hiding_its_own_key_is_the_mask_mistake_not_an_overflow",
    ),
    Rule(
        "underflow",
        _underflow,
        "NaN/Inf where the oracle is finite, on inputs below exp's range (x < −87) and none above 80",
        "not in an exp family (its overflow advice, subtract the row max, covers the underflow); no NaN swallowed",
        "tests/engine/test_loss_probes.py::test_a_jsd_that_underflows_is_named_underflow_not_overflow",
    ),
    Rule(
        "non-finite",
        _nan,
        "NaN/Inf where the oracle is finite, or swallowed",
        "overflow only for exp families or inputs past exp's range",
        f"{_DIAG}::test_overflow_nan_advice_fits_where_the_nan_is",
    ),
    Rule(
        "input returned",
        lambda ev: input_echo_signature(ev.ctx, ev.worst),
        "a custom op's output equal to one of its inputs of the same shape",
        "the output's own bound against that input, every element",
        "tests/engine/test_echo.py::test_a_stale_residual_is_named_on_its_output",
    ),
    Rule(
        "known mistake",
        lambda ev: M.semantics_signature(ev.ctx, ev.worst),
        "the output (or deciding gradient) within a known mistake's own bound of that mistake's oracle",
        "the mistake's bound, every element",
        f"{_NAMING}::test_known_mistakes_name_the_shipped_bugs",
    ),
    Rule(
        "known rounding mistake",
        lambda ev: M.reproduced(ev.ctx, ev.ts),
        "the output equals a rounding mistake's oracle, rounded to its dtype, where the contract's differs",
        "on every trial: the contract's rounded oracle differs in ≥ 5% (and 32) elements, the mistake's in ≤ 1/4 of those",
        f"{_NAMING}::test_a_rounding_mistake_reproduced_bit_for_bit_fails_a_passing_case",
    ),
    *(Rule(f"fit: {row.fit.__name__}", _fit_row(row), row.evidence, row.limit, row.test) for row in T.FITS),
    Rule(
        "tail tile",
        lambda ev: D.tail_signature(ev.cmp.ratio, dense=True),
        "errors dense in a suffix of the last dimension",
        "the suffix at most half the row, after at least two right columns",
        f"{_NAMING}::test_a_tail_that_is_most_of_the_row_is_no_tail_tile",
        refuse_tail,
    ),
    Rule(
        "sparse",
        lambda ev: D.sparse_signature(ev.cmp),
        "a few elements far past the bound",
        "at most 1/200 of the elements, 5× the rest's 99th percentile",
        _CORPUS,
    ),
    Rule(
        "offset",
        lambda ev: _in_gradient(ev, D.offset_signature(ev.cmp.signed, ev.cmp.ref)),
        "the error a constant, per row or per block",
        "90% of the error energy in the means",
        _CORPUS,
    ),
    Rule(
        "garbage",
        lambda ev: D.garbage_signature(ev.worst.out, ev.cmp.ref, ev.cmp),
        "errors as large as the result, uncorrelated with it",
        "none: it claims no mechanism",
        _CORPUS,
    ),
    Rule(
        "operand rounding",
        _operand,
        "the oracle on operands rounded to 11 or 8 bits reproduces the output",
        "the rounded oracle's error a quarter of the exact one's",
        "tests/test_signature_corpus.py::test_accuracy_and_the_doc",
    ),
    Rule(
        "accumulator width",
        lambda ev: A._accumulator(ev.ctx, ev.ts),
        "a K sweep whose error grows like one rounding interval's model",
        "≥ 3 lengths, residual ≤ 0.35, ≥ 3 bits, 3 bits under the declared",
        f"{_DIAG}::test_a_sequential_bf16_sum_is_bf16_not_fp8",
    ),
    Rule(
        "accumulator width, traced",
        lambda ev: A.traced_accumulator(ev.ctx, ev.worst),
        "a custom op's reference with its traced sums run at fp16/bf16 errs as the kernel does",
        "the excess over the final rounding within 2^0.75 of a width's emulation, 4× the declared width's; "
        "≥ 4 rows, not one factor of one sign per row, kurtosis and span as the emulation's; a gradient only "
        "of a broadcast input",
        "tests/engine/test_accumulator.py::test_custom_norms_summed_in_fp16_are_named_low_precision_accumulator",
    ),
    Rule(
        "row scale",
        lambda ev: D.row_scale_signature(ev.cmp.signed, ev.cmp.ref),
        "err = δ_row·ref",
        "each row off by at most 1/16 (any rounding of a row statistic)",
        f"{_NAMING}::test_precision_names_are_refused_past_their_limit",
        refuse_row_scale,
    ),
    Rule(
        "biased rounding",
        lambda ev: D.bias_signature(ev.cmp.signed, ev.cmp.ref),
        "sign(ref)·err has a t statistic past 8",
        "rms error ≤ 4·K·u (u: the case's widest rounding), never past 1/16",
        f"{_NAMING}::test_precision_names_are_refused_past_their_limit",
        refuse_bias,
    ),
    Rule(
        "noise",
        lambda ev: D.noise_signature(ev.cmp),
        "diffuse, unbiased errors over ≥ 2% of elements",
        "rms error ≤ 4·√K·u, or past it errors that look like independent draws, never past 1/16",
        f"{_NAMING}::test_precision_names_are_refused_past_their_limit",
        refuse_noise,
    ),
)


def diagnose(ctx: Any, ts: Sequence[Any]) -> Signature | None:
    """Name a failed case: the first row whose evidence is found and whose claim limit holds, else "exceeds
    the bound" with where and the names refused (integrity issues are named before, by the class check)."""
    worst = max((t for t in ts if t.cmp is not None), key=severity, default=None)
    if worst is None:
        return None
    ev = Evidence(ctx, worst, tuple(ts))
    refused: list[str] = []
    for rule in RULES:
        s = rule.find(ev)
        if s is None:
            continue
        why = rule.refuse(ev, s) if rule.refuse is not None else None
        if why is None:
            return s if s.cause not in GENERIC else mutated_reference(ev, s)
        refused.append(why)
    return mutated_reference(ev, exceeds_bound(ev, refused))


def mutated_reference(ev: Evidence, s: Signature) -> Signature:
    """A failure no row explains, explained by one mutation of the reference where one reproduces the
    output within the allowance (kcgate.engine.explain); else ``s``, saying the search found nothing."""
    search = explain(ev.ctx, ev.worst)
    if search is None:
        return s
    if search.found is None:
        bounded = f", the first {search.tried} tried" if search.stopped else f" ({search.tried} tried)"
        return D.sig(
            s.cause,
            f"{s.summary}; no single mutation of the reference reproduces it{bounded}",
            **dict(s.evidence),
        )
    m = search.found
    return D.sig(
        "wrong-semantics",
        f"matches the reference with {m.change} ({m.rule}), at {m.where} (budget {search.ratio:.3g} against "
        f"that mutant, its rms error {search.share:.2g} of the one against the reference); without it: "
        f"{s.summary}",
        mistake=f"{m.change} at {m.where}",
        budget_there=round(search.ratio, 4),
    )


def exceeds_bound(ev: Evidence, refused: Sequence[str] = ()) -> Signature:
    """No row fits: the error's size, where it sits and the names refused past their limit."""
    worst, cmp = ev.worst, ev.cmp
    b = worst.metrics.budget_used
    over, n = int((cmp.ratio > 1).sum()), cmp.ratio.numel()
    tiny = n < D.NOISE_MIN
    every = (
        f"; {'every element' if over == n else f'{over} of the {n} elements'} of a tiny output ({n}) wrong, "
        "too few to fit a pattern"
        if tiny
        else ""
    )
    what = failed_tensor(worst)
    where = "" if tiny and over == n else f"; in {what}: {where_over(cmp.ratio)}"
    beyond = "; not " + "; not ".join(refused) if refused else ""
    return D.sig(
        "exceeds-bound",
        f"error {'inf' if b is None else f'{b:.3g}'}× the allowed bound, no specific pattern{every}{where}"
        f" (rms error {ev.rel:.3g} of the output's){beyond}",
        budget_used=b if b is not None else "inf",
        relative_rms=ev.rel if math.isfinite(ev.rel) else "inf",
    )


def where_over(ratio: torch.Tensor) -> str:
    """Where the elements over the bound sit: "417 of 8192 elements over the bound, rows 31-127 (of 128), all
    columns; worst at [0, 1, 64, 5]"."""
    over = ratio > 1
    text = f"{int(over.sum())} of {ratio.numel()} elements over the bound"
    if ratio.dim() >= 2:
        rows = over.reshape(-1, ratio.shape[-2], ratio.shape[-1]).any(0).any(-1)
        text += f", {_runs(rows, 'rows')}, {_runs(over.reshape(-1, ratio.shape[-1]).any(0), 'columns')}"
    elif ratio.dim() == 1:
        text += f", {_runs(over, 'positions')}"
    if ratio.dim() == 0:
        return text
    flat = int(ratio.nan_to_num(math.inf).flatten().argmax())
    return f"{text}; worst at {[int(i) for i in torch.unravel_index(torch.tensor(flat), ratio.shape)]}"


def _runs(mask: torch.Tensor, what: str) -> str:
    idx = mask.nonzero().flatten().tolist()
    if not idx or len(idx) == mask.numel():
        return f"{'no' if not idx else 'all'} {what}"
    if idx[-1] - idx[0] + 1 == len(idx):
        return f"{what} {idx[0]}-{idx[-1]} (of {mask.numel()})"
    head = ", ".join(map(str, idx[:6])) + (" ..." if len(idx) > 6 else "")
    return f"{len(idx)} of {mask.numel()} {what} ({head})"
