"""Known mistakes as evidence: a failed case's output (or deciding gradient) held to each of its family's
known mistakes (``OpFamily.mistakes``, ``grad_mistakes``, ``variants``); the rows of engine/naming.py and the
excess gate's naming (kcgate.engine.checks) read them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import torch

from kcgate.engine.backward import reference_grads
from kcgate.engine.diagnosis import sig
from kcgate.numerics.ops.base import upcast
from kcgate.results.model import Signature


def semantics_signature(ctx: Any, trial: Any, nonfinite: bool = False) -> Signature | None:
    """The forward output, or the gradient that decides the trial, within the bound of one of the family's
    known mistakes (``OpFamily.mistakes``): "matches the op with the causal mask dropped". ``nonfinite``:
    an element NaN (or the same infinity) in both the output and the mistake's oracle matches too."""
    if trial.out is None:
        return None
    if trial.grad:
        return grad_semantics_signature(ctx, trial, nonfinite)
    if getattr(ctx.op, "mistakes", None) is None:
        return None
    if ctx.contract.tolerance.method not in ("error-bound", "relative"):
        return None  # the allowance must be an absolute error to hold another oracle to it
    up = upcast(trial.inputs)
    out = trial.out.detach().to(torch.float64)
    for what, family in ctx.op.mistakes():
        with torch.no_grad():
            alt = family.oracle(*up).to(torch.float64)
            allowed = family.bound(up, alt, ctx.bound_args())
        if alt.shape != out.shape:
            continue
        there = budget_against(out, alt, allowed, nonfinite)
        if there <= 1:
            return sig(
                "wrong-semantics",
                f"matches the op with {what} (budget {there:.2g} against it){_alike(out, trial.cmp, nonfinite)}",
                mistake=what,
                budget_there=round(there, 4),
            )
    return None


def grad_semantics_signature(ctx: Any, trial: Any, nonfinite: bool = False) -> Signature | None:
    """The deciding gradient within the gradient bound of a known mistake's own gradient (fp64 autograd
    through the mistaken oracle, the same dY): "the gradient of logits matches the op with the mean over
    every row, ignored ones included". The family's known mistakes, then its known wrong backwards
    (``OpFamily.grad_mistakes``: the forward right, the gradient formula wrong)."""
    if trial.dy is None or ctx.contract.tolerance.method == "abs-rel":
        return None
    idx = [i for i in range(len(trial.inputs)) if ctx.op.input_name(i) == trial.grad]
    if len(idx) != 1:
        return None
    i = idx[0]
    out = trial.out.detach().to(torch.float64)
    known = [f() for f in (getattr(ctx.op, "mistakes", None), getattr(ctx.op, "grad_mistakes", None)) if f]
    for what, family in (m for group in known for m in group):
        if family.grad_bound is None:
            continue
        try:
            up, refs = reference_grads(SimpleNamespace(op=family), trial.inputs, trial.dy)  # type: ignore[arg-type]
            with torch.no_grad():
                allowed = family.grad_bound(up, trial.dy.to(torch.float64), refs, ctx.grad_bound_args())[i]
        except Exception:  # a mistake whose oracle has no gradient here: not this one
            continue
        if allowed is None or refs[i].shape != out.shape:
            continue
        there = budget_against(out, refs[i], allowed, nonfinite)
        if there <= 1:
            return sig(
                "wrong-semantics",
                f"the gradient of {trial.grad} matches the op with {what} (budget {there:.2g} against it)"
                f"{_alike(out, trial.cmp, nonfinite)}",
                mistake=what,
                budget_there=round(there, 4),
            )
    return None


def budget_against(out: torch.Tensor, alt: torch.Tensor, allowed: torch.Tensor, nonfinite: bool) -> float:
    """max |out − alt|/allowed (NaN: infinite). ``nonfinite``: an element NaN in both, or the same infinity in
    both, matches; but only where the finite elements are most of the output (an output that is NaN nearly
    everywhere matches any mistake that is, and says nothing)."""
    ratio = ((out - alt).abs() / allowed.clamp_min(1e-300)).nan_to_num(nan=math.inf)
    if nonfinite:
        alike = (out.isnan() & alt.isnan()) | (out.isinf() & (out == alt))
        if int(alike.sum()) * 2 > out.numel():
            return math.inf
        ratio = ratio.masked_fill(alike, 0.0)
    return float(ratio.max()) if ratio.numel() else math.inf


