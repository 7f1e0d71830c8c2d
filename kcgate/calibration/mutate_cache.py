"""``kcgate mutate``'s cache of mutant outcomes: one signed JSON file, written fresh and renamed into place; a
damaged, edited or forged cache is a cold cache."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from kcgate.calibration.mutants import CACHE_VERSION, NOT_RUN, OUTCOMES, Mutant, MutantResult, finite
from kcgate.errors import IOFault
from kcgate.results.journal import cache_home, read_key, write_key
from kcgate.util import bounded

CACHE_FILE = "mutate.json"
MAX_CACHE_BYTES = 64 << 20  # read capped while reading
_CACHE_DOMAIN = b"kcgate-mutate-cache\0"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class Cache:
    """Mutant outcomes by key, in one JSON file signed with a per-user key kept outside it (in kcgate's
    cache, as the journal's keys are): an edited, forged, damaged or unsigned file is a cold cache, and an
    entry of the wrong types is a miss. Written once at the end of a run, through a fresh file and a rename
    (never through a symlink planted at its path)."""

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / CACHE_FILE if directory else None
        self.key = _cache_key() if directory else None
        self.entries: dict[str, dict[str, Any]] = self._load()

    def _load(self) -> dict[str, dict[str, Any]]:
        if self.path is None or self.key is None or not os.path.lexists(self.path):
            return {}
        try:
            doc = bounded.loads_json(bounded.read_capped(self.path, MAX_CACHE_BYTES))
        except ValueError:  # Refused, invalid JSON or UTF-8: a damaged cache is a cold cache
            return {}
        if not isinstance(doc, dict) or doc.get("version") != CACHE_VERSION:
            return {}
        entries, mac = doc.get("entries"), doc.get("mac")
        if not isinstance(entries, dict) or not isinstance(mac, str):
            return {}
        if not hmac.compare_digest(mac, _sign(self.key, entries)):
            return {}
        return {k: v for k, v in entries.items() if isinstance(v, dict)}

    def get(self, key: str) -> MutantResult | None:
        """The cached outcome of a mutant (its ``mutant`` a placeholder the caller replaces), or None."""
        d = self.entries.get(key)
        try:
            return _outcome(d) if d else None
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, r: MutantResult) -> None:
        if r.outcome != NOT_RUN:  # a cached one too: the advice measured this run is kept
            self.entries[r.mutant.key] = {
                "outcome": r.outcome,
                "cases_run": r.cases_run,
                "killed_by": r.killed_by,
                "budget_used": finite(r.budget_used),
                "advice": list(r.advice),
                "advice_note": r.advice_note,
            }

    def original(self, key: str) -> tuple[int, int] | None:
        """(cases, false alarms) of an unmutated kernel, when cached."""
        d = self.entries.get(key)
        if not isinstance(d, dict):
            return None
        cases, alarms = d.get("cases"), d.get("false_alarms")
        ok = all(type(v) is int and 0 <= v for v in (cases, alarms))
        return (cases, alarms) if ok and alarms <= cases else None  # type: ignore[operator, return-value]

    def put_original(self, key: str, cases: int, false_alarms: int) -> None:
        self.entries[key] = {"cases": cases, "false_alarms": false_alarms}

    def save(self) -> None:
        if self.path is None:
            return
        doc = {"version": CACHE_VERSION, "entries": self.entries, "mac": _sign(self.key or b"", self.entries)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_fresh(self.path, json.dumps(doc, sort_keys=True).encode())
        except OSError as exc:
            raise IOFault(self.path, exc, "make the cache directory writable, or pass --no-cache") from None


def _outcome(d: dict[str, Any]) -> MutantResult:
    """A cached entry, its types checked (a wrong one is a miss, never an error)."""
    outcome, advice, budget = d["outcome"], d.get("advice", []), d.get("budget_used")
    if outcome not in OUTCOMES or outcome == NOT_RUN or not isinstance(advice, list):
        raise ValueError(f"not an outcome: {outcome!r}")
    texts = (d.get("killed_by", ""), d.get("advice_note", ""), *advice)
    if not all(isinstance(t, str) for t in texts) or type(d.get("cases_run", 0)) is not int:
        raise TypeError("a field of the wrong type")
    if budget is not None and type(budget) not in (int, float):
        raise TypeError("budget_used is not a number")
    placeholder = Mutant("", "", "", "", 0, "", "", "")
    return MutantResult(
        placeholder, outcome, d.get("cases_run", 0), texts[0], budget, tuple(advice), texts[1], cached=True
    )


def _cache_key() -> bytes | None:
    """The per-user key the cache is signed with, made on first use; None where it cannot be kept."""
    path = cache_home() / "mutate-cache.key"
    key = read_key(path)
    if key is None:
        with contextlib.suppress(OSError):
            write_key(path, secrets.token_bytes(32))
            key = read_key(path)
    return key


def _sign(key: bytes | None, entries: dict[str, Any]) -> str:
    blob = json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key or b"", _CACHE_DOMAIN + blob, hashlib.sha256).hexdigest() if key else ""


def write_fresh(path: Path, data: bytes) -> None:
    """``data`` into a new file beside ``path`` (exclusive create, no symlink followed), renamed over it."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)  # replaces a symlink at path, never its target
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
