"""The results journal: one line per finished case, appended (and flushed to the OS) as it finishes.

A run keeps ``results/<runner>.json`` valid at all times by atomic replacement, but rewriting it per
case is quadratic. Instead each finished case is appended to ``.<runner>.json.journal`` beside it
(a header line naming the runner and fingerprint, then one case row per line), and the results file
is rewritten only now and then (when the case count has doubled), on SIGINT/SIGTERM, and at the end.
A kill -9 loses nothing that finished: ``--resume`` reads the results file and the journal. No torch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kcgate.errors import IOFault
from kcgate.results.model import CASE_FIELDS, MAX_RESULTS_BYTES, CaseResult, RunResult
from kcgate.util import bounded

KIND = "kcgate-journal"


def journal_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.journal")


class Journal:
    """An open journal: ``append`` writes one finished case with a single write(2)."""

    def __init__(self, out: Path, run: RunResult) -> None:
        self.path = journal_path(out)
        self.header = _header(run)
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError as exc:
            raise IOFault(
                self.path, exc, "make the results directory writable or choose another --out"
            ) from None
        self._write(json.dumps(self.header) + "\n")

    def append(self, case: CaseResult) -> None:
        self._write(json.dumps(case.to_row(), allow_nan=False) + "\n")

    def restart(self) -> None:
        """Empty the journal: the results file now holds every case it held."""
        try:
            os.ftruncate(self.fd, 0)
        except OSError as exc:
            raise IOFault(self.path, exc) from None
        self._write(json.dumps(self.header) + "\n")

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _write(self, text: str) -> None:
        data = text.encode("utf-8")
        try:
            while data:
                data = data[os.write(self.fd, data) :]
        except OSError as exc:
            raise IOFault(self.path, exc) from None


def _header(run: RunResult) -> dict[str, object]:
    return {
        "kind": KIND,
        "runner": run.runner,
        "fingerprint_key": run.fingerprint.key(),
        "case_fields": list(CASE_FIELDS),
    }


def read_journal(out: Path, run: RunResult) -> list[CaseResult] | None:
    """The cases journaled for ``run``'s runner and fingerprint; None when there is no journal or it
    belongs to another runner, fingerprint or schema. A torn last line (a kill mid-write) is dropped."""
    path = journal_path(out)
    if not path.exists():
        return None
    try:
        lines = bounded.read_capped(path, MAX_RESULTS_BYTES).split(b"\n")
    except bounded.Refused:
        return None
    try:
        if json.loads(lines[0]) != _header(run):
            return None
    except ValueError:
        return None
    return [case for case in map(_case, lines[1:-1]) if case is not None]


def _case(line: bytes) -> CaseResult | None:
    try:
        return CaseResult.from_row(json.loads(line))
    except ValueError:  # a torn or damaged line: that case runs again
        return None
