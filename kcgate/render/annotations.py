"""Annotations on contracts.toml lines: workflow commands for the log, and Checks API records.

One annotation per contract and category (the runners and cases are listed in its message), so a
hundred failing cases of one contract cost one slot. GitHub shows at most 10 errors, 10 warnings and
10 notices per step and 50 per job: blocking changes are errors and are kept first, and a last
annotation of each level says how many were left out. Pure: no printing here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kcgate.gate.model import CaseChange, Diff, declared_in
from kcgate.render.escape import annotation_property, annotation_text
from kcgate.render.labels import SEVERITY, label, rank
from kcgate.vocab.categories import NOTICE, SILENT

LEVELS = ("error", "warning", "notice")
CHECK_LEVEL = {"error": "failure", "warning": "warning", "notice": "notice"}
CHECKS_BATCH = 50  # the Checks API takes 50 annotations per request
_MAX_LISTED = 8  # cases named in one annotation message


@dataclass(frozen=True)
class Annotation:
    """One annotation: a level, a place in contracts.toml, a title and a message (unescaped)."""

    level: str  # error | warning | notice
    file: str
    line: int | None
    title: str
    message: str
    category: str = ""  # the diff category, for ordering


@dataclass(frozen=True)
class Caps:
    """GitHub's display caps. One warning and one notice are kept back for kcgate's own messages."""

    error: int = 10
    warning: int = 9
    notice: int = 9
    job: int = 50

    def of(self, level: str) -> int:
        return int(getattr(self, level))


def level_of(change: CaseChange) -> str | None:
    """error when it blocks; notice for good news and waivers; warning for the rest; None if unchanged."""
    if change.blocking:
        return "error"
    if change.category in SILENT:
        return None
    return "notice" if change.category in NOTICE else "warning"


def make_annotations(verdict: Diff, contracts_file: str = "contracts.toml") -> list[Annotation]:
    """Group changes by level, contract and category; most severe first."""
    groups: dict[tuple[str, str, str], list[CaseChange]] = {}
    for change in sorted(verdict.changes, key=rank):
        level = level_of(change)
        if level is not None:
            groups.setdefault((level, change.contract_id, change.category), []).append(change)
    out = [_annotation(level, changes, contracts_file) for (level, _cid, _cat), changes in groups.items()]
    return sorted(out, key=_order)


def _order(a: Annotation) -> tuple[int, int]:
    sev = SEVERITY.index(a.category) if a.category in SEVERITY else len(SEVERITY)
    return LEVELS.index(a.level), sev


def _annotation(level: str, changes: Sequence[CaseChange], contracts_file: str) -> Annotation:
    first = changes[0]
    what = label(first.category)
    subject = first.contract_id or first.runner
    title = f"{what}: {subject}"
    line = next((c.line for c in changes if c.line and c.line > 0), None)
    file = declared_in(contracts_file, first.source)
    return Annotation(level, file, line, title, _message(first.category, changes), first.category)


def _message(category: str, changes: Sequence[CaseChange]) -> str:
    runners = sorted({c.runner for c in changes})
    head = (
        f"{len(changes)} {'case' if len(changes) == 1 else 'cases'} {label(category)} on {', '.join(runners)}"
    )
    lines = [head] + [_case_line(c) for c in changes[:_MAX_LISTED]]
    if len(changes) > _MAX_LISTED:
        lines.append(f"… and {len(changes) - _MAX_LISTED} more; see the job summary")
    return "\n".join(lines)


def _case_line(c: CaseChange) -> str:
    bits = [f"{c.runner}: {c.case_id or '(no case)'}"]
    if c.budget_used is not None:
        bits.append(f"budget used {c.budget_used:.2f}")
    if c.signature or c.message:
        bits.append(c.signature or c.message)
    return " — ".join(bits)


# ---- the per-step caps ------------------------------------------------------------------------


def select(annotations: Iterable[Annotation], caps: Caps = Caps()) -> tuple[list[Annotation], dict[str, int]]:
    """Keep what GitHub will show; blocking (error) first. Returns the kept ones and omitted counts."""
    by_level: dict[str, list[Annotation]] = {lvl: [] for lvl in LEVELS}
    for a in annotations:
        by_level[a.level].append(a)
    kept: list[Annotation] = []
    omitted: dict[str, int] = {}
    for lvl in LEVELS:
        room = min(caps.of(lvl), caps.job - len(kept))
        take, extra = _cap(by_level[lvl], room)
        kept += take
        if extra:
            omitted[lvl] = extra
    return kept, omitted


def _cap(items: list[Annotation], room: int) -> tuple[list[Annotation], int]:
    """Keep ``room`` items; when some must go, the last slot says how many went."""
    if len(items) <= room:
        return items, 0
    if room <= 0:
        return [], len(items)
    take = items[: room - 1]
    extra = len(items) - len(take)
    level = items[0].level
    note = Annotation(
        level, items[0].file, None, f"{extra} more {level}s omitted", _omitted_text(extra, level)
    )
    return [*take, note], extra


def _omitted_text(extra: int, level: str) -> str:
    return f"GitHub shows a limited number of annotations per step; {extra} more {level}s are in the job summary."


# ---- output formats ---------------------------------------------------------------------------


def workflow_command(a: Annotation) -> str:
    """``::error file=...,line=N,title=...::message`` with every part escaped for the runner."""
    props = [f"file={annotation_property(a.file)}"]
    if a.line:
        props.append(f"line={int(a.line)}")
    props.append(f"title={annotation_property(a.title)}")
    return f"::{a.level} {','.join(props)}::{annotation_text(a.message)}"


def render_workflow_commands(annotations: Iterable[Annotation]) -> str:
    """One workflow command per line, ready for stdout."""
    return "".join(workflow_command(a) + "\n" for a in annotations)


def check_annotation(a: Annotation) -> dict[str, str | int]:
    """A Checks API annotation record; the API wants a start line, so a missing one becomes 1."""
    line = int(a.line) if a.line else 1
    return {
        "path": a.file,
        "start_line": line,
        "end_line": line,
        "annotation_level": CHECK_LEVEL[a.level],
        "title": a.title[:255],
        "message": a.message[:64_000],
    }


def batches(
    items: Sequence[dict[str, str | int]], size: int = CHECKS_BATCH
) -> list[list[dict[str, str | int]]]:
    """Split Checks API annotations into requests of at most ``size``."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)]
