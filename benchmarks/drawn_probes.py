"""The drawn stability probes of custom ops (issue 56: ties, peaked distributions; kcgate.numerics.domains and
kcgate.engine.checks.stability), and the range probes (values near exp's and log's limits, subnormals, a large
dynamic range): which correct kernels get them, their false alarms, and their cost.

Every correct kernel of benchmarks/custom_ops_kernels.py (the library formulation and the fused one) and the
fixed twins of Liger's losses (tests/testing/kernels/losses.py: KL, JSD, TVD) runs as a custom-op contract
written from the docs (C-CMP-01, the library formulation as reference, no tolerance), forward and, where it has
one, ``direction = "both"``, in process through ``kcgate.engine.case.execute_case`` as kcgate run calls it. Each
case runs twice: as kcgate runs it, and with the drawn probes left out; the difference is their cost. A false
alarm is any case that does not pass with the probes where it passes without them.

    python -m benchmarks.drawn_probes [--seeds 2] [--dtypes float32,bfloat16] [--only NAME,...]
                                      [--left-out drawn|range|all]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.custom_ops_kernels import ENTRIES  # noqa: E402
from kcgate.contracts.load import load_project  # noqa: E402
from kcgate.devices.cpu import CpuBackend  # noqa: E402
from kcgate.engine.case import execute_case  # noqa: E402
from kcgate.engine.checks import stability  # noqa: E402
from kcgate.plan import make_plan  # noqa: E402

LOSSES = "tests.testing.kernels.losses"
WORDS = ("ties", "peaked", *stability.RANGE)  # the probes' words in the metrics' notes
LEFT_OUT = "all"  # the baseline leaves out: "drawn" (ties, peaked), "range" (the range probes) or "all"
# (name, kernel, reference, inputs, shape, no_grad)
LOSS_ROWS = (
    ("kl", f"{LOSSES}:kl", f"{LOSSES}:kl_ref", f"{LOSSES}:kl_gen", (8, 128), "y_true"),
    ("jsd_fixed", f"{LOSSES}:jsd_fixed", f"{LOSSES}:jsd_ref", f"{LOSSES}:log_probs_gen", (8, 128), "log_p"),
    ("tvd_fixed", f"{LOSSES}:tvd_fixed", f"{LOSSES}:tvd_ref", f"{LOSSES}:probs_gen", (8, 128), "q"),
)


def rows() -> list[tuple[str, str, str, str, tuple[int, ...], str, bool]]:
    """(name, kernel, reference, inputs, shape, no_grad, backward) of every correct kernel."""
    mod = "benchmarks.custom_ops_kernels"
    out = []
    for e in ENTRIES:
        gen = f"{mod}:{e.inputs.__name__}"
        ref = f"benchmarks.custom_ops_refs:{e.kernel.__name__}"  # the library formulation, its own string
        for k in (e.kernel, e.fused):
            if k is not None:
                out.append(
                    (f"{e.name}/{k.__name__}", f"{mod}:{k.__name__}", ref, gen, e.shapes[0], "", e.backward)
                )
    out += [(n, k, r, g, s, ng, True) for n, k, r, g, s, ng in LOSS_ROWS]
    return out


def contract(row: tuple[str, str, str, str, tuple[int, ...], str, bool], dtype: str, seeds: int) -> str:
    _, kernel, ref, gen, shape, no_grad, backward = row
    lines = [
        'class = "C-CMP-01"',
        'op = "custom"',
        f'kernel = "{kernel}"',
        f'reference = "{ref}"',
        f'inputs = "{gen}"',
        f'dtypes = ["{dtype}"]',
        f"shapes = [{list(shape)}]",
        f'direction = "{"both" if backward else "forward"}"',
        f"protocol = {{ seeds = {seeds} }}",
        *([f'no_grad = ["{no_grad}"]'] if no_grad else []),
    ]
    return "\n".join(lines)


def run(body: str, tmp: Path, drawn: bool) -> list[tuple[str, str, float, dict[str, float], str]]:
    """(case id, status, seconds, probe notes, message) of every case of one contract."""
    f = tmp / "contracts.toml"
    f.write_text(f'[project]\npaths = ["{ROOT}"]\n\n[[contract]]\nid = "c"\n{body}\n')
    project = load_project(f)
    keep = stability._drawn_probes, stability._range_probes
    if not drawn:  # the baseline: every other probe as kcgate runs them
        if LEFT_OUT in ("drawn", "all"):
            stability._drawn_probes = lambda *a, **k: []
        if LEFT_OUT in ("range", "all"):
            stability._range_probes = lambda *a, **k: []
    try:
        out = []
        for case in make_plan(project, 0, {}):
            t0 = time.perf_counter()
            r = execute_case(project, case, CpuBackend())
            notes = {k: v for k, v in r.metrics.extra if any(w in k for w in WORDS)}
            out.append((case.case_id, str(r.status), time.perf_counter() - t0, notes, r.message))
        return out
    finally:
        stability._drawn_probes, stability._range_probes = keep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--only", default="")
    ap.add_argument("--left-out", choices=("drawn", "range", "all"), default="all", help="the baseline lacks")
    a = ap.parse_args(argv)
    global LEFT_OUT
    LEFT_OUT = a.left_out
    only = set(filter(None, a.only.split(",")))
    alarms, cases, probed, t_with, t_without = [], 0, 0, 0.0, 0.0
    with tempfile.TemporaryDirectory() as d:
        for row in rows():
            if only and row[0].split("/")[0] not in only:
                continue
            for dtype in a.dtypes.split(","):
                body = contract(row, dtype, a.seeds)
                without = run(body, Path(d), drawn=False)
                base = {x[0]: x[1] for x in without}
                t_without += sum(x[2] for x in without)
                for cid, status, secs, notes, msg in run(body, Path(d), drawn=True):
                    cases += 1
                    t_with += secs
                    probed += any(k.startswith("inferred_") for k in notes)
                    if status != "pass" and base.get(cid) == "pass":
                        alarms.append((row[0], cid, status, msg[:300]))
                    print(f"{row[0]:44} {cid:40} {status:8} {secs:6.2f}s {sorted(notes)}", flush=True)
    print(f"\n{cases} cases, {probed} with a drawn probe inferred; false alarms: {len(alarms)}")
    print(
        f"time: {t_with:.1f} s with the drawn probes, {t_without:.1f} s without (+{t_with - t_without:.1f} s)"
    )
    for alarm in alarms:
        print("  ALARM", *alarm)
    return 1 if alarms else 0


if __name__ == "__main__":
    sys.exit(main())
