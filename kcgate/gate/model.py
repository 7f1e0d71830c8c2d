"""The diff model: every change between a baseline and a current run has a name. No torch.

``kcgate.gate.diff`` computes these records; ``kcgate.report`` and the renderers consume them.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kcgate.results.severity import severity
from kcgate.vocab.categories import CATEGORIES


def declared_in(contracts_file: str, source: str) -> str:
    """The file a case's contract is declared in, as annotations name it: the contracts file, or a
    discovered contract's ``source`` joined to the contracts file's directory."""
    if not source:
        return contracts_file
    return posixpath.normpath(posixpath.join(posixpath.dirname(contracts_file), source))


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


@dataclass(frozen=True)
class CaseChange:
    """One case's category, with both sides' numbers for rendering."""

    category: str
    runner: str
    case_id: str
    contract_id: str
    klass: str = ""
    status: str = ""  # current status ("" when removed / missing)
    base_status: str = ""
    budget_used: float | None = None
    base_budget_used: float | None = None
    signature: str = ""  # current signature summary
    message: str = ""
    line: int | None = None  # contracts.toml line of the contract (or source's)
    source: str = (
        ""  # the file the contract is declared in, relative to contracts.toml's directory; "": that file
    )
    blocking: bool = False
    dtype: str = ""
    seed: int | None = None  # the case's own seed (plan.base_seed_for gives the --seed that reruns it)
    cause: str = ""  # the signature's cause key, e.g. "low-precision-accumulator"
    max_ulp: float | None = None
    max_abs_err: float | None = None
    # current / base budget used, both floored at policy.budget_drift.floor (what the drift rule compares);
    # None when either side has no budget
    budget_factor: float | None = None
    shrunk_shape: tuple[int, ...] = ()  # the smallest failing shape kcgate.engine.shrink found; (): none
    shrunk_nonzero: tuple[int, ...] = ()  # (nonzero input elements, elements) of the sparsest failing input
    attribution: str = ""  # pre-existing | introduced: the base commit's rerun, or the baseline's same seed
    base_commit: str = ""  # the commit the case was rerun on (`kcgate run --base-ref`)
    base_rerun: str = ""  # its status there, or "absent"
    replayed: bool = False  # both sides ran the same inputs (the baseline's seed): budgets are comparable
    # kcgate.results.severity: over 1 exactly when the case fails, whichever gate failed it; inf: an error
    # or a failure with no finite number (null in JSON, derived again from the status on reading)
    severity: float | None = None
    base_severity: float | None = None

    def __post_init__(self) -> None:
        # a change built without severities (a diff JSON's null for an infinite one, an older file, a test)
        # reads them from its status and budget: a failure's is over 1 whatever its budget says
        if self.severity is None and self.status:
            object.__setattr__(self, "severity", severity(self.status, self.budget_used))
        if self.base_severity is None and self.base_status:
            object.__setattr__(self, "base_severity", severity(self.base_status, self.base_budget_used))

    def to_json(self) -> dict[str, Any]:
        return {k: _finite(getattr(self, k)) for k in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CaseChange:
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        for name in ("shrunk_shape", "shrunk_nonzero"):  # JSON lists
            if name in fields:
                fields[name] = tuple(fields[name] or ())
        return cls(**fields)


@dataclass(frozen=True)
class RunnerDiff:
    """The diff of one runner's current run against its baseline."""

    runner: str
    fingerprint_key: str
    base_fingerprint_key: str  # "" when there is no baseline
    changes: tuple[CaseChange, ...]
    # ``[project] track``: (distribution, baseline's version, this run's) where the two differ
    versions: tuple[tuple[str, str, str], ...] = ()

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(CATEGORIES, 0)
        for c in self.changes:
            out[c.category] += 1
        return out


@dataclass(frozen=True)
class Diff:
    """The diff of every runner: each case change with its category (the gate decides over it)."""

    runners: tuple[RunnerDiff, ...]

    @property
    def changes(self) -> tuple[CaseChange, ...]:
        return tuple(c for r in self.runners for c in r.changes)

    @property
    def blocking(self) -> tuple[CaseChange, ...]:
        return tuple(c for c in self.changes if c.blocking)

    @property
    def passed(self) -> bool:
        return not self.blocking

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(CATEGORIES, 0)
        for c in self.changes:
            out[c.category] += 1
        return out

    def version_changes(self) -> list[str]:
        """ "liger-kernel 0.5.8 → 0.5.9" per tracked distribution that differs (on any runner), once each."""
        seen = dict.fromkeys(f"{n} {was} → {now}" for r in self.runners for n, was, now in r.versions)
        return list(seen)

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "counts": self.counts(),
            "runners": [
                {
                    "runner": r.runner,
                    "fingerprint_key": r.fingerprint_key,
                    "base_fingerprint_key": r.base_fingerprint_key,
                    "versions": [list(v) for v in r.versions],
                    "changes": [c.to_json() for c in r.changes],
                }
                for r in self.runners
            ],
        }
