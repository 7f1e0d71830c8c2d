"""Plan: contracts × dtype × shape × seed → cases with stable ids, plus each contract's boundary shapes;
filters and sharding. No torch."""

from __future__ import annotations

import fnmatch
import hashlib
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kcgate.contracts import shape_class
from kcgate.contracts.fields import CONTRACT_FIELDS
from kcgate.contracts.records import Contract, Project
from kcgate.contracts.sources import code_digest
from kcgate.errors import UsageError
from kcgate.vocab.case_ids import FRESH, is_fresh
from kcgate.vocab.catalogue import CATALOGUE, family_constraints


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
    shrink_s: float = 0.0  # `kcgate run --shrink-s`: seconds to search a smaller failing shape (0: none)
    plan: str = ""  # contract_digest: what --resume checks a finished case was run under

    def to_json(self) -> dict[str, Any]:
        """The case as JSON (what the run process sends its worker)."""
        return {k: list(v) if k == "shape" else v for k, v in vars(self).items()}  # flat: no asdict deep copy

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Case:
        return cls(**{**d, "shape": tuple(d["shape"])})


def case_id(contract_id: str, dtype: str, shape: tuple[int, ...], seed_index: int) -> str:
    return f"{contract_id}/{dtype}/{'x'.join(map(str, shape))}/s{seed_index}"


def fresh_id(contract_id: str, dtype: str, shape: tuple[int, ...], index: int) -> str:
    """A fresh case's id: beside the replayed ``/s`` cases of a contract, dtype and declared shape."""
    return f"{contract_id}/{dtype}/{'x'.join(map(str, shape))}{FRESH}{index}"


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
    project: Project,
    base_seed: int,
    default_shapes: dict[str, tuple[tuple[int, ...], ...]],
    boundary: bool = False,
    fresh: bool = False,
) -> list[Case]:
    """Every contract's cases; ``boundary``: with each contract's boundary shape (``kcgate run`` and the
    pytest plugin ask for it; ``kcgate.check``, calibration and the library's other callers plan the
    declared shapes only); ``fresh``: with its ``protocol.fresh`` cases (``replay`` keeps them only beside
    cases it replays)."""
    code: dict[str, str] = {}  # module -> code_digest, once per plan: 10,000 contracts share a few kernels
    return [
        case
        for c in project.contracts
        for case in _cases(
            c, base_seed, default_shapes, boundary, contract_digest(c, project.paths, code), fresh
        )
    ]


_CODE_FIELDS = tuple(f.key for f in CONTRACT_FIELDS if f.type == "import")  # kernel, reference, inputs, ...


def contract_digest(c: Contract, roots: tuple[Path, ...] = (), code: dict[str, str] | None = None) -> str:
    """Everything of a contract that can change its cases' results: every field (env, tolerance, kernel,
    classes...), the source files its import strings name (the kernel's module, the reference's, the
    input generator's) and the project's modules they import (``contracts.sources``). ``--resume`` keeps
    a finished case only under the same digest."""
    h = hashlib.sha256(repr(c).encode())  # every field, nested records too (a frozen dataclass's repr)
    for key in _CODE_FIELDS:
        target = str(getattr(c, key, "") or "")
        if ":" in target:
            module = target.partition(":")[0]
            known = code.get(module) if code is not None else None
            if known is None:
                known = code_digest(module, roots)
                if code is not None:
                    code[module] = known
            h.update(f"\0{key}\0{known}".encode())
    return h.hexdigest()[:32]


def _cases(
    c: Contract,
    base_seed: int,
    default_shapes: dict[str, tuple[tuple[int, ...], ...]],
    boundary: bool = True,
    plan: str = "",
    fresh: bool = False,
) -> list[Case]:
    shapes = c.shapes or default_shapes.get(c.op, ())
    derived = boundary_shapes(c, shapes) if boundary else []
    out = []
    for dtype in c.dtypes:
        for shape in (*shapes, *derived):
            seeds = c.protocol.seeds if shape in shapes else 1  # a boundary shape: one seed
            ids = [case_id(c.id, dtype, shape, s) for s in range(seeds)]
            if fresh and shape in shapes:
                ids += [fresh_id(c.id, dtype, shape, f) for f in range(c.protocol.fresh)]
            for s, cid in enumerate(ids):
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
                        plan=plan,
                    )
                )
    return out


