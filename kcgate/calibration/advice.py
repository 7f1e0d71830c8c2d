"""Calibration advice: when a bad kernel passes a contract, find the probe or parameter that would catch it.

Each remedy is a variant of the contract (another class's measurement, a probe, a parameter); it is advice
only when it was *measured*: the variant rejects the bad kernel and still accepts the good one. Variants run in
process (the kernels already ran once in a worker for the calibration itself). Torch-free until ``advise``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from kcgate.contracts.records import Contract, Project, Tolerance
from kcgate.results.model import SEVERITY, Status
from kcgate.vocab.catalogue import CATALOGUE
from kcgate.vocab.classes import CLASSES

MAX_REMEDIES = 2  # stop after this many measured remedies (each costs a run of the bad and the good kernel)


@dataclass(frozen=True)
class Remedy:
    """A change to the contract and what it adds, e.g. the overflow probe of C-PRC-02."""

    change: str  # what to write, e.g. 'add a C-PRC-02 contract'
    why: str  # what it measures
    variant: Contract


def retarget(c: Contract, klass: str, **changes: Any) -> Contract:
    """The same kernel, op, dtypes and shapes under another class, with that class's defaults."""
    cls = CLASSES[klass]
    method = cls.tolerance if cls.tolerance != "error-bound" else _natural_tolerance(c.op)
    return replace(
        c,
        klass=klass,
        params=(),
        postcondition=cls.postcondition,
        tolerance=replace(c.tolerance, method=method) if method != c.tolerance.method else c.tolerance,
        shape_class=(),
        max_elements=0,
        **changes,
    )


def remedies(c: Contract) -> Iterator[Remedy]:
    """Candidate remedies for a contract whose bad kernel passed, most specific first."""
    ops = lambda k: c.op in CLASSES[k].ops  # noqa: E731
    natural = _natural_tolerance(c.op)
    if c.tolerance.method in ("abs-rel", "ulp") and natural == "error-bound":
        yield Remedy(
            'use tolerance = { method = "error-bound" }',
            "the family's derived per-element bound instead of a hand-set tolerance",
            replace(c, tolerance=Tolerance()),
        )
    if c.tolerance.excess == 0:
        yield Remedy(
            "remove tolerance.excess = false",
            "the sensitivity gate: an error above a correct implementation's on the same inputs fails",
            replace(c, tolerance=replace(c.tolerance, excess=Tolerance().excess)),
        )
    if c.klass != "C-PRC-02" and ops("C-PRC-02"):
        yield Remedy(
            "add a C-PRC-02 contract",
            "its cancellation and overflow probes (inputs offset, logits shifted past exp's range)",
            retarget(c, "C-PRC-02"),
        )
    if c.klass != "C-CMP-03" and ops("C-CMP-03"):
        yield Remedy(
            "add a C-CMP-03 contract (a shape class)",
            "held-out shapes across the shape class, its extremes included, and fresh inputs on every trial",
            retarget(c, "C-CMP-03", protocol=replace(c.protocol, trials=max(c.protocol.trials, 3))),
        )
    if c.klass == "C-CMP-03":
        yield Remedy(
            'widen shape_class (e.g. { dims = { <dim> = "range(1, 8192)" } }) or raise held_out',
            "held-out shapes further from the declared one",
            replace(c, params=(("held_out", 12),), max_elements=1 << 24),
        )
    if c.klass != "C-EXC-01" and ops("C-EXC-01"):
        yield Remedy("add a C-EXC-01 contract", "NaN and ±Inf planted in the inputs", retarget(c, "C-EXC-01"))
    if c.klass != "C-ORD-02" and ops("C-ORD-02"):
        yield Remedy(
            "add a C-ORD-02 contract", "identical calls compared bit for bit", retarget(c, "C-ORD-02")
        )
    if c.tolerance.method == "error-bound" and c.tolerance.lam > 2:
        yield Remedy(
            f"lower tolerance.lambda from {c.tolerance.lam:g} to 2",
            "a tighter probabilistic bound",
            replace(c, tolerance=replace(c.tolerance, lam=2.0)),
        )


Runner = Callable[[Project, str], list[Any]]  # (one-contract project, kernel) -> case results


class Executors:
    """One executor per remedy's contract variant, from the command's own factory (``make``: worker processes
    under ``--isolation process``), kept for every kernel run on that variant and closed together: the
    kernels the advice measures never run in the process that advises and prints (docs/security.md)."""

    def __init__(self, make: Callable[[Project], Any]) -> None:
        self.make = make
        self.open: dict[str, Any] = {}

    def __call__(self, variant: Project) -> Any:
        key = repr([c.to_json() for c in variant.contracts])
        if key not in self.open:
            self.open[key] = self.make(variant)
        return self.open[key]

    def close(self) -> None:
        for executor in self.open.values():
            executor.close()
        self.open.clear()


def advise(project: Project, c: Contract, bad: list[str], good: str, run: Runner) -> list[str]:
    """Measured remedies, as lines: each rejects every kernel in ``bad`` and accepts ``good``."""
    lines: list[str] = []
    for remedy in remedies(c):
        single = replace(project, contracts=(remedy.variant,))
        caught = [_worst(run(single, k)) for k in bad]
        if any(r.status == Status.PASS for r in caught):
            continue
        if good and any(r.status != Status.PASS for r in run(single, good)):
            continue
        lines.append(_line(remedy, caught[0]))
        if len(lines) >= MAX_REMEDIES:
            break
    return lines


def _worst(results: list[Any]) -> Any:
    return max(results, key=lambda r: (SEVERITY.get(r.status, 3), r.metrics.budget_used or 0.0))


def _line(remedy: Remedy, caught: Any) -> str:
    s = caught.signature
    how = f"{s.cause}: {s.summary}" if s is not None else (caught.message or caught.status)
    return f"{remedy.change} ({remedy.why}) catches it: {caught.status}, {how}; the good kernel still passes"


def _natural_tolerance(op: str) -> str:
    """The family's natural tolerance method (the catalogue's), error-bound for an unknown op."""
    return CATALOGUE[op].tolerance if op in CATALOGUE else "error-bound"
