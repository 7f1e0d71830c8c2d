"""The records of ``kcgate mutate``: a mutant, its outcome, a contract's report and the run's report (JSON in and
out). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kcgate.vocab.mutation_rules import RULES

CACHE_VERSION = 2  # 2: signed, outcomes only (a diff is always made from the module as it is now)
PREFIX = "kcgate_mutant_"  # the synthetic modules' names: never a real module's

# a mutant's outcome
KILLED, SURVIVED, ROUNDED, EQUIVALENT, NOT_RUN = (
    "killed",
    "survived",
    "within-rounding",
    "equivalent",
    "not-run",
)
OUTCOMES = (KILLED, SURVIVED, ROUNDED, EQUIVALENT, NOT_RUN)


# ---- the records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    """One rule applied at one site of one contract's kernel module."""

    contract_id: str
    rule: str
    family: str
    site: str  # "L<line>C<col>-L<end line>C<end col>#<variant>" in the kernel's module
    line: int
    change: str  # what changed, in words
    diff: str  # unified diff against the unmutated module
    key: str  # cache key: source hash + contract + rule + site (+ seed)
    source: str = field(default="", repr=False, compare=False)  # the mutated module (not in the report)

    @property
    def module(self) -> str:
        return PREFIX + self.key


@dataclass(frozen=True)
class MutantResult:
    mutant: Mutant
    outcome: str  # one of OUTCOMES
    cases_run: int = 0
    killed_by: str = ""  # the first case that killed it: "<case id>: <status> <diagnosis or message>"
    budget_used: float | None = None  # the largest over its cases
    advice: tuple[str, ...] = ()
    advice_note: str = ""  # why there is no advice ("not measured: budget", ...)
    cached: bool = False

    def to_json(self) -> dict[str, Any]:
        m = self.mutant
        return {
            "contract_id": m.contract_id,
            "rule": m.rule,
            "family": m.family,
            "site": m.site,
            "line": m.line,
            "change": m.change,
            "diff": m.diff,
            "key": m.key,
            "outcome": self.outcome,
            "cases_run": self.cases_run,
            "killed_by": self.killed_by,
            "budget_used": finite(self.budget_used),
            "advice": list(self.advice),
            "advice_note": self.advice_note,
            "cached": self.cached,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MutantResult:
        m = Mutant(
            d["contract_id"],
            d["rule"],
            d["family"],
            d["site"],
            int(d["line"]),
            d["change"],
            d["diff"],
            d["key"],
        )
        return cls(
            m,
            d["outcome"],
            int(d.get("cases_run", 0)),
            d.get("killed_by", ""),
            d.get("budget_used"),
            tuple(d.get("advice", ())),
            d.get("advice_note", ""),
            bool(d.get("cached", False)),
        )


@dataclass(frozen=True)
class ContractReport:
    """One contract: its kernel's module, the unmutated kernel's false alarms, and its mutants."""

    contract_id: str
    klass: str
    kernel: str
    module_path: str = ""
    source_hash: str = ""
    cases: int = 0
    false_alarms: int | None = None  # cases the unmutated kernel does not pass (None: not run, all cached)
    mutants: tuple[MutantResult, ...] = ()
    skipped: str = ""  # why this contract has no mutants

    def count(self, outcome: str) -> int:
        return sum(1 for m in self.mutants if m.outcome == outcome)

    def to_json(self) -> dict[str, Any]:
        return {
            "contract_id": self.contract_id,
            "class": self.klass,
            "kernel": self.kernel,
            "module_path": self.module_path,
            "source_hash": self.source_hash,
            "cases": self.cases,
            "false_alarms": self.false_alarms,
            "skipped": self.skipped,
            "counts": {o: self.count(o) for o in OUTCOMES},
            "kill_rate": kill_rate(self.mutants),
            "mutants": [m.to_json() for m in self.mutants],
        }


@dataclass(frozen=True)
class MutationReport:
    contracts: tuple[ContractReport, ...]
    seed: int
    budget_s: float | None
    elapsed_s: float
    sampled: bool  # the budget ran out: the mutants run are a seeded random sample

    @property
    def mutants(self) -> tuple[MutantResult, ...]:
        return tuple(m for c in self.contracts for m in c.mutants)

    def to_json(self) -> dict[str, Any]:
        ms = self.mutants
        by_rule = {
            r.name: {
                "family": r.family,
                "bug": r.bug,
                "counts": {
                    o: sum(1 for m in ms if m.mutant.rule == r.name and m.outcome == o) for o in OUTCOMES
                },
                "kill_rate": kill_rate([m for m in ms if m.mutant.rule == r.name]),
            }
            for r in RULES
        }
        return {
            "kind": "kcgate-mutation",
            "version": CACHE_VERSION,
            "seed": self.seed,
            "budget_s": self.budget_s,
            "elapsed_s": round(self.elapsed_s, 3),
            "sampled": self.sampled,
            "counts": {o: sum(1 for m in ms if m.outcome == o) for o in OUTCOMES},
            "kill_rate": kill_rate(ms),
            "false_alarms": sum(c.false_alarms or 0 for c in self.contracts),
            "rules": by_rule,
            "contracts": [c.to_json() for c in self.contracts],
        }


def kill_rate(results: Any) -> float | None:
    """Killed over killed + survived: equivalent mutants, those within rounding and those not run are out."""
    killed = sum(1 for m in results if m.outcome == KILLED)
    counted = killed + sum(1 for m in results if m.outcome == SURVIVED)
    return round(killed / counted, 4) if counted else None


def finite(x: float | None) -> float | None:
    return None if x is None or x != x or x in (float("inf"), float("-inf")) else x
