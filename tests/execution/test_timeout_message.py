"""A timed-out case says why where the worker knows: a custom op's slow reference (issue 58)."""

from __future__ import annotations

from kcgate.execution.executors import timeout_message
from kcgate.vocab.causes import SLOW_REFERENCE


def test_a_timeout_after_the_worker_named_a_slow_reference_leads_with_it() -> None:
    tail = (
        "--- kcgate case c/float32/8x8/s0\n"
        f"{SLOW_REFERENCE}one fp64 run of the reference took 9.5 s on inputs of shape [8, 8]; the derived "
        "bound runs it up to 24 more times a trial, about 228 s\n"
    )
    got = timeout_message(120, tail)
    assert got.startswith("timed out after 120 s (per-case timeout): the reference is slow: one fp64 run")
    assert "about 228 s" in got and got.endswith("the worker was killed")


def test_a_timeout_without_it_is_a_timeout() -> None:
    assert timeout_message(0.5, "--- kcgate case c\nsome kernel output\n") == (
        "timed out after 0.5 s (per-case timeout); the worker was killed"
    )
