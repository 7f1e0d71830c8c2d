"""The results journal: one signed line per finished case, appended (and flushed to the OS) as it finishes.

A run keeps ``results/<runner>.json`` valid at all times by atomic replacement, but rewriting it per
case is quadratic. Instead each finished case is appended to ``.<runner>.json.journal`` beside it
(a header line naming the runner and fingerprint, then one case row per line), and the results file
is rewritten only now and then (when the case count has doubled), on SIGINT/SIGTERM, and at the end.
A kill -9 loses nothing that finished: ``--resume`` reads the results file and the journal.

Kernels run with the user's permissions, so both files can be written by a kernel (a ``pass`` row for a
case not yet run, then SIGKILL of the parent). Every line therefore carries an HMAC-SHA256 under a key
that only the parent makes and uses: it is never sent to a worker (the workers have their own channel
keys), and it is kept for ``--resume`` in a key file outside the results directory (``0600``, in a
``0700`` directory of kcgate's cache), created before any worker starts; no worker gets its path or a
descriptor. Case rows are bound to the header, the header holds the runner, the fingerprint and a digest
of every case compacted into the results file, so ``--resume`` trusts a results-file case only when the
header vouches for it and a journal row only when its MAC verifies; anything else runs again and is
counted. The limit (README, Reliability): a kernel that finds and reads the key file (same user) can
still forge; run untrusted kernels as another user or in a container for that. No torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kcgate.errors import IOFault, UsageError
from kcgate.results.model import CASE_FIELDS, MAX_RESULTS_BYTES, CaseResult, RunResult
from kcgate.util import bounded

KIND = "kcgate-journal"
VERSION = 3  # 3: rows name their plan; 2: signed lines; 1: plain JSON (older ones vouch for nothing)
_HEADER, _ROW = b"kcgate-journal-header\0", b"kcgate-journal-row\0"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def journal_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.journal")


def lock_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.lock")


def key_path(out: Path) -> Path:
    """The journal's key file: in kcgate's cache (``$KCGATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/kcgate`` or
    ``~/.cache/kcgate``), never beside the results, which CI uploads; named by the journal's absolute path."""
    where = os.path.join(os.path.realpath(out.parent), journal_path(out).name)  # however --results is spelled
    name = hashlib.sha256(os.fsencode(where)).hexdigest()[:32]
    return cache_home() / "journal-keys" / f"{name}.key"


