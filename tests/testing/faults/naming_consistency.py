"""Issue 48's "one bug, one name": every bug of the naming sets (tuning, held-out, shipped) diagnosed on seeds
0-2 at its declared shape and once at the boundary shape kcgate derives from it (kcgate.plan.boundary_shapes),
as a run does. A bug is consistent when every failing case gets the same cause.

``python -m tests.testing.faults.naming_consistency [sets]`` (tuning, held-out, shipped; ``d``: set D) prints
each bug's causes per case and the count of consistent bugs; an inconsistent one is listed with what differs.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from tests.testing.faults.naming_sets import HELD_OUT, TUNING, Named
from tests.testing.faults.naming_sets_d import SET_D
from tests.testing.faults.naming_sets_shipped import SHIPPED
from tests.testing.faults.semantic import diagnose

SEEDS = (0, 1, 2)


def boundary(n: Named) -> tuple[int, ...] | None:
    """The boundary shape a run adds beside the bug's declared shape (None where it derives none)."""
    from kcgate.contracts.records import Contract, Protocol
    from kcgate.plan import boundary_shapes

    b = n.bug
    c = Contract(
        id=b.id,
        klass=b.klass,
        kernel="x:y",
        op=b.op,
        dtypes=(b.dtype,),
        protocol=Protocol(seeds=1, trials=2),
        params=b.params,
        direction=b.direction,
    )
    got = boundary_shapes(c, (b.shape,))
    return got[0] if got else None


def runs(n: Named) -> list[tuple[str, str, str]]:
    """(where, status, cause) per seed at the declared shape, then at the boundary shape (seed 0)."""
    out = []
    for s in SEEDS:
        f = diagnose(n.bug, s)
        out.append((f"seed {s}", f.status, f.signature.cause if f.signature else "-"))
    shape = boundary(n)
    if shape is not None:
        f = diagnose(replace(n.bug, shape=shape), 0)
        out.append((f"boundary {shape}", f.status, f.signature.cause if f.signature else "-"))
    return out


def main(argv: list[str]) -> int:
    sets = {"tuning": TUNING, "held-out": HELD_OUT, "shipped": tuple(s.named for s in SHIPPED), "d": SET_D}
    chosen = argv or ["tuning", "held-out", "shipped"]  # set D on request (``d``): counted apart
    consistent = total = 0
    for name in chosen:
        for n in sets[name]:
            got = runs(n)
            causes = {c for _, st, c in got if st == "fail"}
            total += 1
            consistent += len(causes) <= 1
            mark = "one name " if len(causes) <= 1 else "DIFFERS  "
            print(f"{mark} {name:9s} {n.bug.id:44s} " + "; ".join(f"{w}: {st} {c}" for w, st, c in got))
    print(f"one name on every failing case (seeds {SEEDS} and the boundary shape): {consistent}/{total} bugs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
