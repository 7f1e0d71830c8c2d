"""Replay PRs on the repository's own contracts with a planted crash, a planted failure and a planted drift on
main, through both modes of the action at their defaults (issue 57, how it will be checked, second part).

A git repository holds kcgate's own contracts.toml (its 27 builtin kernels) plus four contracts over its own
code: ``planted.py`` brings to main a crash (``os.abort()``), a failure (rms_norm summing squares in bf16,
tests/testing/kernels/realistic.py) and a drift (rms_norm scaled by 1 + 4e-7, tests/testing/kernels/drift.py:
it passes on some draws and fails on others), and ``local_kernels.py`` a correct softmax. Each step runs the
commands the action runs, with release_replay.py's machinery (``Replay``: the run leg with the merge base's
recorded run and ``--base-ref``, the report job against the data branch, the merge and main's recorded run).

The PRs (pre-registered truth): a notes file, an unrelated helper module, a notes file again, the softmax
losing its max subtraction (introduces a bug), then a notes file once that bug is on main. What main already
has (the crash, the failure, the drift and, at the last PR, the softmax bug) must never block; only the PR
that introduces the softmax bug may, attributed to it.

    python -m benchmarks.planted_replay [--quick] [--work DIR] [--json out.json]

``--quick``: the four contracts alone, two PRs (a notes file, the bug): tests/test_benchmarks_smoke.py.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks._machine import ROOT, describe
from benchmarks.release_replay import Outcome, Replay, _changes, render, totals

PLANTED = '''"""Problems main already has: a crash, a failure and a drift."""

import os

from tests.testing.kernels.drift import rmsnorm_drift  # noqa: F401
from tests.testing.kernels.realistic import rmsnorm_no_upcast  # noqa: F401


def crash(x, w):
    os.abort()
'''
GOOD = '''"""The repository's own softmax."""

import torch


def softmax(x):
    return torch.softmax(x, dim=-1)
'''
BAD = '''"""The repository's own softmax, written without the max subtraction."""

import torch


def softmax(x):
    e = torch.exp(x.float())
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)
'''
CONTRACTS = """
[[contract]]
id = "planted-crash"
class = "C-PRC-01"
kernel = "planted:crash"
op = "rmsnorm"
dtypes = ["float32"]
shapes = [[32, 512]]

[[contract]]
id = "planted-failure"
class = "C-PRC-01"
kernel = "planted:rmsnorm_no_upcast"
op = "rmsnorm"
dtypes = ["bfloat16"]
shapes = [[32, 1024]]

[[contract]]
id = "planted-drift"
class = "C-PRC-01"
kernel = "planted:rmsnorm_drift"
op = "rmsnorm"
dtypes = ["float32"]
shapes = [[32, 512]]

[[contract]]
id = "local-softmax"
class = "C-PRC-02"
kernel = "local_kernels:softmax"
op = "softmax"
dtypes = ["float32"]
shapes = [[64, 1024]]
"""
HELPER = '"""A helper no contract imports."""\n\n\ndef describe() -> str:\n    return "{}"\n'
# state -> the files it writes (each PR's one change; a PR to the state it is in adds a notes file)
STATES = {
    "main": {"local_kernels.py": GOOD, "tools_helper.py": HELPER.format("v1")},
    "unrelated": {"local_kernels.py": GOOD, "tools_helper.py": HELPER.format("v2")},
    "bug": {"local_kernels.py": BAD, "tools_helper.py": HELPER.format("v2")},
}
PRS: tuple[tuple[str, str, str], ...] = (
    ("main", "nothing", "a notes file; main has a crash, a failure and a drift"),
    ("unrelated", "nothing", "a helper module that no contract imports"),
    ("unrelated", "nothing", "a notes file"),
    ("bug", "introduces", "local softmax without the max subtraction"),
    ("bug", "nothing", "a notes file, with the softmax bug now on main"),
)
QUICK = (PRS[0], PRS[3])
PLANTED_IDS = ("planted-crash", "planted-failure", "planted-drift")
FAILING = ("fail", "error", "refused")


def contracts(quick: bool) -> str:
    """kcgate's contracts.toml with the four contracts appended (``quick``: its header and the four alone)."""
    text = (ROOT / "contracts.toml").read_text()
    if quick:
        text = text[: text.index("[[contract]]")]
    return text + CONTRACTS


class PlantedReplay(Replay):
    """release_replay's repository and commands over named states of this repository instead of releases."""

    base = "main"
    runner = "cpu-replay"  # the contracts' policy requires a cpu-* runner

    def __init__(self, work: Path, quick: bool) -> None:
        super().__init__(work, work, ROOT, reuse_pr_run=True)
        self.quick = quick
        self.planted: list[dict[str, list[str]]] = []  # per PR: the planted contracts' rows' categories

    def seed(self, tree: Path) -> None:
        (tree / "contracts.toml").write_text(contracts(self.quick))
        (tree / "planted.py").write_text(PLANTED)

    def vendor(self, tree: Path, release: str) -> None:
        for name, text in STATES[release].items():
            (tree / name).write_text(text)

    def report(self, results: Path, head: str, release: str, previous: str, truth: str) -> Outcome:
        outcome = super().report(results, head, release, previous, truth)
        doc = json.loads((self.work / "verdict.json").read_text())
        rows: dict[str, list[str]] = {}
        for c in _changes(doc):
            if c["contract_id"] in (*PLANTED_IDS, "local-softmax"):
                mark = " introduced" if c.get("attribution") == "introduced" else ""  # the base rerun passed
                mark += " BLOCKING" if c.get("blocking") else ""
                rows.setdefault(c["contract_id"], []).append(f"{c['status']} {c['category']}{mark}")
        self.planted.append({k: sorted(v) for k, v in sorted(rows.items())})
        return outcome


def planted_ok(rows: dict[str, list[str]]) -> bool:
    """Main's planted problems: none blocking, and every failing row pre-existing or still failing."""
    for cid in PLANTED_IDS:
        for r in rows.get(cid, []):
            status, category = r.split()[:2]
            if "BLOCKING" in r or (status in FAILING and category not in ("pre-existing", "still-failing")):
                return False
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the four contracts alone, two PRs")
    p.add_argument("--work", type=Path, default=None, help="keep the repository and data branch here")
    p.add_argument("--json", type=Path, default=None, help="write the outcomes as JSON")
    args = p.parse_args(argv)
    print(describe(), flush=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="kcgate-planted-"))
    replay = PlantedReplay(work, args.quick)
    t0 = time.monotonic()
    outcomes = replay.run(QUICK if args.quick else PRS)
    print(render(outcomes))
    print()
    ok = 0
    for o, rows in zip(outcomes, replay.planted, strict=True):
        ok += planted_ok(rows)
        print(f"{o.previous} -> {o.release} ({o.truth}): planted {'ok' if planted_ok(rows) else 'WRONG'}: "
              + "; ".join(f"{cid}: {', '.join(v)}" for cid, v in rows.items()))  # fmt: skip
    t = totals(outcomes)
    print(f"\nPRs whose planted problems were shown as main's (none blocking): {ok} of {len(outcomes)}; "
          f"{time.monotonic() - t0:.0f} s")  # fmt: skip
    if args.json:
        rows = [asdict(o) | {"score": o.score, "planted": pl} for o, pl in zip(outcomes, replay.planted)]
        args.json.write_text(json.dumps({"prs": rows, "totals": t, "planted_ok": ok}, indent=1) + "\n")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    wrong = t["false_blocks"] + t["missed_blocks"] + (len(outcomes) - ok)
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
