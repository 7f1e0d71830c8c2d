"""The forms of a case id that readers of results tell apart without planning anything (no torch, no
contracts): a fresh case's id ends in ``/f0``, ``/f1``, ... (kcgate.plan.fresh_id)."""

from __future__ import annotations

FRESH = "/f"  # a fresh case's id ends in /f0, /f1, ...: a seed never replayed from a baseline


def is_fresh(cid: str) -> bool:
    """Whether a case id names a fresh case (its seed is drawn anew on every run, never replayed)."""
    _, sep, tail = cid.rpartition(FRESH)
    return bool(sep) and tail.isdigit()
