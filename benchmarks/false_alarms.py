"""False alarms: correct kernels through kcgate, over many seeds; a correct kernel must never fail (issue 32).

The corpus (tests/testing/kernels/correct.py) holds correct kernels that are not the gate's own reference:
16-bit eager composites as transformers and vLLM write them, fp32-upcast composites, textbook formulas,
tiled / blocked / split-K / online-softmax orders and torch's own kernels where torch's op is not the
reference; issue 46's held-out library formulations (tests/testing/kernels/heldout.py: the Triton tutorial's
two-pass layer norm with large means, forward and backward; transformers' rope with run-time fp32 angles;
flash-attention's ``attention_ref(upcast=False)``; vLLM's and transformers' eager GQA causal attention,
Lq = Lk and Lq != Lk) join it, and so does held-out set B (tests/testing/kernels/heldout_b.py: xformers,
apex, llm.c, Meta's llama and Liger's Gemma norm), written after the thresholds were set; ``--set heldout-b``
runs it alone, to count it apart. ``--set shipped-fixed`` runs instead the fixed twins of the 20 shipped bugs
(tests/testing/faults/shipped_fixed.py), each under exactly its bug's contract in naming_sets_shipped.py, at the
declared shape and its boundary shape, and prints per bug the fixed status per seed and shape beside the bug's
verdict per seed (that set's runner). Each other set runs under every class that applies to its family (``CLASSES[cid].ops``),
in each of its dtypes, forward and, where it is differentiable, with ``direction = "both"``, written as a new
user writes the contract from the docs, at every shape kcgate adds (its boundary shape, as ``kcgate run``
plans it) and, on every other seed, at an odd declared shape (``odd_shape``: primes, odd head dims) instead
of the entry's. Every case runs in this process (``kcgate.engine.case.execute_case``, as
tests/ops/test_families.py does), one base seed after another.

A false alarm is any case that does not pass: FAIL, ERROR or REFUSED (kcgate chose the probe inputs). The
table gives the rate with its one-sided 95% upper bound (Clopper-Pearson; 3/n, the rule of three, at 0
alarms), per family, class, dtype and kind, and lists every alarm with its message.

    python -m benchmarks.false_alarms [--seeds 5] [--only NAME,...] [--classes C-PRC-01,...]
        [--dtypes float32,...] [--seed0 0] [--shapes alternate|declared|odd] [--no-boundary]
        [--set all|tuned|heldout-b|shipped-fixed] [--quick] [--json out.json]

``--json out.json`` also appends each case to ``out.jsonl`` as it runs, and each alarm is printed to stderr
when it happens: a long run stopped early still gives its count.

``--quick``: three held-out kernels, C-PRC-01, bf16, one seed (tests/test_benchmarks_smoke.py).

A contract the loader rejects (a class that needs keys a plain contract has not got) is listed as
"not run", never counted. Takes ~1-2 minutes a seed on one core.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ALARM = ("fail", "error", "refused")
# Classes that assert more than numerical correctness, left out unless --all-classes: the corpus kernels are
# written to compute the right numbers, not to propagate NaN/Inf as torch does, to police out-of-range
# indices, or to give bitwise-equal rows at every batch size; failing those is the class working.
NOT_NUMERIC = {
    "C-EXC-01": "special-value semantics (NaN/Inf propagation)",
    "C-EXC-02": "the out-of-range index policy",
    "C-ORD-03": "bitwise batch invariance",
}


@dataclass(frozen=True)
class Outcome:
    entry: str
    op: str
    kind: str
    klass: str
    dtype: str
    direction: str
    seed: int
    status: str
    message: str
    seconds: float = 0.0
    cause: str = ""  # the signature's cause ("excess-error": the sensitivity gate), or the status
    shape: str = ""  # "declared", "odd" (declared) or "boundary" (the shape kcgate adds)
    note: bool = False  # passed with a limitation or inconclusive note (kcgate.results.records.PASS_NOTES)
    dims: str = ""  # the case's shape, "1x4x1x113x59"
    budget: float | None = None  # measured error / allowed error
    drawn: int = 0  # trials the sequential test added (kcgate.engine.sequential: near the line only)

    @property
    def why(self) -> str:
        return self.cause or self.status

    @property
    def alarm(self) -> bool:
        return self.status in ALARM


def upper_95(k: int, n: int) -> float:
    """One-sided 95% Clopper-Pearson upper bound on a rate from k events in n trials (3/n-ish at k = 0)."""
    if n == 0:
        return 1.0
    if k >= n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(60):  # bisection on P(X <= k | p) = 0.05
        mid = (lo + hi) / 2
        if _binom_cdf(k, n, mid) > 0.05:
            lo = mid
        else:
            hi = mid
    return hi


def _binom_cdf(k: int, n: int, p: float) -> float:
    if p <= 0:
        return 1.0
    if p >= 1:
        return 0.0 if k < n else 1.0
    logp, logq = math.log(p), math.log1p(-p)
    return sum(
        math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * logp + (n - i) * logq)
        for i in range(k + 1)
    )


def odd_shape(e: Any) -> tuple[int, ...]:
    """The entry's shape with every dimension of 5 or more at the largest prime below it (an odd head dim,
    a prime length: off every power of two and tile), snapped to the family's constraints (rope's even
    head dim) and its relations restored (GQA's heads per kv head); the entry's own where none fits."""
    from kcgate.contracts import shape_class
    from kcgate.plan import _prime_near, relate_shape
    from kcgate.vocab.catalogue import dims_of, family_constraints

    try:
        cons = shape_class.parse(
            {str(i): t for i, t in family_constraints(e.op, dict(e.params)).items()}, dims_of(e.op), None
        )
    except (KeyError, shape_class.ShapeSyntaxError):
        return e.shape
    doms = [shape_class.domain(d, cons.get(i, ())) for i, d in enumerate(e.shape)]
    shape = [_prime_near(d + 2, doms[i]) if d >= 5 else d for i, d in enumerate(e.shape)]
    fixed = relate_shape(shape, e.shape, cons)
    return fixed if fixed is not None else e.shape


def entries(which: str) -> tuple[Any, ...]:
    """The kernels of ``--set``: the tuned corpus and issue 46's held-out set, held-out set B (written after
    the thresholds were set, counted apart), or all of them."""
    from tests.testing.kernels.correct import CORPUS
    from tests.testing.kernels.heldout import HELD_OUT
    from tests.testing.kernels.heldout_b import HELD_OUT_B

    sets = {"tuned": (*CORPUS, *HELD_OUT), "heldout-b": HELD_OUT_B}
    return sets[which] if which in sets else (*CORPUS, *HELD_OUT, *HELD_OUT_B)


def contracts(
    only: set[str] | None,
    classes: set[str] | None,
    dtypes: set[str] | None,
    every: bool = False,
    which: str = "all",
) -> list[tuple[Any, str, str, str]]:
    """(entry, class, dtype, direction) for every corpus entry x applicable class x dtype x direction."""
    from kcgate.vocab.classes import CLASSES

    out = []
    for e in entries(which):
        if only and e.name not in only:
            continue
        for cid, cls in CLASSES.items():
            if e.op not in cls.ops or (classes and cid not in classes) or cid in e.skip:
                continue
            if not every and not classes and cid in NOT_NUMERIC:
                continue
            for dt in e.dtypes:
                if dtypes and dt not in dtypes:
                    continue
                out.append((e, cid, dt, "forward"))
                if e.backward and cls.backward:
                    out.append((e, cid, dt, "both"))
    return out


def load(
    rows: list[tuple[Any, str, str, str]], tmp: Path, odd: bool = False
) -> tuple[Any, list[tuple[str, str]]]:
    """One project of every contract the loader accepts; the rejected ones with the loader's reason.
    ``odd``: each declares its entry's ``odd_shape``."""
    from kcgate.contracts.load import load_project
    from kcgate.errors import ContractsError
    from tests.testing.kernels.correct import toml

    head = f'[project]\npaths = ["{ROOT}"]\n\n'
    good, rejected = [], []
    for e, cid, dt, direction in rows:
        text = toml(e, cid, dt, direction, shape=odd_shape(e) if odd else None)
        f = tmp / "one.toml"
        f.write_text(head + text)
        try:
            load_project(f)
        except ContractsError as exc:
            rejected.append((f"{e.name} {cid} {dt} {direction}", str(exc).splitlines()[-1][:200]))
            continue
        good.append(text)
    f = tmp / "contracts.toml"
    f.write_text(head + "\n".join(good))
    return load_project(f), rejected


