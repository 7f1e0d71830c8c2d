"""Plan: contracts × dtype × shape × seed → cases with stable ids; filters and sharding. No torch."""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass

from kcgate.errors import UsageError
from kcgate.spec import Contract, Project


@dataclass(frozen=True)
class Case:
    """One unit of work. ``case_id`` is stable across runs; ``seed`` is not (unless --seed is given)."""

    case_id: str
    contract_id: str
    klass: str
    op: str
    dtype: str
    shape: tuple[int, ...]
    seed_index: int
    seed: int
    line: int | None = None


def case_id(contract_id: str, dtype: str, shape: tuple[int, ...], seed_index: int) -> str:
    return f"{contract_id}/{dtype}/{'x'.join(map(str, shape))}/s{seed_index}"


def derive_seed(base: int, cid: str) -> int:
    """Per-case seed from the run's base seed: independent across cases, reproducible with --seed."""
    return int.from_bytes(hashlib.sha256(f"{base}:{cid}".encode()).digest()[:8], "little") >> 1


def make_plan(
    project: Project, base_seed: int, default_shapes: dict[str, tuple[tuple[int, ...], ...]]
) -> list[Case]:
    return [case for c in project.contracts for case in _cases(c, base_seed, default_shapes)]


def _cases(c: Contract, base_seed: int, default_shapes: dict[str, tuple[tuple[int, ...], ...]]) -> list[Case]:
    shapes = c.shapes or default_shapes.get(c.op, ())
    out = []
    for dtype in c.dtypes:
        for shape in shapes:
            for s in range(c.protocol.seeds):
                cid = case_id(c.id, dtype, shape, s)
                out.append(
                    Case(cid, c.id, c.klass, c.op, dtype, shape, s, derive_seed(base_seed, cid), c.line)
                )
    return out


def select(cases: list[Case], keyword: str | None, dtypes: list[str] | None) -> list[Case]:
    """``-k`` matches a substring or glob of the case id, or a class id; ``--dtype`` filters dtypes."""
    if keyword:
        cases = [c for c in cases if _matches(c, keyword)]
    if dtypes:
        cases = [c for c in cases if c.dtype in dtypes]
    return cases


def _matches(c: Case, keyword: str) -> bool:
    alts = [k.strip() for k in keyword.split(" or ")]
    return any(k in c.case_id or fnmatch.fnmatchcase(c.case_id, k) or k == c.klass for k in alts if k)


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text!r}: expected i/N, e.g. --shard 2/3") from None
    if not 1 <= i <= n:
        raise UsageError(f"--shard {text!r}: need 1 <= i <= N, e.g. --shard 1/{max(n, 2)}")
    return i, n


def shard(cases: list[Case], spec: tuple[int, int] | None) -> list[Case]:
    """Deterministic split by a hash of the case id: stable when contracts are added or removed."""
    if spec is None:
        return cases
    i, n = spec
    return [c for c in cases if int(hashlib.sha256(c.case_id.encode()).hexdigest()[:8], 16) % n == i - 1]
