"""Three-state calibration: every contract must accept its good kernel and reject its bad and baseline.

A contract whose bad kernel passes is under-specified (PRODUCT.md); the detection margin is the bad
kernel's budget used. Renderers here are pure; ``kcgate calibrate`` does the I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kcgate.calibration.advice import Executors, advise
from kcgate.contracts.records import Contract, Project
from kcgate.execution.pool import make_executor
from kcgate.plan import make_plan
from kcgate.results.model import SEVERITY, Status

STATES = ("good", "bad", "baseline")
BUILTIN = Path(__file__).parents[1] / "kernels" / "calibration" / "contracts.toml"
BASE_SEED = 0  # calibration is a proof about the contract: reproducible by default


@dataclass(frozen=True)
class StateResult:
    """One kernel state of one contract, over all of the contract's cases."""

    state: str  # good | bad | baseline
    kernel: str
    status: str  # pass | fail | error | refused (the worst over cases)
    budget_used: float | None  # the largest over cases; None when not measurable (e.g. a category change)
    message: str = ""
    cause: str = ""
    summary: str = ""

    @property
    def accepted(self) -> bool:
        return self.status == Status.PASS

    @property
    def as_expected(self) -> bool:
        return self.accepted == (self.state == "good")


@dataclass(frozen=True)
class Calibration:
    """The three states of one contract."""

    contract_id: str
    klass: str
    states: tuple[StateResult, ...]
    advice: tuple[str, ...] = ()  # measured remedies when a bad kernel passed (kcgate.calibration.advice)

    def state(self, name: str) -> StateResult | None:
        return next((s for s in self.states if s.state == name), None)

    @property
    def under_specified(self) -> bool:
        """A bad (or baseline) kernel was accepted: the contract cannot tell it from a good one."""
        return any(s.accepted for s in self.states if s.state != "good")

    @property
    def good_rejected(self) -> bool:
        return any(not s.accepted for s in self.states if s.state == "good")

    @property
    def margin(self) -> float | None:
        """Detection margin: the bad kernel's budget used (inf when it failed by a category change)."""
        bad = self.state("bad")
        if bad is None or bad.accepted:
            return bad.budget_used if bad else None
        return bad.budget_used if bad.budget_used is not None else math.inf


def state_kernels(c: Contract) -> dict[str, str]:
    """The states a contract names, in calibration order."""
    return {s: getattr(c, s) for s in STATES if getattr(c, s)}


def calibrate(
    project: Project,
    executor: Any,
    keyword: str | None = None,
    base_seed: int = BASE_SEED,
    make: Callable[[Project], Any] | None = None,
) -> list[Calibration]:
    """Run every state of every contract that names at least one state (``-k`` filters contract or class).

    ``executor`` runs the cases (``kcgate.execution.executors``): in a worker process by default, so a bad kernel
    that crashes or hangs is recorded as an error of its state, never the end of the calibration. ``make``:
    the executors the advice's contract variants run in (default: worker processes on the CPU).
    """
    out = []
    for c in project.contracts:
        if state_kernels(c) and _selected(c, keyword):
            out.append(calibrate_contract(project, c, executor, base_seed, make))
    return out


def _selected(c: Contract, keyword: str | None) -> bool:
    if not keyword:
        return True
    return any(k.strip() and (k.strip() in c.id or k.strip() in c.klass) for k in keyword.split(" or "))


def calibrate_contract(
    project: Project,
    c: Contract,
    executor: Any,
    base_seed: int = BASE_SEED,
    make: Callable[[Project], Any] | None = None,
) -> Calibration:
    single = Project(
        path=project.path, name=project.name, contracts=(c,), policy=project.policy, paths=project.paths
    )
    cases = make_plan(single, base_seed, executor.default_shapes())
    states = []
    for state, target in state_kernels(c).items():
        results = list(executor.run_many(cases, kernel=target))
        states.append(_summarize(state, target, results))
    row = Calibration(c.id, c.klass, tuple(states))
    if not row.under_specified:
        return row
    return replace(row, advice=_advice(single, c, row, base_seed, make or _workers))


def _workers(project: Project) -> Any:
    return make_executor("process", project, "cpu")


