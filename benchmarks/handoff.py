"""Benchmark: handing the parsed contracts from ``kcgate run`` to its worker, ``frozen_json`` against ``pickle``.

Run: ``python benchmarks/handoff.py [--contracts 10000] [--repeats 7]``.

The parent parses contracts.toml once and sends the ``Project`` to each worker in its init line; the worker
rebuilds it. Two ways, timed side by side in this process (interleaved, so load on the machine hits both):

- ``frozen_json`` (what kcgate does): ``json.dumps(project.to_json())`` in the parent, then
  ``Project.from_json(json.loads(text))`` in the worker;
- ``pickle``: ``pickle.dumps(project)`` base64-encoded (the init line is a JSON line), then
  ``pickle.loads(b64decode(...))``.

The project is the repository's contracts.toml with its contracts repeated to ``--contracts`` (as
validate_speed.py builds it). Each side's decoded project is checked equal to the parsed one. Prints the
medians and minima of the parent's encode, the worker's decode and the round trip, and the bytes sent.
"""

from __future__ import annotations

import argparse
import base64
import json
import pickle
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
from kcgate.contracts.spec import Project, load_project  # noqa: E402


def frozen_json_encode(project: Project) -> str:
    return json.dumps(project.to_json())


def frozen_json_decode(text: str) -> Project:
    return Project.from_json(json.loads(text))


def pickle_encode(project: Project) -> str:
    return base64.b64encode(pickle.dumps(project, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")


def pickle_decode(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))


WAYS: dict[str, tuple[Callable[[Project], str], Callable[[str], Any]]] = {
    "frozen_json": (frozen_json_encode, frozen_json_decode),
    "pickle": (pickle_encode, pickle_decode),
}


def timed(fn: Callable[[Any], Any], arg: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(arg)
    return time.perf_counter() - t0, out


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
    times: dict[str, dict[str, list[float]]] = {
        w: {"encode": [], "decode": [], "round trip": []} for w in WAYS
    }
    sizes: dict[str, int] = {}
    for i in range(args.repeats):
        order = list(WAYS) if i % 2 == 0 else list(reversed(WAYS))
        for way in order:
            encode, decode = WAYS[way]
            enc_s, text = timed(encode, project)
            dec_s, back = timed(decode, text)
            assert back == project, f"{way}: the decoded project differs"
            sizes[way] = len(text)
            times[way]["encode"].append(enc_s)
            times[way]["decode"].append(dec_s)
            times[way]["round trip"].append(enc_s + dec_s)
    print(f"{'way':<12} {'phase':<11} {'median ms':>10} {'min ms':>8}")
    for way, phases in times.items():
        for phase, values in phases.items():
            print(f"{way:<12} {phase:<11} {statistics.median(values) * 1e3:>10.1f} {min(values) * 1e3:>8.1f}")
        print(f"{way:<12} {'bytes':<11} {sizes[way]:>10,}")
    a = statistics.median(times["frozen_json"]["round trip"])
    b = statistics.median(times["pickle"]["round trip"])
    print(f"\nround trip, median: frozen_json {a * 1e3:.0f} ms, pickle {b * 1e3:.0f} ms ({a / b:.1f}x)")


if __name__ == "__main__":
    main()
