"""Custom ops with no tolerance written: the bound kcgate derives from the reference (kcgate.numerics.derived)
against torch.testing.assert_close, side by side, on held-out kernels (benchmarks/custom_ops_kernels.py).

Per case (op x kernel x dtype x shape x seed x direction): the library-style kernel and a fused-style one run
on the dtype's inputs; kcgate's bound is derived from the library formulation traced in fp64, output by output
(int outputs must be equal); assert_close compares with the same formulation run on fp32-upcast inputs, cast
to each output's dtype, at its default tolerances. Forward cells also run kcgate's inferred offset probe on
each input the fp64 reference is shift-invariant in (kcgate.numerics.invariance), and the range probes kcgate
infers (kcgate.numerics.domains.plan), as kcgate run does. A false
alarm is a correct kernel failing (on its inputs or under the probe); a wrong variant is caught in a cell
(op, dtype, shape, seed, direction) where the correct library-style kernel passes. Beside the bound, a
candidate gate on the derived bound's own samples (benchmarks/_derived_excess.py, not in kcgate run) is
measured in two forms, rms per row and z-weighted: its false alarms, and what it adds to the bound's catches.
A two-output op's backward draws dY over every output joined, as kcgate run's harness does. Where the bound
passes a 16-bit cell, kcgate run's placement check follows (kcgate.engine.placement: the reference's cast
mutants run in the dtype, held bit for bit to the kernel on this trial and a second one, as kcgate run's two
trials): its false alarms count with the bound's, its catches are the "+cast" column. ``--placement-only``
skips the derived bound (minutes, not hours): every cell's placement verdicts alone, on every kernel.

    python -m benchmarks.custom_ops [--quick] [--seeds 3] [--dtypes float32,bfloat16,float16] [--only NAME,...]
        [--boundary] [--mutants] [--placement-only]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._derived_excess import judge as excess_judge  # noqa: E402
from benchmarks._derived_excess import row_sums  # noqa: E402
from benchmarks._machine import describe  # noqa: E402
from benchmarks.custom_ops_kernels import ENTRIES, Entry  # noqa: E402
from kcgate.calibration.mutate_sites import generate  # noqa: E402
from kcgate.contracts.records import Contract  # noqa: E402
from kcgate.engine.checks.stability import DEFAULT_OFFSET  # noqa: E402
from kcgate.engine.placement import Run, floats, low_dtype, misplaced  # noqa: E402
from kcgate.engine.trial import probe_offset, subnormal_floor  # noqa: E402
from kcgate.numerics import domains  # noqa: E402
from kcgate.numerics.derived import Precision, derive, in_fp64  # noqa: E402
from kcgate.numerics.invariance import invariances  # noqa: E402
from kcgate.numerics.ops.base import BoundArgs, upcast  # noqa: E402
from kcgate.numerics.ops.custom import derived_grads, signature_names  # noqa: E402
from kcgate.numerics.outputs import differentiable, flat, multiple, raw  # noqa: E402
from kcgate.plan import boundary_shapes  # noqa: E402

U32 = float(torch.finfo(torch.float32).eps) / 2
KERNELS_PY = ROOT / "benchmarks" / "custom_ops_kernels.py"
FACTOR = 1.5  # the sensitivity gate's factor (tolerance.excess's default)
GATES = (False, True)  # the candidate gate's two forms: rms error per row, and the z-weighted (family) form


def _u(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).eps) / 2 if dtype.is_floating_point else 0.0


def _flat(x: Any) -> list[torch.Tensor]:
    return list(x) if isinstance(x, (tuple, list)) else [x]


class Case:
    """One cell: inputs, the derived bounds (forward, and gradients), and assert_close's reference."""

    def __init__(
        self,
        e: Entry,
        dtype: torch.dtype,
        shape: tuple[int, ...],
        seed: int,
        backward: bool,
        x: tuple[torch.Tensor, ...] | None = None,
    ) -> None:
        self.e, self.dtype, self.backward = e, dtype, backward
        self.x = x if x is not None else e.inputs(shape, dtype, torch.Generator().manual_seed(seed))
        self.up = upcast(self.x)
        result = e.kernel(*self.x)
        probe = _flat(result)
        out_u = [_u(t.dtype) for t in probe]
        floor = subnormal_floor(BoundArgs(U32, _u(dtype), 8.0, _u(dtype)))
        ba = BoundArgs(U32, max(out_u), 8.0, _u(dtype), seed)
        t0 = time.perf_counter()
        in_fp64(e.kernel, self.up)
        self.t_ref = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = derive(lambda: e.kernel(*self.x), self.x, Precision(_u(dtype), U32, ba.u_out), out_u, seed=seed)
        self.refs, self.bounds = got.refs, [b + floor for b in got.bounds]
        self.spread, self.out_u = got.spread, out_u
        self.ac_refs = [r.to(t.dtype) for r, t in zip(_flat(e.kernel(*upcast32(self.x))), probe)]
        if backward:
            # dY as kcgate's harness draws it: for the output, or for several outputs joined into one vector
            # (kcgate.engine.multi.kernel_output), each output's share cut back by kcgate.numerics.outputs
            target = flat(tuple(("", t) for _, t in raw(result))) if multiple(result) else probe[0]
            self.dy = torch.randn(
                target.shape, generator=torch.Generator().manual_seed(seed + 99), dtype=torch.float64
            )
            self.dy = self.dy.to(target.dtype)
            grads64 = _grads(lambda *a: in_fp64(e.kernel, a), self.up, self.dy.double())
            gba = BoundArgs(U32, _u(dtype), 8.0, _u(dtype), seed)
            gd = derived_grads(e.kernel)(self.up, self.dy.double(), gba)
            it = iter(zip(gd.bounds, gd.spread))
            gb = [next(it) if t.is_floating_point() else (None, None) for t in self.up]
            self.grad_refs = grads64
            self.grad_bounds = [None if b is None else b + floor for b, _ in gb]
            self.grad_spread = [sp for _, sp in gb]
            self.grad_ac = [
                None if g is None else g.to(t.dtype)
                for g, t in zip(_grads(e.kernel, upcast32(self.x), self.dy.float()), self.x)
            ]
        self.t_derived = time.perf_counter() - t0

    def judge(self, kernel: Any) -> tuple[float, bool, str]:
        """(kcgate's worst budget, assert_close passed, the worst output's name)."""
        outs = _flat(kernel(*[t.clone() for t in self.x]))
        names = self.e.outputs
        worst, name, ac_ok = 0.0, "", True
        for i, (o, r, b, a) in enumerate(zip(outs, self.refs, self.bounds, self.ac_refs)):
            if o.is_floating_point():
                budget = float(
                    ((o.double() - r.reshape(o.shape)).abs() / b.reshape(o.shape))
                    .nan_to_num(nan=float("inf"))
                    .max()
                )
            else:
                budget = 0.0 if torch.equal(o.long(), r.reshape(o.shape).long()) else float("inf")
            if budget > worst:
                worst, name = budget, names[i] if i < len(names) else f"output{i}"
            ac_ok &= _close(o, a)
        if self.backward:
            gs = _grads(kernel, self.x, self.dy)
            for j, (g, r, b, a) in enumerate(zip(gs, self.grad_refs, self.grad_bounds, self.grad_ac)):
                if g is None or b is None or a is None:
                    continue
                budget = float(((g.double() - r).abs() / b).nan_to_num(nan=float("inf")).max())
                if budget > worst:
                    names_in = signature_names(self.e.kernel)
                    worst, name = budget, f"grad {names_in[j] if j < len(names_in) else f'input{j}'}"
                ac_ok &= _close(g, a)
        return worst, ac_ok, name

    def excess(self, kernel: Any, weighted: bool) -> str:
        """The candidate derived-excess gate (benchmarks/_derived_excess.py) on this cell's one trial: "" or its
        message for the first tensor (an output, then a gradient) that fails it."""
        outs = _flat(kernel(*[t.clone() for t in self.x]))
        names = self.e.outputs
        tensors = []
        for i, (o, r, sp, u) in enumerate(zip(outs, self.refs, self.spread, self.out_u)):
            if o.is_floating_point():
                name = f"output {names[i] if i < len(names) else i!r}"
                tensors.append((name, o.double() - r.reshape(o.shape), sp, r, u))
        if self.backward:
            names_in = signature_names(self.e.kernel)
            for j, (g, r, sp) in enumerate(
                zip(_grads(kernel, self.x, self.dy), self.grad_refs, self.grad_spread)
            ):
                if g is not None and r is not None and sp is not None:
                    name = f"the gradient of {names_in[j] if j < len(names_in) else f'input{j}'}"
                    tensors.append((name, g.double() - r, sp, r, _u(g.dtype)))
        for name, err, sp, r, u in tensors:
            v = excess_judge(name, [row_sums(err, sp, r, u, weighted)], FACTOR)
            if v is not None and v.failed:
                return v.message()
        return ""