def _advice(
    project: Project, c: Contract, row: Calibration, base_seed: int, make: Callable[[Project], Any]
) -> tuple[str, ...]:
    """Which probe or parameter would catch the bad kernels that passed, measured in ``make``'s executors."""
    executors = Executors(make)

    def run(variant: Project, kernel: str) -> list[Any]:
        executor = executors(variant)
        cases = make_plan(variant, base_seed, executor.default_shapes())
        return list(executor.run_many(cases, kernel=kernel))

    passed = [s.kernel for s in row.states if s.state != "good" and s.accepted]
    good = row.state("good")
    try:
        return tuple(advise(project, c, passed, good.kernel if good else "", run))
    finally:
        executors.close()


def _summarize(state: str, target: str, results: list[Any]) -> StateResult:
    worst = max(results, key=lambda r: (SEVERITY.get(r.status, 3), r.metrics.budget_used or 0.0))
    budgets = [r.metrics.budget_used for r in results]
    known = [b for b in budgets if b is not None]
    failed_unmeasured = any(b is None and r.status != Status.PASS for b, r in zip(budgets, results))
    budget = math.inf if failed_unmeasured and worst.status == Status.FAIL else max(known, default=None)
    sig = worst.signature
    return StateResult(
        state,
        target,
        worst.status,
        budget,
        worst.message,
        sig.cause if sig else "",
        sig.summary if sig else "",
    )


# ---- rendering (pure) ----------------------------------------------------------------------------


def render_matrix(rows: list[Calibration]) -> str:
    """The class × state matrix: verdict and budget used per state, then the detection margin."""
    head = f"{'contract':<22} {'class':<9} {'good':<16} {'bad':<16} {'baseline':<16} {'margin':>8}  bad diagnosed as"
    lines = [head, "-" * len(head)]
    for r in rows:
        cells = [_cell(r.state(s)) for s in STATES]
        sig = r.state("bad")
        lines.append(
            f"{r.contract_id:<22} {r.klass:<9} {cells[0]:<16} {cells[1]:<16} {cells[2]:<16} "
            f"{_num(r.margin):>8}  {sig.summary if sig else ''}"
        )
    lines += ["", verdict_line(rows)]
    for r in rows:
        if r.under_specified:
            lines.append(
                f"  {r.contract_id}: "
                + (
                    "; or ".join(r.advice)
                    if r.advice
                    else "no probe or parameter kcgate tried catches the bad kernel"
                )
            )
    return "\n".join(lines)


def verdict_line(rows: list[Calibration]) -> str:
    under = [r.contract_id for r in rows if r.under_specified]
    good_bad = [r.contract_id for r in rows if r.good_rejected]
    if under:
        return (
            f"under-specified: {', '.join(under)} accepted a bad or baseline kernel; what catches it "
            "(measured: the change rejects the bad kernel and accepts the good one):"
        )
    if good_bad:
        return f"good kernel rejected by: {', '.join(good_bad)}; the contract (or the good kernel) is wrong"
    return f"calibrated: {len(rows)} contract(s) accept good and reject bad and baseline"


def _cell(s: StateResult | None) -> str:
    if s is None:
        return "-"
    mark = "ok" if s.as_expected else "!!"
    return f"{s.status} {_num(s.budget_used)} {mark}"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.3g}"


def to_json(rows: list[Calibration]) -> str:
    def state(s: StateResult) -> dict[str, Any]:
        b = s.budget_used
        return {
            "state": s.state,
            "kernel": s.kernel,
            "status": s.status,
            "accepted": s.accepted,
            "budget_used": None if b is None or math.isinf(b) else b,
            "unbounded": b is not None and math.isinf(b),
            "cause": s.cause,
            "summary": s.summary,
            "message": s.message,
        }

    doc = {
        "kind": "kcgate-calibration",
        "contracts": [
            {
                "contract_id": r.contract_id,
                "class": r.klass,
                "under_specified": r.under_specified,
                "good_rejected": r.good_rejected,
                "margin": None if r.margin is None or math.isinf(r.margin) else r.margin,
                "states": [state(s) for s in r.states],
                "advice": list(r.advice),
            }
            for r in rows
        ],
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"