def nonfinite_semantics_signature(ctx: Any, trial: Any) -> Signature | None:
    """NaN/Inf where the contract's oracle is finite that one of the family's known mistakes gives in exactly
    those elements, the rest within that mistake's bound: the mistake, not an overflow (a causal mask that
    hides each query's own key leaves the first query no key, and a softmax over no key is NaN)."""
    if trial.out is None or trial.cmp is None:
        return None
    o, ref = trial.out.detach().to(torch.float64), trial.cmp.ref.to(torch.float64)
    if o.shape != ref.shape or not bool((~o.isfinite() & ref.isfinite()).any()):
        return None
    if bool((o.isfinite() & ~ref.isfinite()).any()):
        return None  # NaN swallowed as well: nan_signature names that
    return semantics_signature(ctx, trial, nonfinite=True)


def _alike(out: torch.Tensor, cmp: Any, nonfinite: bool) -> str:
    """The evidence of a non-finite match, in words: "; row 0 of each of the 8 (2×4) leading slices is NaN as
    in that mistake's output, where the contract's oracle is finite"."""
    if not nonfinite or cmp is None:
        return ""
    bad = ~out.isfinite() & cmp.ref.to(torch.float64).isfinite()
    what = "NaN" if bool(out[bad].isnan().all()) else "NaN/Inf"
    where = f"{int(bad.sum())} element(s) are {what}"
    if out.dim() >= 2 and bool((bad.all(-1) == bad.any(-1)).all()):  # whole rows
        rows = bad.all(-1).reshape(-1, out.shape[-2])
        idx = rows.any(0).nonzero().flatten().tolist()
        which = ", ".join(map(str, idx[:5])) + (" ..." if len(idx) > 5 else "")
        which, verb = (f"row {which}", "is") if len(idx) == 1 else (f"rows {which}", "are")
        lead = "×".join(map(str, out.shape[:-2]))
        if lead and bool((rows == rows[0]).all()):  # the same rows in every leading slice (batch, head)
            where = f"{which} of each of the {rows.shape[0]} ({lead}) leading slices {verb} {what}"
        else:
            where = f"{int(rows.sum())} whole row(s) ({which}) are {what}"
    return f"; {where} as in that mistake's output, where the contract's oracle is finite"


# A within-the-bound failure is named as a known mistake when the kernel's rms error against that mistake's
# oracle is at most this share of its error against the contract's: the error all but vanishes (an eps
# mismatch in fp32 drops it 30-100x; a real fault keeps it, as no mistaken oracle reproduces it).
EXPLAINED_SHARE = 0.25


# Where the gate measured the kernel's excess, a mistake also explains it when the error against its oracle is
# within the gate's allowance of a correct kernel's (a bf16 case whose mistake is 4x the rounding: share ≈ 0.26);
# never past half the error against the contract's, so a mistake must at least halve it.
GATE_SHARE_MAX = 0.5


def explain_excess(ctx: Any, ts: Sequence[Any], gate_share: float = 0.0) -> Signature | None:
    """An excess-error failure that one of the family's variants or known mistakes explains: "eps = 1e-6
    instead of the contract's 1e-5", "eps added outside the square root". The bound cannot tell these apart
    (they are within it), so the test is closer: the error against the mistaken oracle, rerun on the same
    inputs, all but vanishes (``EXPLAINED_SHARE``), or falls to what the gate allows a correct kernel
    (``gate_share``: its allowed factor over the kernel's measured rms ratio, at most ``GATE_SHARE_MAX``:
    against that mistake the kernel would pass the gate); the best-fitting mistake is named."""
    limit = max(EXPLAINED_SHARE, min(GATE_SHARE_MAX, gate_share))
    known = [
        f() for f in (getattr(ctx.op, "variants", None), getattr(ctx.op, "mistakes", None)) if f is not None
    ]
    fwd = [t for t in ts if not t.grad and t.out is not None and t.cmp is not None]
    if not known or not fwd:
        return None
    best: tuple[float, str] | None = None
    for what, family in (m for group in known for m in group):
        shares = []
        for t in fwd:
            up = upcast(t.inputs)
            with torch.no_grad():
                alt = family.oracle(*up).to(torch.float64)
            if alt.shape != t.out.shape:
                break
            out = t.out.detach().to(torch.float64)
            own = _rms_finite(out - t.cmp.ref.to(torch.float64))
            shares.append(_rms_finite(out - alt) / own if own > 0 else math.inf)
        else:
            share = max(shares, default=math.inf)
            if share <= limit and (best is None or share < best[0]):
                best = (share, what)
    if best is None:
        return None
    return sig(
        "wrong-semantics",
        f"matches the op with {best[1]} (its rms error against that falls to {best[0]:.2g} of the error "
        "against the contract's oracle)",
        mistake=best[1],
        error_share=round(best[0], 4),
    )