def upcast32(x: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(t.float() if t.is_floating_point() else t for t in x)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        torch.testing.assert_close(a, b)
        return True
    except AssertionError:
        return False


def _grads(fn: Any, x: tuple[torch.Tensor, ...], dy: torch.Tensor) -> list[torch.Tensor | None]:
    leaves = [t.detach().clone().requires_grad_() if t.is_floating_point() else t for t in x]
    result = fn(*leaves)
    diff = [t for t in leaves if t.is_floating_point()]
    if multiple(result):  # each output with its share of the flat dY, as kcgate's harness backpropagates
        outs, dys = differentiable(tuple(("", t) for _, t in raw(result)), dy)
        gs = iter(torch.autograd.grad(outs, diff, dys, allow_unused=True))
    else:
        out = _flat(result)[0]
        gs = iter(torch.autograd.grad(out, diff, dy.to(out.dtype), allow_unused=True))
    return [next(gs) if t.is_floating_point() else None for t in leaves]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one seed, fp32 and bf16, first shape, four ops")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--dtypes", default="float32,bfloat16,float16")
    p.add_argument("--only", default="")
    p.add_argument(
        "--boundary", action="store_true", help="also each op's kcgate boundary shape (kcgate.plan)"
    )
    p.add_argument("--mutants", action="store_true", help="also the wrong variants kcgate mutate plants")
    p.add_argument(
        "--placement-only", action="store_true", help="only the placement check, on every kernel (no bound)"
    )
    a = p.parse_args(argv)
    entries = [e for e in ENTRIES if not a.only or e.name in a.only.split(",")]
    if a.mutants:
        entries = [with_mutants(e) for e in entries]
    dtypes = a.dtypes.split(",")
    seeds = range(a.seeds)
    if a.quick:
        entries = [
            e for e in entries if e.name in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "topk_softmax")
        ]
        dtypes, seeds = ["float32", "bfloat16"], range(1)
    print(describe())
    stats: dict[str, Any] = {
        "cases": 0,
        "kc_alarms": [],
        "ac_alarms": [],
        "budgets": [],
        "cost": [],
        "catch": {},
        "gate_alarms": {w: [] for w in GATES},
        "placement_alarms": [],
        "placement_ms": [],
        "placed": {},
    }
    per: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in entries:
        t0 = time.perf_counter()
        before = (
            len(stats["kc_alarms"]),
            len(stats["ac_alarms"]),
            stats["cases"],
            len(stats["gate_alarms"][True]),
            len(stats["gate_alarms"][False]),
        )
        for dt in dtypes:
            for shape in _shapes(e, a.quick, a.boundary, stats):
                for seed in seeds:
                    if a.placement_only:
                        _placement_cell(e, getattr(torch, dt), shape, seed, stats)
                        continue
                    for backward in (False, True) if e.backward else (False,):
                        _cell(e, getattr(torch, dt), shape, seed, backward, stats, per)
        kc, ac, n = (
            len(stats["kc_alarms"]) - before[0],
            len(stats["ac_alarms"]) - before[1],
            stats["cases"] - before[2],
        )
        gz, ga = len(stats["gate_alarms"][True]) - before[3], len(stats["gate_alarms"][False]) - before[4]
        print(f"{e.name}: {n} correct-kernel cases, false alarms kcgate {kc} (candidate gates: rms {ga}, "
              f"z {gz}) assert_close {ac} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
    if a.placement_only:
        _print_placement(stats)
    else:
        _print(stats, per)
    return stats


SECOND = 7919  # the second trial's seed offset: kcgate run's placement check reads both of a case's trials


def _placement(e: Entry, x: tuple[torch.Tensor, ...], shape: tuple[int, ...], seed: int, k: Any,
               stats: dict[str, Any]) -> str:  # fmt: skip
    """kcgate run's placement check on kernel ``k`` over this cell's inputs and a second draw: "" or what it
    names. Only in 16-bit dtypes (fp32: no-op)."""
    if not low_dtype(x[0].dtype):
        return ""
    x2 = e.inputs(shape, x[0].dtype, torch.Generator().manual_seed(seed + SECOND))
    runs = []
    for xi in (x, x2):
        refs = tuple(floats(in_fp64(e.kernel, upcast(xi))))
        runs.append(Run(xi, tuple(floats(k(*[t.clone() for t in xi]))), refs))
    t0 = time.perf_counter()
    found = misplaced(e.kernel, runs, x[0].dtype)
    stats["placement_ms"].append(1000 * (time.perf_counter() - t0))
    return "" if found is None else f"matches the reference with {found.mutant.change}, at {found.where}"


def _placement_cell(e: Entry, dtype: torch.dtype, shape: tuple[int, ...], seed: int,
                    stats: dict[str, Any]) -> None:  # fmt: skip
    """One cell's placement verdicts alone (``--placement-only``): each correct kernel's (a false alarm where
    it names one), each wrong variant's (where it names one: caught, bound or not)."""
    if not low_dtype(dtype):
        return
    cell = f"{e.name}/{str(dtype)[6:]}/{list(shape)}/s{seed}"
    x = e.inputs(shape, dtype, torch.Generator().manual_seed(seed))
    for kname, k in (("library", e.kernel), ("fused", e.fused), *e.wrong.items()):
        if k is None:
            continue
        try:
            said = _placement(e, x, shape, seed, k, stats)
        except Exception:  # noqa: BLE001 — a planted mutant that raises: no placement verdict
            said = ""
        if kname in ("library", "fused"):
            stats["cases"] += 1
            if said:  # counted in the per-op line's kcgate false alarms too
                stats["placement_alarms"].append(f"{cell} {kname}: {said}")
                stats["kc_alarms"].append(f"{cell} {kname}: {said}")
            continue
        row = stats["placed"].setdefault(f"{e.name}: {kname}", [0, 0])
        row[0] += 1
        row[1] += int(bool(said))
        if said:
            stats.setdefault("placed_cells", []).append(f"{cell} {kname}: {said}")


def _print_placement(stats: dict[str, Any]) -> None:
    print(f"\n16-bit correct-kernel cases: {stats['cases']}; placement false alarms: "
          f"{len(stats['placement_alarms'])}")  # fmt: skip
    for line in stats["placement_alarms"][:30]:
        print("  placement:", line)
    print(f"\n{'wrong variant (16-bit cells)':55s} {'cells':>5s} {'named':>6s}")
    for name, (cells, named) in sorted(stats["placed"].items()):
        if named:
            print(f"{name:55s} {cells:5d} {named:6d}")
    total = [sum(v[i] for v in stats["placed"].values()) for i in (0, 1)]
    print(f"{'total':55s} {total[0]:5d} {total[1]:6d}")
    ms = sorted(stats["placement_ms"])
    if ms:
        print(f"placement check per kernel and cell: median {statistics.median(ms):.1f} ms, p90 "
              f"{ms[int(0.9 * (len(ms) - 1))]:.0f} ms, max {ms[-1]:.0f} ms")  # fmt: skip


def with_mutants(e: Entry) -> Entry:
    """``e`` with a wrong variant per mutant ``kcgate mutate``'s rules plant in its library kernel (and what
    it calls in benchmarks/custom_ops_kernels.py): the module's text mutated, run in a fresh namespace."""
    source = KERNELS_PY.read_text(encoding="utf-8")
    wrong = dict(e.wrong)
    for m in generate(source, e.kernel.__name__):
        module = types.ModuleType(f"mutant_{m.key}")
        sys.modules[module.__name__] = module  # its dataclasses look their module up
        try:
            exec(compile(m.source, str(KERNELS_PY), "exec"), module.__dict__)  # noqa: S102 — our file, mutated
        except Exception:  # noqa: BLE001 — a mutant that does not even import is no variant
            continue
        wrong[f"mutant {m.rule} L{m.line}"] = getattr(module, e.kernel.__name__)
    return replace(e, wrong=wrong)


def _shapes(e: Entry, quick: bool, boundary: bool, stats: dict[str, Any]) -> list[tuple[int, ...]]:
    """The entry's shapes, and with ``boundary`` the one kcgate run adds (kcgate.plan.boundary_shapes), kept
    only where the generator and the fp64 reference take it (kcgate run refuses it otherwise, naming the
    shape_constraints to declare: counted as ``boundary_refused``)."""
    shapes = list(e.shapes[:1] if quick else e.shapes)
    if not boundary:
        return shapes
    c = Contract(id=e.name, klass="C-PRC-01", kernel="m:f", op="custom", shapes=e.shapes)
    for b in boundary_shapes(c, e.shapes):
        try:
            x = e.inputs(b, torch.float32, torch.Generator().manual_seed(0))
            in_fp64(e.kernel, upcast(x))
        except Exception:  # noqa: BLE001 — the reference's own rejection of kcgate's shape
            stats["boundary_refused"] = stats.get("boundary_refused", 0) + 1
            continue
        shapes.append(tuple(b))
    return shapes


def _cell(e: Entry, dtype: torch.dtype, shape: tuple[int, ...], seed: int, backward: bool,
          stats: dict[str, Any], per: dict[tuple[str, str], list[float]]) -> None:  # fmt: skip
    cell = f"{e.name}/{str(dtype)[6:]}/{list(shape)}/s{seed}/{'bwd' if backward else 'fwd'}"
    c = Case(e, dtype, shape, seed, backward)
    stats["cost"].append(c.t_derived / max(c.t_ref, 1e-6))
    stats.setdefault("ms", []).append(1000 * c.t_derived)
    base_ok = True
    for kname, k in (("library", e.kernel), ("fused", e.fused)):
        if k is None:
            continue
        budget, ac_ok, where = c.judge(k)
        stats["cases"] += 1
        stats["budgets"].append(budget)
        per[(e.name, str(dtype)[6:])].append(budget)
        if budget > 1:
            stats["kc_alarms"].append(f"{cell} {kname}: budget {budget:.3g} ({where})")
        if not ac_ok:
            stats["ac_alarms"].append(f"{cell} {kname}")
        gates = [c.excess(k, w) for w in GATES]
        for w, gate in zip(GATES, gates):
            if gate:
                stats["gate_alarms"][w].append(f"{cell} {kname}: {gate}")
        said = _placement(e, c.x, shape, seed, k, stats) if budget <= 1 else ""
        if said:
            stats["kc_alarms"].append(f"{cell} {kname}: {said}")
            stats["placement_alarms"].append(f"{cell} {kname}: {said}")
        if kname == "library":
            base_ok = budget <= 1 and not said
            base_ac = ac_ok
            gate_ok = [base_ok and not g for g in gates]
    probes = []
    for pname, p in [] if backward else _probe_cases(e, c, seed):
        # kcgate run's inferred probes (kcgate.engine.checks.stability), forward only; a range probe the
        # reference (the library formulation) fails is not valid there, as kcgate run skips it
        if pname != "offset" and p.judge(e.kernel)[0] > 1:
            stats.setdefault("probe_invalid", []).append(f"{cell} {pname}")
            continue
        probes.append(p)
        stats.setdefault("probed", defaultdict(int))[pname] += 1
        for kname, k in (("library", e.kernel), ("fused", e.fused)):
            if k is not None and (b := p.judge(k)[0]) > 1:
                stats["kc_alarms"].append(f"{cell} {kname} under the {pname} probe: budget {b:.3g}")
                base_ok = base_ok and kname != "library"
                gate_ok = [g and kname != "library" for g in gate_ok]
    for vname, v in e.wrong.items():
        try:
            budget, ac_ok, where = c.judge(v)
            caught = budget > 1 or any(p.judge(v)[0] > 1 for p in probes)
            gated = [caught or bool(c.excess(v, w)) for w in GATES]
            placed = caught or bool(_placement(e, c.x, shape, seed, v, stats))
        except Exception:  # noqa: BLE001 — a planted mutant that raises fails any test: caught by both
            budget, ac_ok, caught, gated, placed = float("inf"), False, True, [True] * len(GATES), True
        row = stats["catch"].setdefault(f"{e.name}: {vname}", [0, 0, 0, 0, 0, 0])
        row[0] += 1
        row[1] += int(base_ok and caught)
        row[2] += int(base_ac and not ac_ok)
        for i, (ok, g) in enumerate(zip(gate_ok, gated)):
            row[3 + i] += int(ok and g)
        row[5] += int(base_ok and placed)


def _probe_cases(e: Entry, c: Case, seed: int) -> list[tuple[str, Case]]:
    """One case per input the fp64 reference is shift-invariant in, that input offset as kcgate run's
    inferred probe offsets it (DEFAULT_OFFSET, capped per dtype); then one per range probe kcgate run infers
    (kcgate.numerics.domains.plan: exp's and log's limits, subnormals, a large dynamic range), on its inputs
    as kcgate run moves them, at the first level where the fp64 reference is finite and fits the output
    dtype."""
    found = invariances(lambda *a: in_fp64(e.kernel, a), [c.x])
    out = []
    for i, kind in found:
        if kind != "offset":
            continue
        shift = probe_offset(c.dtype, DEFAULT_OFFSET)
        x = tuple((t.double() + shift).to(t.dtype) if j == i else t for j, t in enumerate(c.x))
        out.append(("offset", Case(e, c.dtype, tuple(c.x[0].shape), seed, False, x=x)))
    shifted = {i for i, k in found if k == "offset"}
    for name, got in domains.plan(e.kernel, [c.x], c.dtype, set(), shifted).items():
        x = _range_inputs(e, c, seed, name, got)
        if x is not None:
            out.append((name, Case(e, c.dtype, tuple(c.x[0].shape), seed, False, x=x)))
    return out


def _range_inputs(e: Entry, c: Case, seed: int, name: str, got: tuple[tuple[int, str], ...]) -> Any:
    """Probe ``name``'s inputs at the first level the reference is valid on (None: none is)."""
    for level in [hi for hi, _ in domains.EXP_LEVELS] if name == "exp-range" else [0.0]:
        g = torch.Generator().manual_seed(seed + 1000)
        moved = dict((i, domains.move(name, c.x[i], k, g, level)) for i, k in got)
        x = tuple(moved.get(j, t) for j, t in enumerate(c.x))
        refs = _flat(in_fp64(e.kernel, upcast(x)))
        if all(
            not r.is_floating_point()
            or (
                bool(r.isfinite().all())
                and float(
                    r.abs().max(),
                )
                <= torch.finfo(o.dtype).max / 2
            )
            for r, o in zip(refs, _flat(e.kernel(*x)))
        ):
            return x
    return None


def _print(stats: dict[str, Any], per: dict[tuple[str, str], list[float]]) -> None:
    n = stats["cases"]
    print(f"\ncorrect-kernel cases: {n}")
    if "boundary_refused" in stats:
        print(f"boundary shapes the generator or reference rejects (refused, as kcgate run does): "
              f"{stats['boundary_refused']}")  # fmt: skip
    if stats.get("probed"):
        print("probe cases (forward cells, each on the library and the fused kernel): "
              + ", ".join(f"{k} {v}" for k, v in sorted(stats["probed"].items()))
              + f"; range probes the reference fails (skipped, as kcgate run does): {len(stats.get('probe_invalid', []))}")  # fmt: skip
    print(
        f"false alarms: kcgate {len(stats['kc_alarms'])} (of them the placement check "
        f"{len(stats['placement_alarms'])}), assert_close {len(stats['ac_alarms'])}"
    )
    for line in stats["kc_alarms"][:30]:
        print("  kcgate:", line)
    b = sorted(stats["budgets"])
    if b:
        q = [b[int(f * (len(b) - 1))] for f in (0.1, 0.5, 0.9)]
        print(f"budget used by correct kernels (real error / derived bound): p10 {q[0]:.3g}, p50 {q[1]:.3g}, "
              f"p90 {q[2]:.3g}, max {b[-1]:.3g}")  # fmt: skip
    print(f"\n{'op':28s} {'dtype':9s} {'cases':>5s} {'median budget':>13s} {'max':>8s}")
    for (op, dt), v in sorted(per.items()):
        print(f"{op:28s} {dt:9s} {len(v):5d} {statistics.median(v):13.3g} {max(v):8.3g}")
    for w, form in zip(GATES, ("rms per row", "z-weighted")):
        print(f"candidate derived-excess gate ({form}) on correct kernels: {len(stats['gate_alarms'][w])} false "
              "alarms")  # fmt: skip
        for line in stats["gate_alarms"][w][:20]:
            print("  gate:", line)
    head = (f"{'wrong variant':55s} {'cells':>5s} {'bound':>6s} {'+cast':>6s} {'+rms':>6s} {'+z':>6s} "
            f"{'assert_close':>12s}")  # fmt: skip
    print("\n" + head)
    tot = [0] * 6
    for name, (cells, kc, ac, kr, kz, kp) in sorted(stats["catch"].items()):
        print(f"{name:55s} {cells:5d} {kc:6d} {kp:6d} {kr:6d} {kz:6d} {ac:12d}")
        tot = [t + v for t, v in zip(tot, (cells, kc, ac, kr, kz, kp))]
    print(f"{'total':55s} {tot[0]:5d} {tot[1]:6d} {tot[5]:6d} {tot[3]:6d} {tot[4]:6d} {tot[2]:12d}")
    ms = sorted(stats["placement_ms"])
    if ms:
        print(
            f"placement check per kernel and cell: median {statistics.median(ms):.1f} ms, max {ms[-1]:.0f} ms"
        )
    cost = sorted(stats["cost"])
    if cost:
        print(f"\nderived bound's cost per case, as a multiple of one fp64 reference run: median "
              f"{statistics.median(cost):.0f}x, max {cost[-1]:.0f}x (24 perturbed runs, plus the gradients'); "
              f"median {statistics.median(stats['ms']):.0f} ms, max {max(stats['ms']):.0f} ms per case "
              "(the first case includes importing torch._dynamo for the dispatch mode)")  # fmt: skip


if __name__ == "__main__":
    main()
