"""Benchmark: ``kcgate validate`` of 10,000 contracts (issue 13's target: <= 2 s). No torch.

Run: ``python benchmarks/validate_speed.py [--contracts 10000] [--repeats 5] [--profile]``.

The file is the repository's own contracts.toml with its ``[[contract]]`` tables repeated under new ids
until there are ``--contracts`` of them (so the kernels, nested tables and shape checks are the real
ones, and many contracts share a few kernel modules, as in a large project). Prints the medians over the
repeats of the whole command (``kcgate validate FILE``, a subprocess, what a user waits for; its wall and
CPU time, the latter steadier on a loaded machine) and of its
phases in-process: TOML parsing with line map (``tomlsrc.parse``) and the loader (``spec.load_project``).
``--profile`` prints the top functions of one in-process load by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import ROOT, describe, kcgate_cmd  # noqa: E402

TARGET_S = 2.0


def make_contracts(n: int) -> str:
    """contracts.toml's [project], [policy] and its contracts repeated (ids suffixed) to ``n`` contracts."""
    text = (ROOT / "contracts.toml").read_text(encoding="utf-8")
    head, *tables = text.split("[[contract]]\n")
    head = re.sub(r'paths = \["\."\]', f'paths = ["{ROOT}"]', head)
    body = []
    for i in range(n):
        table = tables[i % len(tables)]
        body.append("[[contract]]\n" + re.sub(r'^id = "([^"]+)"', rf'id = "\1-{i}"', table, flags=re.M))
    return head + "".join(body)


def _command(path: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of ``kcgate validate FILE``; CPU time (user + system) is steadier under load.
    Bytecode is written and used, as in an installed kcgate (PYTHONDONTWRITEBYTECODE would recompile
    every module on every run)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*kcgate_cmd(), "validate", str(path)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"kcgate validate exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def _in_process(path: Path) -> tuple[float, float]:
    from kcgate.contracts import load as spec
    from kcgate.util import tomlsrc

    text = path.read_text(encoding="utf-8")
    t0 = time.perf_counter()
    tomlsrc.parse(text)
    t1 = time.perf_counter()
    project = spec.load_project(path)
    t2 = time.perf_counter()
    assert len(project.contracts) > 0
    return t1 - t0, t2 - t1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contracts", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    print(describe())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "contracts.toml"
        path.write_text(make_contracts(args.contracts), encoding="utf-8")
        print(f"{args.contracts} contracts, {path.stat().st_size / 1e6:.1f} MB")
        _command(path)  # warm-up: writes the bytecode, fills the page cache
        whole, cpu, parse, load = [], [], [], []
        for _ in range(args.repeats):
            wall, used = _command(path)
            whole.append(wall)
            cpu.append(used)
            p, ld = _in_process(path)
            parse.append(p)
            load.append(ld)
        print(f"kcgate validate (command): median {statistics.median(whole):.3f} s over {args.repeats} runs")
        print(f"  runs: {', '.join(f'{t:.3f}' for t in whole)}; target <= {TARGET_S} s")
        print(f"  CPU time (user + system): median {statistics.median(cpu):.3f} s")
        print(f"in-process tomlsrc.parse: median {statistics.median(parse):.3f} s")
        print(f"in-process load_project (parse included): median {statistics.median(load):.3f} s")
        if args.profile:
            from kcgate.contracts import load as spec

            prof = cProfile.Profile()
            prof.runcall(spec.load_project, path)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
