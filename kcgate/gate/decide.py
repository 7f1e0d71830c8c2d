"""The gate: every runner's diff under the policy, and the decision it gives. Pure: no I/O, no torch.

``decide`` takes the loaded current and baseline runs and the ``Policy`` and returns the diff
(``gate.model.Diff``, what the renderers draw) with a ``GateVerdict``: the blocking changes, the
waivers applied, the reasons (one per blocking category, naming the policy rule) and the exit code.
``kcgate diff`` and ``kcgate report`` both call it; neither decides anything itself.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kcgate.contracts.policy import BLOCKABLE, Policy
from kcgate.errors import ExitCode, UsageError
from kcgate.gate.diff import UNEVALUATED, make_diff
from kcgate.gate.model import CaseChange, Diff
from kcgate.results.model import RunResult
from kcgate.vocab.categories import CATEGORY, EXPIRED, WAIVER_APPLIED


@dataclass(frozen=True)
class Reason:
    """Why the gate blocks: one blocking category, how many changes, on which runners, by which rule."""

    category: str
    changes: int
    runners: tuple[str, ...]
    rule: str

    def text(self) -> str:
        return f"{CATEGORY[self.category].label} {self.changes} on {', '.join(self.runners)} ({self.rule})"

    def to_json(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "changes": self.changes,
            "runners": list(self.runners),
            "rule": self.rule,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Reason:
        return cls(d["category"], int(d["changes"]), tuple(d["runners"]), d["rule"])


@dataclass(frozen=True)
class AppliedWaiver:
    """A waiver that covered failing (kind "violation") or unevaluated (kind "error") cases on a runner."""

    contract_id: str
    runner: str
    kind: str
    until: dt.date
    expired: bool  # an expired waiver no longer hides anything: its cases are expired-waiver
    cases: int

    def to_json(self) -> dict[str, Any]:
        return {
            "contract_id": self.contract_id,
            "runner": self.runner,
            "kind": self.kind,
            "until": self.until.isoformat(),
            "expired": self.expired,
            "cases": self.cases,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AppliedWaiver:
        return cls(
            d["contract_id"],
            d["runner"],
            d["kind"],
            dt.date.fromisoformat(d["until"]),
            bool(d["expired"]),
            int(d["cases"]),
        )


@dataclass(frozen=True)
class GateVerdict:
    """The gate's decision: what blocks, why, which waivers were applied, and the process exit code."""

    exit_code: int
    blocking: tuple[CaseChange, ...]
    reasons: tuple[Reason, ...]
    waivers: tuple[AppliedWaiver, ...]

    @property
    def passed(self) -> bool:
        return self.exit_code == ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "exit_code": self.exit_code,
            "blocking": [c.to_json() for c in self.blocking],
            "reasons": [r.to_json() for r in self.reasons],
            "waivers": [w.to_json() for w in self.waivers],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> GateVerdict:
        return cls(
            exit_code=int(d["exit_code"]),
            blocking=tuple(CaseChange.from_json(c) for c in d["blocking"]),
            reasons=tuple(Reason.from_json(r) for r in d["reasons"]),
            waivers=tuple(AppliedWaiver.from_json(w) for w in d["waivers"]),
        )


def decide(
    current: Mapping[str, RunResult],
    baselines: Mapping[str, RunResult],
    policy: Policy,
    today: dt.date,
    expected_runners: Iterable[str] = (),
) -> tuple[Diff, GateVerdict]:
    """Diff every runner under the policy, then judge the diff."""
    diff = make_diff(current, baselines, policy, today, expected_runners)
    return diff, judge(diff, policy)


def judge(diff: Diff, policy: Policy) -> GateVerdict:
    """The decision a diff gives: its blocking changes are the reasons; exit 1 when any, else 0."""
    blocking = diff.blocking
    return GateVerdict(
        exit_code=int(ExitCode.VIOLATION if blocking else ExitCode.OK),
        blocking=blocking,
        reasons=reasons(blocking),
        waivers=applied_waivers(diff.changes, policy),
    )


def reasons(blocking: Iterable[CaseChange]) -> tuple[Reason, ...]:
    """One reason per blocking category, most severe first."""
    runners: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for c in blocking:
        counts[c.category] = counts.get(c.category, 0) + 1
        runners.setdefault(c.category, [])
        if c.runner not in runners[c.category]:
            runners[c.category].append(c.runner)
    order = sorted(counts, key=lambda k: CATEGORY[k].severity)
    return tuple(Reason(k, counts[k], tuple(sorted(runners[k])), CATEGORY[k].rule) for k in order)


def applied_waivers(changes: Iterable[CaseChange], policy: Policy) -> tuple[AppliedWaiver, ...]:
    """Each waiver that covered a failing or unevaluated case, per runner, in the order first met."""
    cases: dict[tuple[str, str, str, bool], int] = {}
    for c in changes:
        if c.category in WAIVER_APPLIED:
            kind = "error" if c.status in UNEVALUATED else "violation"
            key = (c.contract_id, c.runner, kind, c.category in EXPIRED)
            cases[key] = cases.get(key, 0) + 1
    return tuple(_applied(key, n, policy) for key, n in cases.items())


def _applied(key: tuple[str, str, str, bool], n: int, policy: Policy) -> AppliedWaiver:
    contract_id, runner, kind, expired = key
    waiver = policy.waiver_for(contract_id, runner, kind)
    if waiver is None:  # the diff applied this very policy's waivers: judged under another policy
        raise AssertionError(f"no {kind} waiver for {contract_id!r} on {runner!r} in this policy")
    return AppliedWaiver(contract_id, runner, kind, waiver.until, expired, n)


def apply_fail_on(policy: Policy, fail_on: str) -> Policy:
    """--fail-on replaces the policy's block_on; an unknown category lists the choices."""
    cats = tuple(c.strip() for c in fail_on.split(",") if c.strip())
    if not cats:
        return policy
    bad = [c for c in cats if c not in BLOCKABLE]
    if bad:
        raise UsageError(
            f"--fail-on: {', '.join(b[:40] for b in bad)} cannot block; choose from: {', '.join(BLOCKABLE)}"
        )
    return replace(policy, block_on=cats)