def replay(cases: list[Case], held: Mapping[str, int] | None) -> list[Case]:
    """The cases a run compares with a baseline: each case the baseline holds (``held``: case id -> its
    recorded seed) runs on the baseline's seed, so unchanged code reproduces the baseline's verdict; a fresh
    case (``/f0``...) keeps its unpredictable seed and runs only beside a contract, dtype and shape that is
    replayed, so no kernel can be tuned to the baseline's inputs. No baseline (None): no fresh cases, every
    seed is already fresh."""
    if held is None:
        return [c for c in cases if not is_fresh(c.case_id)]
    replayed = {_group(c) for c in cases if c.case_id in held and not is_fresh(c.case_id)}
    out = []
    for c in cases:
        if is_fresh(c.case_id):
            if _group(c) in replayed:
                out.append(c)
        elif c.case_id in held:
            out.append(replace(c, seed=held[c.case_id]))
        else:
            out.append(c)
    return out


def _group(c: Case) -> tuple[str, str, tuple[int, ...]]:
    return c.contract_id, c.dtype, c.shape


# ---- boundary shapes ------------------------------------------------------------------------------

# Classes that draw their own shapes: C-CMP-03's held-out search is the wider form of the same idea.
NO_BOUNDARY = ("C-CMP-03",)
SMALL = 3  # the dimensions a boundary shape does not probe are cut to at most this (the shape stays cheap)


def boundary_shapes(c: Contract, shapes: tuple[tuple[int, ...], ...]) -> list[tuple[int, ...]]:
    """The shape every contract runs beside its declared ones (``protocol.boundary``), derived from the
    first declared shape: the last dimension and the reduction length at a prime near n (off every power of
    two and tile: 1021 for 1024; on a grid of step s, n + s), the other dimensions cut to at most SMALL (an
    odd count of rows where the declared count allows). It respects the family's and the contract's
    shape_constraints (a dimension related to another keeps the declared relation: GQA's heads per kv head)
    and is no declared shape. One shape, one seed: each case costs a worker round trip, and the repository's
    contracts must not run more than 20% longer (docs/ops.md#boundary-shapes); a single row and the smallest
    sizes are C-CMP-03's extremes."""
    if not c.protocol.boundary or c.klass in NO_BOUNDARY or not shapes:
        return []
    base = tuple(int(d) for d in shapes[0])
    names = CATALOGUE[c.op].dims if c.op in CATALOGUE else None
    try:
        cons = shape_class.merge(
            shape_class.parse(
                {str(i): t for i, t in family_constraints(c.op, dict(c.params)).items()}, names, None
            ),
            shape_class.parse({str(i): t for i, t in c.shape_constraints}, names, None),
        )
    except shape_class.ShapeSyntaxError:
        return []  # the loader reports it
    doms = [shape_class.domain(d, cons.get(i, ())) for i, d in enumerate(base)]
    probed = _probed_dims(c.op, base, cons)
    shape = [
        _prime_near(d, doms[i]) if i in probed else doms[i].snap(min(d, SMALL)) for i, d in enumerate(base)
    ]
    fixed = relate_shape(shape, base, cons)
    return [fixed] if fixed is not None and fixed not in shapes else []


def _probed_dims(op: str, base: tuple[int, ...], cons: shape_class.Constraints) -> list[int]:
    """The last dimension and the reduction length, unless a relation ties them to another dimension."""
    entry = CATALOGUE.get(op)
    dims = {len(base) - 1}
    if entry is not None and entry.k_dim is not None:
        dims.add(entry.k_dim % len(base))
    for name in ("length", "k"):  # attention's keys; a product's K where the catalogue gives no k_dim
        if entry is not None and entry.dims and name in entry.dims:
            dims.add(entry.dims.index(name))
    return sorted(i for i in dims if not any(t.ref >= 0 for t in cons.get(i, ())))


def _prime_near(n: int, dom: shape_class.Domain) -> int:
    """The largest prime below n − 1 (off every tile and power of two); on a grid of step > 1, n plus a step."""
    if dom.pow2:
        return n
    if dom.step > 1:
        return dom.snap(n + dom.step, up=True)
    for v in range(n - 2, 1, -1):
        if all(v % p for p in range(2, int(v**0.5) + 1)):
            return v if dom.ok(v) else dom.snap(v)
    return dom.snap(n + 1, up=True)


