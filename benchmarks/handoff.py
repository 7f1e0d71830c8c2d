"""Benchmark: handing the parsed contracts from ``kcgate run`` to its worker, ``frozen_json`` against ``pickle``.

Run: ``python benchmarks/handoff.py [--contracts 10000] [--repeats 7]``.

The parent parses contracts.toml once and sends the ``Project`` to each worker in its init line; the worker
rebuilds it. Two ways, timed side by side in this process (interleaved, so load on the machine hits both):

- ``frozen_json`` (what kcgate did): ``json.dumps(encode(project))`` in the parent, then
  ``decode(Project, json.loads(text))`` in the worker;
- ``pickle`` (what kcgate does now, ``kcgate.execution.handoff``): ``pickle.dumps(project)`` base64-encoded
  (the init line is a JSON line), then ``pickle.loads(b64decode(...))`` with the cyclic GC paused;
- ``json+nogc``: the JSON codec with the GC paused in the decode too, to show what pausing alone buys.

The project is the repository's contracts.toml with its contracts repeated to ``--contracts`` (as
validate_speed.py builds it). Each side's decoded project is checked equal to the parsed one. Prints the
medians and minima, wall and CPU time (steadier on a loaded machine), of the parent's encode, the worker's
decode and the round trip, and the bytes sent.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import ROOT, describe  # noqa: E402
from validate_speed import make_contracts  # noqa: E402

sys.path.insert(0, str(ROOT))
from kcgate.contracts.load import load_project  # noqa: E402
from kcgate.contracts.records import Project  # noqa: E402
from kcgate.execution import handoff  # noqa: E402
from kcgate.results.baseline import paused_gc  # noqa: E402
from tests.testing.frozen_json import decode, encode  # noqa: E402


def frozen_json_encode(project: Project) -> str:
    return json.dumps(encode(project))


def frozen_json_decode(text: str) -> Project:
    return decode(Project, json.loads(text))


def frozen_json_decode_gc_paused(text: str) -> Project:
    with paused_gc():
        return frozen_json_decode(text)


WAYS: dict[str, tuple[Callable[[Project], str], Callable[[str], Any]]] = {
    "frozen_json": (frozen_json_encode, frozen_json_decode),  # before: the worker decoded with the GC on
    "pickle": (handoff.encode, handoff.decode),  # now: kcgate.execution.handoff, as shipped (GC paused)
    "json+nogc": (frozen_json_encode, frozen_json_decode_gc_paused),  # fairness: the old codec, GC paused too
}


def timed(fn: Callable[[Any], Any], arg: Any) -> tuple[float, float, Any]:
    """(wall, CPU) seconds of ``fn(arg)``, and its value; CPU time is steadier on a loaded machine."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn(arg)
    return time.perf_counter() - w0, time.process_time() - c0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contracts", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    print(describe())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "contracts.toml"
        path.write_text(make_contracts(args.contracts), encoding="utf-8")
        project = load_project(path)
    print(f"project: {len(project.contracts)} contracts; {args.repeats} repeats, interleaved\n")
    phases = ("encode", "decode", "round trip")
    wall: dict[str, dict[str, list[float]]] = {w: {p: [] for p in phases} for w in WAYS}
    cpu: dict[str, dict[str, list[float]]] = {w: {p: [] for p in phases} for w in WAYS}
    sizes: dict[str, int] = {}
    for i in range(args.repeats):
        order = list(WAYS) if i % 2 == 0 else list(reversed(WAYS))
        for way in order:
            encode, decode = WAYS[way]
            enc_w, enc_c, text = timed(encode, project)
            dec_w, dec_c, back = timed(decode, text)
            assert back == project, f"{way}: the decoded project differs"
            sizes[way] = len(text)
            for phase, w, c in (("encode", enc_w, enc_c), ("decode", dec_w, dec_c)):
                wall[way][phase].append(w)
                cpu[way][phase].append(c)
            wall[way]["round trip"].append(enc_w + dec_w)
            cpu[way]["round trip"].append(enc_c + dec_c)
    print(
        f"{'way':<12} {'phase':<11} {'wall median':>12} {'wall min':>9} {'CPU median':>11} {'CPU min':>8}  (ms)"
    )
    for way in WAYS:
        for phase in phases:
            ws, cs = wall[way][phase], cpu[way][phase]
            print(
                f"{way:<12} {phase:<11} {statistics.median(ws) * 1e3:>12.1f} {min(ws) * 1e3:>9.1f}"
                f" {statistics.median(cs) * 1e3:>11.1f} {min(cs) * 1e3:>8.1f}"
            )
        print(f"{way:<12} {'bytes':<11} {sizes[way]:>12,}")
    for name, table in (("wall", wall), ("CPU", cpu)):
        a = statistics.median(table["frozen_json"]["round trip"])
        b = statistics.median(table["pickle"]["round trip"])
        print(
            f"round trip, {name} median: frozen_json {a * 1e3:.0f} ms, pickle {b * 1e3:.0f} ms ({a / b:.1f}x)"
        )


if __name__ == "__main__":
    main()
