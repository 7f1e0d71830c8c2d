"""The violation summary of one case (pure: a result in, text out).

The same text is a failing pytest item's message (``pytest --kcgate``) and the ``AssertionError`` of
``kcgate.assert_contract``: budget used, max ULP, the worst element and the violation signature.
"""

from __future__ import annotations

from collections.abc import Sequence

from kcgate.plan import base_seed_for
from kcgate.render.console import fmt_budget
from kcgate.results.model import CaseResult, Status


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"


_HEADS: dict[str, str] = {
    Status.FAIL: "violated",
    Status.ERROR: "could not be checked (error)",
    Status.REFUSED: "refused (the bound is as large as the output: a kernel returning zeros would pass)",
}


def render_violation(c: CaseResult, reproduce: str = "") -> str:
    """Several lines: what broke, the measured numbers, the signature, how to reproduce the case."""
    m = c.metrics
    head = _HEADS.get(c.status, c.status)
    lines = [f"kcgate: contract {c.contract_id} {head}: {c.case_id} ({c.klass}, op {c.op}, {c.dtype})"]
    if m.budget_used is not None or m.max_ulp is not None:
        lines.append(
            f"  budget used {fmt_budget(m.budget_used)} (1 = at the bound), max ULP {_num(m.max_ulp)}, "
            f"max |error| {_num(m.max_abs_err)}, max rel error {_num(m.max_rel_err)}, "
            f"{m.mismatches} of {m.elements} elements over the bound"
        )
    key, name = c.tensor  # the signature's tensor where it names one (the forward output of a NaN loss)
    if key == "grad":
        lines.append(f"  worst tensor: the gradient of input {name!r} (grad = {name!r})")
    elif key == "output":
        lines.append(f"  worst tensor: output {name!r} (output = {name!r})")
    elif key == "tensor":
        lines.append(f"  worst tensor: the {name}")
    if m.worst_index:
        lines.append(
            f"  worst element at index {list(m.worst_index)}: allowed |error| there {_num(m.allowed_at_worst)}"
        )
    if c.signature:
        lines.append(f"  signature: {c.signature.cause}: {c.signature.summary}")
        lines += [f"    {k} = {v}" for k, v in c.signature.evidence]
    if c.message:
        lines += ["  " + ln for ln in c.message.splitlines()[:20]]
    lines.append(
        f"  case seed {c.seed} (drew this case's inputs); run seed {base_seed_for(c.seed, c.case_id)} "
        "(what `kcgate run --seed` takes: it derives the case seed from the case id)"
    )
    if reproduce:
        lines.append(f"  reproduce: {reproduce}")
    return "\n".join(lines)


def render_violations(cases: Sequence[CaseResult], reproduce: str = "") -> str:
    """Every case that did not pass, one summary each, under a count line."""
    bad = [c for c in cases if not c.ok]
    head = f"kcgate: {len(bad)} of {len(cases)} cases do not hold"
    return "\n".join([head, *(render_violation(c, reproduce.format(case_id=c.case_id)) for c in bad)])