def relate_shape(
    shape: list[int], base: tuple[int, ...], cons: shape_class.Constraints
) -> tuple[int, ...] | None:
    """The shape with its relations restored (a related dimension follows the one it names, as in the
    declared shape), or None when it cannot satisfy the constraints."""
    out = list(shape)
    for i, terms in cons.items():
        for t in terms:
            if t.ref >= 0 and i < len(out) and t.ref < len(out):
                if t.kind == "same_as":
                    out[i] = out[t.ref]
                elif t.kind == "ratio":
                    out[i] = max(1, round(t.a * out[t.ref]))
                elif t.kind == "multiple_of":
                    k = max(1, base[i] // max(base[t.ref], 1))
                    out[i] = k * out[t.ref]
    result = tuple(out)
    return None if shape_class.violations(result, cons) or min(result) < 1 else result


def with_held_out(cases: list[Case], n: int | None) -> list[Case]:
    """``--held-out N``: every C-CMP-03 case draws N held-out shapes besides the class's extremes."""
    if n is None:
        return cases
    if n < 0:
        raise UsageError(f"--held-out {n}: must be 0 or more, e.g. --held-out 8")
    return [replace(c, held_out=n) if c.klass == "C-CMP-03" else c for c in cases]


def with_shrink(cases: list[Case], seconds: float) -> list[Case]:
    """``--shrink-s S``: a failed case searches S seconds for its smallest failing shape (kcgate.engine.shrink)."""
    if seconds < 0:
        raise UsageError(f"--shrink-s {seconds:g}: must be 0 (no search) or more, e.g. --shrink-s 5")
    return [replace(c, shrink_s=seconds) for c in cases] if seconds else cases


def with_shape(project: Project, text: str | None) -> Project:
    """``--shape 3x7``: every contract whose shapes have that many dimensions runs that shape alone, without
    boundary shapes (the reproduction of a shrunk failure: ``repro_command``)."""
    if not text:
        return project
    try:
        shape = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--shape {text!r}: expected sizes joined by x, e.g. --shape 3x1021") from None
    if not shape or min(shape) < 1:
        raise UsageError(f"--shape {text!r}: every size must be 1 or more, e.g. --shape 3x1021")
    contracts = tuple(
        replace(c, shapes=(shape,), protocol=replace(c.protocol, boundary=False, seeds=1))
        for c in project.contracts
        if _arity(c) in (None, len(shape))
    )
    return replace(project, contracts=contracts)


def _arity(c: Contract) -> int | None:
    dims = CATALOGUE[c.op].dims if c.op in CATALOGUE else None
    if dims is not None:
        return len(dims)
    return len(c.shapes[0]) if c.shapes else None


def repro_command(
    contract_id: str, dtype: str, seed: int, shape: tuple[int, ...], contracts: str = ""
) -> str:
    """The ``kcgate run`` command that reruns a contract's kernel at ``shape`` with a case's own seed (the
    shrunk reproduction of a failure: ``--shape`` plans that shape, ``--seed`` gives its case that seed)."""
    cid = case_id(contract_id, dtype, shape, 0)
    parts = ["kcgate run"]
    if contracts:
        parts += ["--contracts", shlex.quote(contracts)]
    size = "x".join(map(str, shape))
    parts += ["-k", shlex.quote(cid), "--shape", size, "--seed", str(base_seed_for(seed, cid))]
    return " ".join(parts)


def nonzero_phrase(nonzero: tuple[int, ...]) -> str:
    """The sparsest failing input of a shrunk failure, in words (kcgate.engine.shrink.fewest_nonzero)."""
    if len(nonzero) != 2:
        return ""
    k, n = nonzero
    return f"fails with {k} of its {n} input elements nonzero (the rest set to 0)"


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


def for_device(cases: list[Case], project: Project, device: str) -> tuple[list[Case], list[str]]:
    """The cases whose contract's ``devices`` includes ``device`` (a backend name), and the ids of the
    contracts left out. The baseline of this runner is planned the same way, so a contract a PR narrows to
    other devices shows as removed there, which blocks by default."""
    kept = [c for c in cases if runs_on(c, project, device)]
    left = sorted({c.contract_id for c in cases} - {c.contract_id for c in kept})
    return kept, left


def runs_on(case: Case, project: Project, device: str) -> bool:
    """Whether the case's contract's ``devices`` includes ``device`` (one lookup in the project's by-id map)."""
    return device in project.contract(case.contract_id).devices


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
