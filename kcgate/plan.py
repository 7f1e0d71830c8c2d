"""Plan: contracts × dtype × shape × seed → cases with stable ids; filters and sharding. No torch."""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass, replace
from typing import Any

from kcgate.contracts.records import Contract, Project
from kcgate.errors import UsageError


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
    source: str = ""  # Contract.source: the .py a discovered contract is declared in
    held_out: int | None = None  # C-CMP-03: `kcgate run --held-out N` (None: the contract's held_out)

    def to_json(self) -> dict[str, Any]:
        """The case as JSON (what the run process sends its worker)."""
        return {k: list(v) if k == "shape" else v for k, v in vars(self).items()}  # flat: no asdict deep copy

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Case:
        return cls(**{**d, "shape": tuple(d["shape"])})


def case_id(contract_id: str, dtype: str, shape: tuple[int, ...], seed_index: int) -> str:
    return f"{contract_id}/{dtype}/{'x'.join(map(str, shape))}/s{seed_index}"


SEED_MASK = (1 << 63) - 1  # case seeds are non-negative 63-bit ints (torch.Generator.manual_seed takes them)


def _case_hash(cid: str) -> int:
    return int.from_bytes(hashlib.sha256(cid.encode()).digest()[:8], "little") & SEED_MASK


def derive_seed(base: int, cid: str) -> int:
    """Per-case seed from the run's base seed: distinct across cases, unpredictable while the base is.

    The map is invertible (``base_seed_for``), so a case's recorded seed gives the --seed that reruns it."""
    return (base ^ _case_hash(cid)) & SEED_MASK


def base_seed_for(case_seed: int, cid: str) -> int:
    """The --seed with which ``kcgate run -k CASE_ID`` gives case ``cid`` the seed ``case_seed`` again."""
    return (case_seed ^ _case_hash(cid)) & SEED_MASK


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
                    Case(
                        cid,
                        c.id,
                        c.klass,
                        c.op,
                        dtype,
                        shape,
                        s,
                        derive_seed(base_seed, cid),
                        c.line,
                        c.source,
                    )
                )
    return out


def with_held_out(cases: list[Case], n: int | None) -> list[Case]:
    """``--held-out N``: every C-CMP-03 case draws N held-out shapes besides the class's extremes."""
    if n is None:
        return cases
    if n < 0:
        raise UsageError(f"--held-out {n}: must be 0 or more, e.g. --held-out 8")
    return [replace(c, held_out=n) if c.klass == "C-CMP-03" else c for c in cases]


def select(cases: list[Case], keyword: str | None, dtypes: list[str] | None) -> list[Case]:
    """``-k`` matches a substring or glob of the case id, or a class id; ``--dtype`` filters dtypes.

    A keyword that is exactly a case id selects that case alone (``.../s1`` does not also take ``s10``):
    the PR comment's reproduce command relies on it."""
    exact = [c for c in cases if c.case_id == keyword]
    if exact:
        cases = exact
    elif keyword:
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
