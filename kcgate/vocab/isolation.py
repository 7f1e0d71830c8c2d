"""Isolation modes of ``kcgate run --isolation``: the one table, read by the executors and by the CLI's
completion (which must not import the executors)."""

from __future__ import annotations

ISOLATION_MODES: tuple[str, ...] = (
    "process",  # each case in a worker process: a crash or hang costs one case
    "none",  # in this process (debugging; a crash ends the run)
)
