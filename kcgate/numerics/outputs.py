"""A result of several tensors (a tuple, a named tuple or a dict) as named outputs: how a kernel's and a
reference's results are matched, flattened into one vector for the backward's cotangent, and split again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

Parts = tuple[tuple[str, torch.Tensor], ...]


class OutputsMismatch(ValueError):
    """The reference's outputs and the contract's ``outputs`` key disagree: the case is an error."""


def multiple(result: Any) -> bool:
    """Whether a result is several outputs (a one-tensor tuple is one output, as kcgate always read it)."""
    if isinstance(result, dict):
        return True
    return isinstance(result, (tuple, list)) and len(result) > 1


def raw(result: Any) -> tuple[tuple[str | None, Any], ...]:
    """A result's items with the names it carries itself: dict keys (sorted, so that two dicts in different
    insertion orders line up), a named tuple's fields, or None (positional)."""
    if isinstance(result, dict):
        return tuple((str(k), result[k]) for k in sorted(result, key=str))
    fields = getattr(result, "_fields", None)
    if isinstance(result, tuple) and fields:
        return tuple(zip(map(str, fields), result))
    if isinstance(result, (tuple, list)):
        return tuple((None, v) for v in result)
    return ((None, result),)


def reference_parts(result: Any, declared: Sequence[str]) -> Parts:
    """The reference's named outputs: its own names, else the contract's ``outputs``, else out0, out1, ...;
    a declared count that differs from the reference's raises ``OutputsMismatch`` naming the key and fix."""
    items = raw(result)
    if declared and len(declared) != len(items):
        raise OutputsMismatch(
            f"the contract's outputs = {list(declared)} names {len(declared)} output"
            f"{'s' * (len(declared) != 1)}, but the reference returns {len(items)}; fix: give outputs one "
            "name per returned tensor, in order, or remove the key"
        )
    names = [n or (declared[i] if declared else f"out{i}") for i, (n, _) in enumerate(items)]
    for name, (_, v) in zip(names, items):
        if not isinstance(v, torch.Tensor):
            raise OutputsMismatch(
                f"the reference's output {name!r} is a {type(v).__name__}, not a tensor; fix: return tensors only"
            )
    return tuple((n, v) for n, (_, v) in zip(names, items))


def kernel_parts(result: Any, names: Sequence[str]) -> tuple[Parts, str]:
    """The kernel's outputs named as the reference's (by key or field, else by position), or () and why its
    structure differs from the reference's (a missing key, another count, a non-tensor)."""
    items = raw(result)
    want = ", ".join(map(repr, names))
    if isinstance(result, dict):
        got = {n: v for n, v in items}
        if set(got) != set(names):
            missing = [n for n in names if n not in got]
            extra = [n for n in got if n not in names]
            what = "; ".join(
                s
                for s in (
                    f"missing {', '.join(map(repr, missing))}" if missing else "",
                    f"unexpected {', '.join(map(repr, extra))}" if extra else "",
                )
                if s
            )
            return (
                (),
                f"kernel returned outputs {', '.join(map(repr, got))} ({what}); the reference returns {want}",
            )
        pairs = [(n, got[n]) for n in names]
    elif len(items) != len(names):
        return (), (
            f"kernel returned {len(items)} output{'s' * (len(items) != 1)}, the reference returns "
            f"{len(names)} ({want})"
        )
    else:
        pairs = [(n, v) for n, (_, v) in zip(names, items)]
    for n, v in pairs:
        if not isinstance(v, torch.Tensor):
            return (), f"kernel's output {n!r} is a {type(v).__name__}, expected a tensor"
    return tuple(pairs), ""


def flat(parts: Parts) -> torch.Tensor:
    """The outputs as one vector in order (the backward's cotangent is drawn for it), promoted to one dtype."""
    return torch.cat([t.reshape(-1) for _, t in parts])


def split(parts: Parts, vector: torch.Tensor) -> Parts:
    """A flat vector (a cotangent, a bound) cut back into the outputs' shapes, by name."""
    out, at = [], 0
    for name, t in parts:
        n = t.numel()
        out.append((name, vector.reshape(-1)[at : at + n].reshape(t.shape)))
        at += n
    return tuple(out)


def differentiable(parts: Parts, dy: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The float outputs that carry a gradient and each one's share of the flat cotangent ``dy``."""
    outs, dys = [], []
    for (_, t), (_, d) in zip(parts, split(parts, dy)):
        if t.is_floating_point() and t.requires_grad:
            outs.append(t)
            dys.append(d.to(t.dtype))
    return outs, dys