def run(
    projects: dict[str, Any],
    seeds: range,
    meta: dict[str, Any],
    shapes: str = "alternate",
    boundary: bool = True,
    log: Path | None = None,
) -> list[Outcome]:
    """Every case of one project per seed: ``shapes`` "declared" or "odd" always that one, "alternate" the
    declared shapes on even seeds and the odd ones on odd seeds; with each contract's boundary shape.
    ``log``: each outcome appended as one JSON line as it comes (a run stopped early still counts)."""
    from kcgate.devices.cpu import CpuBackend
    from kcgate.engine.case import execute_case
    from kcgate.plan import make_plan
    from kcgate.results.records import is_pass_note

    backend = CpuBackend()
    out: list[Outcome] = []
    t0 = time.perf_counter()
    for seed in seeds:
        which = shapes if shapes != "alternate" else ("odd" if seed % 2 else "declared")
        project = projects[which]
        declared = {c.id: set(c.shapes) for c in project.contracts}
        for case in make_plan(project, seed, {}, boundary=boundary):
            if len(out) % 200 == 0:
                k = sum(o.alarm for o in out)
                print(f"  {len(out)} cases, {k} alarms, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            r = execute_case(project, case, backend)
            e, direction = meta[case.contract_id]
            out.append(
                Outcome(
                    e.name,
                    e.op,
                    e.kind,
                    case.klass,
                    case.dtype,
                    direction,
                    seed,
                    r.status,
                    r.message,
                    r.duration_s,
                    r.signature.cause if r.signature is not None else "",
                    which if tuple(case.shape) in declared[case.contract_id] else "boundary",
                    is_pass_note(r.status, r.message),
                    "x".join(str(n) for n in case.shape),
                    r.metrics.budget_used,
                    _drawn(r.metrics.extra),
                )
            )
            if out[-1].alarm:
                o = out[-1]
                print(
                    f"  ALARM {o.entry} {o.klass} {o.dtype} {o.direction} {o.dims} seed {o.seed}: "
                    f"{o.status}: {o.message[:300]}",
                    file=sys.stderr,
                )
            if log is not None:
                with log.open("a") as f:
                    f.write(json.dumps(out[-1].__dict__) + "\n")
    return out


def _drawn(extra: Any) -> int:
    """The trials the sequential test added to a case (the sensitivity gate's and the signal check's)."""
    e = dict(extra)
    return int(e.get("excess_extra_trials", 0) + e.get("signal_extra_trials", 0))


@dataclass(frozen=True)
class ShippedFixed:
    """A shipped bug's fixed twin, as an entry of ``run``'s meta."""

    name: str
    op: str
    kind: str = "shipped-fixed"


def shipped_project(only: set[str] | None = None) -> tuple[Any, dict[str, Any]]:
    """``--set shipped-fixed``: one contract per shipped bug (``only``: those ids), its bug's
    (``semantic.bug_contract``) with the fixed twin for the kernel and the bug's shape declared; the meta
    ``run`` reads."""
    from dataclasses import replace

    from kcgate.contracts.policy import Policy
    from kcgate.contracts.records import Project
    from tests.testing.faults.naming_sets_shipped import SHIPPED
    from tests.testing.faults.semantic import bug_contract
    from tests.testing.faults.shipped_fixed import FIXED

    mod, out, meta = "tests.testing.faults.shipped_fixed", [], {}
    for s in SHIPPED:
        bug = s.named.bug
        if only and bug.id not in only:
            continue
        out.append(replace(bug_contract(bug, f"{mod}:{FIXED[bug.id]}"), shapes=(bug.shape,)))
        meta[bug.id] = (ShippedFixed(bug.id, bug.op), bug.direction)
    project = Project(ROOT / "contracts.toml", "shipped-fixed", tuple(out), Policy(), paths=(ROOT,))
    return project, meta


def shipped_lines(outcomes: list[Outcome], seeds: range, only: set[str] | None = None) -> list[str]:
    """Per shipped bug: its fixed twin's status per seed and shape, and the bug's verdict per seed (its set's
    runner, naming_sets.measure), with the count of bugs caught per seed."""
    from tests.testing.faults.naming_sets import measure
    from tests.testing.faults.naming_sets_shipped import AMENDED, SHIPPED

    named = tuple(s.named for s in SHIPPED if not only or s.named.bug.id in only)
    rows = measure(named, tuple(seeds), AMENDED)
    caught = dict.fromkeys(seeds, 0)
    lines = ["| bug | fixed twin, per seed and shape | bug, per seed |", "|---|---|---|"]
    for n, got in rows:
        fixed = [f"s{o.seed} {o.dims} {o.status} {_budget(o)}" for o in outcomes if o.entry == n.bug.id]
        for seed, g in zip(seeds, got, strict=True):
            caught[seed] += g[0] != "missed"
        bug = ", ".join(f"s{seed} {g[1]} {g[2] or '-'}" for seed, g in zip(seeds, got, strict=True))
        lines.append(f"| {n.bug.id} | {'; '.join(fixed)} | {bug} |")
    per_seed = ", ".join(f"seed {s} {k}/{len(rows)}" for s, k in caught.items())
    return [*lines, "", f"shipped bugs caught (fail under the same contract): {per_seed}"]


def _budget(o: Outcome) -> str:
    return "" if o.budget is None else f"{o.budget:.2g}"


def table(outcomes: list[Outcome], key: str) -> list[str]:
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[str(getattr(o, key))].append(o)
    lines = [
        f"| {key} | cases | false alarms | rate | 95% upper | s/case |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in sorted(groups):
        g = groups[name]
        k = sum(o.alarm for o in g)
        t = sum(o.seconds for o in g) / len(g)
        lines.append(f"| {name} | {len(g)} | {k} | {k / len(g):.2g} | {upper_95(k, len(g)):.2g} | {t:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--only", default="", help="corpus entry names (shipped-fixed: bug ids), comma-separated")
    ap.add_argument(
        "--classes", default="", help="class ids, comma-separated (default: every one that applies)"
    )
    ap.add_argument("--dtypes", default="")
    ap.add_argument("--all-classes", action="store_true", help="also the classes in NOT_NUMERIC")
    ap.add_argument("--json", default="", help="write every outcome here")
    ap.add_argument("--shapes", default="alternate", choices=("alternate", "declared", "odd"))
    ap.add_argument("--no-boundary", action="store_true", help="without the shapes kcgate adds")
    ap.add_argument(
        "--set",
        default="all",
        choices=("all", "tuned", "heldout-b", "shipped-fixed"),
        help="tuned: correct.py and heldout.py; heldout-b: held-out set B alone (counted apart); "
        "shipped-fixed: the shipped bugs' fixed twins under their bugs' contracts, beside the bugs",
    )
    ap.add_argument("--quick", action="store_true", help="three held-out kernels, C-PRC-01, bf16, one seed")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.classes, args.dtypes = 1, "C-PRC-01", "bfloat16"
        args.only = args.only or "flash-attention-ref,vllm-ref-gqa-causal,tutorial-layernorm"
    sys.path.insert(0, str(ROOT))
    import torch

    torch.set_num_threads(1)
    split = lambda s: set(s.split(",")) if s else None  # noqa: E731
    shipped = args.set == "shipped-fixed"
    rows = (
        []
        if shipped
        else contracts(split(args.only), split(args.classes), split(args.dtypes), args.all_classes, args.set)
    )
    t0 = time.perf_counter()
    seeds = range(args.seed0, args.seed0 + args.seeds)
    kinds = {args.shapes} if args.shapes != "alternate" else {"odd" if s % 2 else "declared" for s in seeds}
    log = Path(args.json + "l") if args.json else None  # out.json -> out.jsonl, one line a case
    if shipped:  # the bug's declared shape and its boundary shape, never an odd one
        project, meta = shipped_project(split(args.only))
        projects, rejected, args.shapes = {"declared": project}, [], "declared"
        outcomes = run(projects, seeds, meta, args.shapes, not args.no_boundary, log)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            projects, rejected = {}, []
            for kind in sorted(kinds):
                projects[kind], lost = load(rows, Path(tmp), odd=kind == "odd")
                rejected += [(f"{what} ({kind} shape)", why) for what, why in lost]
            meta = {f"{e.name}-{cid}-{dt}-{d}": (e, d) for e, cid, dt, d in rows}
            outcomes = run(projects, seeds, meta, args.shapes, not args.no_boundary, log)
    took = time.perf_counter() - t0
    k, n = sum(o.alarm for o in outcomes), len(outcomes)
    contracts_n = max(len(p.contracts) for p in projects.values())
    print(
        f"false alarms: {k} of {n} cases ({contracts_n} contracts x seeds "
        f"{args.seed0}..{args.seed0 + args.seeds - 1}); rate {k / max(n, 1):.3g}, "
        f"95% upper bound {upper_95(k, n):.3g} (Clopper-Pearson; rule of three 3/n = {3 / max(n, 1):.3g}); "
        f"{took:.0f} s"
    )
    notes = [o for o in outcomes if o.note]
    print(f"passed with a note (limitation or inconclusive, tracked as drift): {len(notes)} of {n}")
    drew = [o for o in outcomes if o.drawn]
    print(
        f"drew more trials (the sequential test, near the line): {len(drew)} of {n} cases, "
        f"{sum(o.drawn for o in drew)} trials added"
    )
    for key in ("op", "klass", "dtype", "direction", "kind", "shape"):
        print()
        print("\n".join(table(outcomes, key)))
    causes: dict[str, int] = defaultdict(int)
    for o in outcomes:
        if o.alarm:
            causes[o.why] += 1
    print("\nfalse alarms by cause: " + (", ".join(f"{c} {n}" for c, n in sorted(causes.items())) or "none"))
    if rejected:
        print(f"\nnot run ({len(rejected)} contracts the loader rejects):")
        for what, why in rejected:
            print(f"  {what}: {why}")
    for o in notes:
        print(
            f"  note: {o.entry} {o.klass} {o.dtype} {o.direction} {o.shape} seed {o.seed}: {o.message[:300]}"
        )
    alarms = [o for o in outcomes if o.alarm]
    if alarms:
        print("\nfalse alarms:")
        for o in alarms:
            print(
                f"  {o.entry} {o.klass} {o.dtype} {o.direction} {o.shape} {o.dims} seed {o.seed}: {o.status}: "
                f"{o.message[:300]}"
            )
    if shipped:
        print()
        print("\n".join(shipped_lines(outcomes, seeds, split(args.only))))
    if args.json:
        Path(args.json).write_text(json.dumps([o.__dict__ for o in outcomes], indent=0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
