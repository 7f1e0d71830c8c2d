"""Where a baselines directory's files came from: ``kcgate baseline fetch`` writes
``kcgate-baseline-source.json`` beside them (each runner's recorded commit and how many commits before the
merge base it is, or the committed file that overrides it), and ``kcgate report`` reads it to say in the
comment which commit was the baseline. Its ``kind`` makes every results reader skip it. No torch."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kcgate.errors import ResultsError
from kcgate.history.runs import COMMIT
from kcgate.results.baseline import RUNNER_NAME
from kcgate.results.model import write_atomic
from kcgate.util import bounded

SOURCE_FILE = "kcgate-baseline-source.json"
KIND = "kcgate-baseline-source"
VERSION = 1
MAX_SOURCE_BYTES = 1024 * 1024
HOW = ("recorded", "committed", "none")  # a recorded run, a committed file that overrides it, nothing
FIX = f"delete {SOURCE_FILE} and run `kcgate baseline fetch` again"


@dataclass(frozen=True)
class Origin:
    """One runner's baseline: ``recorded`` at ``commit`` (``back`` first-parent commits before the merge
    base), ``committed`` (a baselines file of the repository wins), or ``none`` (no recorded ancestor)."""

    runner: str
    how: str
    commit: str = ""
    back: int = 0


@dataclass(frozen=True)
class BaselineSource:
    """The merge base the baselines were looked up for, the window, and each runner's origin."""

    merge_base: str
    max_back: int
    origins: tuple[Origin, ...] = ()

    @property
    def first_run(self) -> bool:
        """Nothing recorded for any runner within the window (a repository's first run)."""
        return not any(o.how != "none" for o in self.origins)


def dumps_source(source: BaselineSource) -> str:
    doc = {
        "kind": KIND,
        "version": VERSION,
        "merge_base": source.merge_base,
        "max_back": source.max_back,
        "runners": [asdict(o) for o in source.origins],
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def write_source(directory: Path, source: BaselineSource) -> Path:
    path = directory / SOURCE_FILE
    write_atomic(path, dumps_source(source))
    return path


def read_source(directory: Path) -> BaselineSource | None:
    """The source file of a baselines directory; None when it has none (committed baselines only)."""
    path = directory / SOURCE_FILE
    if not path.is_file() or path.is_symlink():
        return None
    try:
        doc = bounded.loads_json(bounded.read_capped(path, MAX_SOURCE_BYTES))
    except (ValueError, bounded.Refused) as exc:
        raise ResultsError(f"{path}: {str(exc)[:200]}; {FIX}") from None
    return parse_source(doc, str(path))


def parse_source(doc: Any, name: str) -> BaselineSource:
    def check(ok: bool, what: str) -> None:
        if not ok:
            raise ResultsError(f"{name}: {what}; {FIX}")

    check(isinstance(doc, dict) and doc.get("kind") == KIND, f"kind must be {KIND!r}")
    check(doc.get("version") == VERSION, f"version must be {VERSION}")
    check(_sha(doc.get("merge_base")), "merge_base must be a commit SHA")
    check(type(doc.get("max_back")) is int and doc["max_back"] >= 0, "max_back must be a whole number")
    rows = doc.get("runners")
    check(type(rows) is list and len(rows) <= 1000, "runners must be a list")
    return BaselineSource(doc["merge_base"], doc["max_back"], tuple(_origin(r, check) for r in rows))


def _origin(row: Any, check: Any) -> Origin:
    check(isinstance(row, dict) and set(row) == {"runner", "how", "commit", "back"}, "a bad runners entry")
    check(isinstance(row["runner"], str) and bool(RUNNER_NAME.fullmatch(row["runner"])), "a bad runner name")
    check(row["how"] in HOW, f"how must be one of {', '.join(HOW)}")
    check(row["commit"] == "" or _sha(row["commit"]), "commit must be a commit SHA or empty")
    check(type(row["back"]) is int and 0 <= row["back"] < 10**6, "back must be a whole number")
    return Origin(row["runner"], row["how"], row["commit"], row["back"])


def _sha(value: Any) -> bool:
    return isinstance(value, str) and bool(COMMIT.fullmatch(value))


def source_of(specs: Sequence[str], default_dir: Path | None) -> BaselineSource | None:
    """The source file of the first baselines directory a report reads (its ``--baseline`` sources, else
    the project's baselines directory); None when there is none."""
    dirs = [Path(s) for s in specs if Path(s).is_dir()] if specs else [default_dir] if default_dir else []
    for directory in dirs:
        found = read_source(directory)
        if found is not None:
            return found
    return None