def cache_home() -> Path:
    """kcgate's per-user cache: ``$KCGATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/kcgate`` or ``~/.cache/kcgate``."""
    return Path(
        os.environ.get("KCGATE_CACHE_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kcgate"
    )


def case_digest(case: CaseResult, plan: str) -> str:
    """What the header records for a case compacted into the results file: its row as the file holds it,
    and the plan it ran under (``plan_key``)."""
    row = json.dumps(case.to_row(), sort_keys=True, allow_nan=False, separators=(",", ":"))
    return hashlib.sha256(f"{plan}\0{row}".encode()).hexdigest()[:32]


def plan_key(planned: Mapping[str, object]) -> str:
    """A planned case (``plan.Case.to_json``: its overrides, line and its contract's digest, which
    covers every contract field and the kernel's and reference's sources), hashed: a
    finished case is kept on ``--resume`` only when the case it would run now has the same key."""
    blob = json.dumps(planned, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _mac(key: bytes, domain: bytes, payload: bytes) -> str:
    return hmac.new(key, domain + payload, hashlib.sha256).hexdigest()


class RunLock:
    """``fcntl.flock`` on ``.<out>.lock``: a second run with the same ``--results`` stops (exit 3) instead of
    truncating the first one's journal. Released when this process closes it or dies."""

    def __init__(self, out: Path) -> None:
        self.path = lock_path(out)
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
        except OSError as exc:
            raise IOFault(
                self.path, exc, "make the results directory writable or choose another --results"
            ) from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)
            self.fd = -1
            raise UsageError(
                f"{out}: another kcgate run is writing it (it holds {self.path}); wait for that run to end, "
                "or write to another --results"
            ) from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the descriptor releases the lock
            self.fd = -1


class Journal:
    """An open journal: ``append`` writes one finished case, signed, with a single write(2)."""

    def __init__(
        self, out: Path, run: RunResult, plans: Mapping[str, str], compacted: Iterable[CaseResult] = ()
    ) -> None:
        self.path, self.key_file = journal_path(out), key_path(out)
        self.run, self.key, self.plans = run, secrets.token_bytes(32), plans
        # before any case (the workers are started, never told of it); where kcgate's cache cannot be written
        # the journal still holds every case, but --resume then finds no key and runs every case again
        try:
            write_key(self.key_file, self.key)
        except OSError:
            with contextlib.suppress(OSError):
                self.key_file.unlink()  # an older run's key must not vouch for this journal's header
        try:  # never follow or truncate what is there (a symlink, a FIFO, another run's file): replace it
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self.fd = os.open(
                self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | _NOFOLLOW, 0o644
            )
        except OSError as exc:
            raise IOFault(
                self.path, exc, "make the results directory writable or choose another --results"
            ) from None
        self._start(compacted)

    def append(self, case: CaseResult) -> None:
        """``MAC plan row``: the MAC covers the plan key and the row, bound to the header."""
        signed = (
            self.plans.get(case.case_id, "").encode()
            + b" "
            + json.dumps(case.to_row(), allow_nan=False).encode()
        )
        self._write(_mac(self.key, _ROW + self.header_mac.encode() + b"\0", signed).encode() + b" " + signed)

    def restart(self, compacted: Iterable[CaseResult]) -> None:
        """Empty the journal: the results file now holds every case it held (their digests: the header)."""
        try:
            os.ftruncate(self.fd, 0)
        except OSError as exc:
            raise IOFault(self.path, exc) from None
        self._start(compacted)

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self.key_file.unlink(missing_ok=True)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _start(self, compacted: Iterable[CaseResult]) -> None:
        digests = {c.case_id: case_digest(c, self.plans.get(c.case_id, "")) for c in compacted}
        header = _header(self.run) | {"compacted": digests}
        payload = json.dumps(header, sort_keys=True).encode()
        self.header_mac = _mac(self.key, _HEADER, payload)
        self._write(self.header_mac.encode() + b" " + payload)

    def _write(self, line: bytes) -> None:
        data = line + b"\n"
        try:
            while data:
                data = data[os.write(self.fd, data) :]
        except OSError as exc:
            raise IOFault(self.path, exc) from None


def write_key(path: Path, key: bytes) -> None:
    """The key, 0600 in a 0700 directory, written through a fresh file (never a planted one) and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        try:
            os.write(fd, key.hex().encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # gone already after the rename


def read_key(path: Path) -> bytes | None:
    """The key of a journal, or None: missing, not this user's, readable by others, or not a key."""
    try:
        raw = bounded.read_capped(path, 256)
        info = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None
        return bytes.fromhex(raw.decode("ascii"))
    except (bounded.Refused, OSError, ValueError):
        return None


def _header(run: RunResult) -> dict[str, object]:
    return {
        "kind": KIND,
        "version": VERSION,
        "runner": run.runner,
        "fingerprint_key": run.fingerprint.key(),
        "kcgate_version": run.kcgate_version,  # another kcgate may judge a case otherwise: all run again
        "contract_envs": run.fingerprint.contract_envs(),  # a contract whose env changed: its rows run again
        "case_fields": list(CASE_FIELDS),
    }


@dataclass
class Journaled:
    """What ``--resume`` may trust from the journal: verified rows, and the digests of the cases the header
    vouches for in the results file; ``rejected``: rows that did not verify (they run again)."""

    cases: dict[str, CaseResult] = field(default_factory=dict)
    compacted: dict[str, str] = field(default_factory=dict)
    rejected: int = 0


def read_journal(out: Path, run: RunResult, plans: Mapping[str, str]) -> Journaled | None:
    """The journal of ``run``'s runner and fingerprint, verified line by line; None when there is none, when
    its key is gone, or when its header does not verify or names another runner, fingerprint or schema.
    A row is kept only for a planned case whose plan key (``plans``) it names: a changed contract, kernel
    source or kcgate runs the case again. A journal that is not a regular file (a FIFO would block the run
    forever) is a UsageError."""
    path = journal_path(out)
    if not os.path.lexists(path):
        return None
    try:
        lines = bounded.read_capped(path, MAX_RESULTS_BYTES).split(b"\n")
    except bounded.Refused as exc:
        raise UsageError(
            f"{path}: the run's journal {exc}; remove it and run again without --resume"
        ) from None
    key = read_key(key_path(out))
    header = _verified(key, _HEADER, lines[0]) if key else None
    if not isinstance(header, dict) or {k: header.get(k) for k in _header(run)} != _header(run):
        return None
    assert key is not None
    compacted = header.get("compacted")
    found = Journaled(compacted=compacted if isinstance(compacted, dict) else {})
    bound = _ROW + lines[0].partition(b" ")[0] + b"\0"
    for line in lines[1:-1]:  # the last is empty, or torn by a kill mid-write: that case runs again
        plan, row = _verified_row(key, bound, line)
        case = _case(row) if row is not None else None
        if case is None or (case.case_id in plans and plans[case.case_id] != plan):
            found.rejected += 1
        elif case.case_id in plans:
            found.cases[case.case_id] = case
    return found


def _verified(key: bytes, domain: bytes, line: bytes) -> object | None:
    """The JSON of a line whose MAC verifies (nesting bounded), else None; nothing unsigned is parsed."""
    mac, _, payload = line.partition(b" ")
    if not hmac.compare_digest(mac, _mac(key, domain, payload).encode()):
        return None
    try:
        return bounded.loads_json(payload)
    except ValueError:  # Refused is a ValueError too
        return None


def _verified_row(key: bytes, domain: bytes, line: bytes) -> tuple[str, object | None]:
    """A row's plan key and JSON when its MAC verifies, else ("", None)."""
    mac, _, signed = line.partition(b" ")
    plan, _, payload = signed.partition(b" ")
    if not hmac.compare_digest(mac, _mac(key, domain, signed).encode()):
        return "", None
    try:
        return plan.decode("ascii"), bounded.loads_json(payload)
    except ValueError:  # Refused and UnicodeDecodeError are ValueErrors too
        return "", None


def _case(row: object) -> CaseResult | None:
    try:
        return CaseResult.from_row(row)
    except ValueError:
        return None