def _rms_finite(e: torch.Tensor) -> float:
    e = e[e.isfinite()]
    return float(e.pow(2).mean().sqrt()) if e.numel() else math.inf


# A known rounding mistake (``OpFamily.rounding_mistakes``) names a passing case when, on every forward trial,
# the kernel's output differs from that mistake's oracle rounded to the output dtype in at most this share of
# the elements where it differs from the contract's oracle rounded alike ...
REPRODUCED_SHARE = 0.25
# ... and those differ in at least this share of the output, and this many elements: a correct kernel differs
# from the contract's oracle, correctly rounded, only where the exact value lies within its own error of a
# rounding boundary (about 1e-4 of a 16-bit output, measured), a cast moved in about a quarter of them
REPRODUCED_MIN_SHARE = 0.05
REPRODUCED_MIN_ELEMENTS = 32


def reproduced(ctx: Any, ts: Sequence[Any], every: bool = False) -> Signature | None:
    """A passing case whose output one of the family's rounding mistakes reproduces bit for bit where the
    contract's oracle does not: x̂ cast to bf16 before an rmsnorm's weight multiply, declared gemma's all-fp32
    casting. Its error is one rounding, within any bound and often within the sensitivity gate's factor, but
    the kernel's output equals that mistake's rounded output in (nearly) every element, on every trial, where
    it differs from the contract's in a quarter of them: the case fails, named by that mistake. ``every``: the
    family's other known mistakes and variants too (a case the sensitivity gate failed: the name, not the
    verdict, is at stake)."""
    groups = ("rounding_mistakes", "mistakes", "variants") if every else ("rounding_mistakes",)
    known = {w: f for g in groups if (fn := getattr(ctx.op, g, None)) is not None for w, f in fn()}
    if not known:  # before any read: a passing case of a family without one reads nothing back
        return None
    fwd = [(t, p) for t in ts if (p := _forward(t)) is not None]
    if not fwd:
        return None
    for what, family in known.items():
        counts = [_differ(t, p, family) for t, p in fwd]
        if all(c is not None and _reproduces(*c) for c in counts):
            mistaken = sum(c[0] for c in counts if c is not None)
            contract = sum(c[1] for c in counts if c is not None)
            n = sum(c[2] for c in counts if c is not None)
            dt = str(fwd[0][1][0].dtype).removeprefix("torch.")
            return sig(
                "wrong-semantics",
                f"matches the op with {what}: rounded to {dt}, its output differs from the kernel's in "
                f"{mistaken} of {n} elements, the contract's oracle's in {contract} (over {len(fwd)} trials: "
                "within the bound, but reproduced bit for bit)",
                mistake=what,
                differ_mistake=float(mistaken),
                differ_contract=float(contract),
            )
    return None


def _forward(t: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The trial's forward output and the contract's oracle for it (a backward trial compares both)."""
    out = t.tensors.get("out") if t.tensors else (t.out if not t.grad else None)
    cmp = t.cmps.get("out") if t.cmps else (t.cmp if not t.grad else None)
    if not isinstance(out, torch.Tensor) or cmp is None or not t.inputs:
        return None
    return out.detach().cpu(), cmp.ref.cpu()


def _differ(t: Any, pair: tuple[torch.Tensor, torch.Tensor], family: Any) -> tuple[int, int, int] | None:
    """(elements the mistake's oracle, rounded to the output dtype, differs from the output in; the contract's
    oracle's, rounded alike; the finite elements counted), or None where the shapes differ."""
    o, ref = pair
    with torch.no_grad():
        alt = family.oracle(*upcast(t.inputs))
    if alt.shape != o.shape or ref.shape != o.shape:
        return None
    ok = o.isfinite() & alt.isfinite() & ref.isfinite()
    a, r, k = alt.to(o.dtype)[ok], ref.to(o.dtype)[ok], o[ok]
    return int((k != a).sum()), int((k != r).sum()), int(ok.sum())


def _reproduces(mistaken: int, contract: int, n: int) -> bool:
    floor = max(REPRODUCED_MIN_ELEMENTS, REPRODUCED_MIN_SHARE * n)
    return contract >= floor and mistaken <= REPRODUCED_SHARE * contract
