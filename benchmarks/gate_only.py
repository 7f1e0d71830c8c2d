"""What the sensitivity gate is for (issue 46): the bugs of the repository's corpora that only it catches.

Runs every bug corpus the tests hold, in process, and lists each case that fails *within its error bound*
(the bound passes it; the failure is the sensitivity gate's: ``excess-error``, or a mistake the gate's
excess led the diagnosis to name), with the budget it used and the gate's figures:

* ``realistic``: tests/data/realistic/contracts.toml (the realistic bugs; boundary shapes included), seeds 0, 5;
* ``incidents``: examples/incidents/*/contracts.toml (faithful and faulty kernels alike), seeds 0-2;
* ``faults``: tests/testing/faults/corpus.py's planted faults (tests/test_signature_corpus.py), seeds 0-2;
* ``semantic``, ``misnamed``, ``heldout``: the semantic bug sets of tests/testing/faults, seeds 0-2.

    python -m benchmarks.gate_only [--corpora realistic,faults,...] [--json out.json]

Every verdict goes to ``--json`` (corpus, id, seed, shape, status, cause, message, budget, excess figures),
so two trees' runs can be compared case by case (``--compare before.json``). Takes a few minutes on one core.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GATE = "within the bound"  # how a failure the sensitivity gate decided begins (kcgate.engine.checks)
FIGURES = ("excess_ratio", "excess_rms_ratio", "excess_max_ratio", "excess_rms_lower", "excess_clusters")


@dataclass(frozen=True)
class Verdict:
    corpus: str
    id: str
    seed: int
    shape: str
    status: str
    cause: str
    message: str
    budget: float | None
    figures: dict[str, float]

    @property
    def key(self) -> str:
        return f"{self.corpus}/{self.id}/{self.shape}/s{self.seed}"

    @property
    def gate_only(self) -> bool:
        return self.status == "fail" and self.message.startswith(GATE)


def _verdict(corpus: str, ident: str, seed: int, shape: Any, finding: Any) -> Verdict:
    m, sig = finding.metrics, finding.signature
    extra = dict(m.extra)
    return Verdict(
        corpus,
        ident,
        seed,
        "x".join(str(d) for d in shape),
        str(finding.status),
        sig.cause if sig is not None else "",
        finding.message,
        extra.get("out_budget", m.budget_used),
        {k: extra[k] for k in FIGURES if k in extra},
    )


def _contract_files(paths: list[Path], seeds: tuple[int, ...], corpus: str) -> Iterator[Verdict]:
    from kcgate.contracts.load import load_project
    from kcgate.devices.cpu import CpuBackend
    from kcgate.engine import torch_state
    from kcgate.engine.case import execute_case
    from kcgate.plan import make_plan

    for path in paths:
        project = load_project(path)
        torch_state.capture()
        sys.path.insert(0, str(path.parent))  # the incidents' kernels live beside their contracts
        for seed in seeds:
            for case in make_plan(project, seed, {}, boundary=True):
                r = execute_case(project, case, CpuBackend())
                yield _verdict(corpus, case.contract_id, seed, case.shape, r)
        torch_state._active = None


def _faults(seeds: tuple[int, ...]) -> Iterator[Verdict]:
    from tests.testing.faults import corpus as C

    for fault in C.corpus():
        for seed in seeds:
            yield _verdict("faults", fault.id, seed, C.SHAPES[fault.family], C.finding(fault, seed))


def _bugs(name: str, seeds: tuple[int, ...]) -> Iterator[Verdict]:
    from tests.testing.faults import heldout, misnamed, semantic

    bugs = {
        "semantic": semantic.SEMANTIC,
        "misnamed": misnamed.MISNAMED,
        "heldout": tuple(b for b, _ in heldout.HELD_OUT),
    }[name]
    for bug in bugs:
        for seed in seeds:
            yield _verdict(name, bug.id, seed, bug.shape, semantic.diagnose(bug, seed))


def run(corpora: list[str]) -> list[Verdict]:
    out: list[Verdict] = []
    for name in corpora:
        if name == "realistic":
            files = [ROOT / "tests" / "data" / "realistic" / "contracts.toml"]
            out += _contract_files(files, (0, 5), name)
        elif name == "incidents":
            files = sorted((ROOT / "examples" / "incidents").glob("*/contracts.toml"))
            out += _contract_files(files, (0, 1, 2), name)
        elif name == "faults":
            out += _faults((0, 1, 2))
        else:
            out += _bugs(name, (0, 1, 2))
        print(f"  {name}: {sum(v.corpus == name for v in out)} cases", file=sys.stderr)
    return out


def report(verdicts: list[Verdict]) -> list[str]:
    """The gate-only catches, one line each, and the totals per corpus."""
    lines = [
        "| corpus | bug | seed | shape | budget | excess ratio | rms / max ratio | cause |",
        "|---" * 8 + "|",
    ]
    for v in verdicts:
        if v.gate_only:
            f = v.figures
            lines.append(
                f"| {v.corpus} | {v.id} | {v.seed} | {v.shape} | {_num(v.budget)} | "
                f"{_num(f.get('excess_ratio'))} | {_num(f.get('excess_rms_ratio'))} / "
                f"{_num(f.get('excess_max_ratio'))} | {v.cause} |"
            )
    lines.append("")
    for corpus in dict.fromkeys(v.corpus for v in verdicts):
        vs = [v for v in verdicts if v.corpus == corpus]
        fails = [v for v in vs if v.status == "fail"]
        only = [v for v in vs if v.gate_only]
        lines.append(
            f"{corpus}: {len(vs)} cases, {len(fails)} fail, {len(only)} of them only through the sensitivity "
            f"gate ({len({v.id for v in only})} bugs)"
        )
    return lines


def compare(before: list[dict[str, Any]], after: list[Verdict]) -> list[str]:
    """Every case whose status or cause changed between two runs (``--compare``)."""
    old = {f"{d['corpus']}/{d['id']}/{d['shape']}/s{d['seed']}": d for d in before}
    lines = []
    for v in after:
        d = old.get(v.key)
        if d is None:
            lines.append(f"  new: {v.key}: {v.status} {v.cause}")
        elif (d["status"], d["cause"]) != (v.status, v.cause):
            lines.append(f"  {v.key}: {d['status']} {d['cause']} -> {v.status} {v.cause}: {v.message[:160]}")
    return lines or ["  no verdict changed"]


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", default="realistic,incidents,faults,semantic,misnamed,heldout")
    ap.add_argument("--json", default="", help="write every verdict here")
    ap.add_argument("--compare", default="", help="a --json file of another run: list the changed verdicts")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory():
        verdicts = run(args.corpora.split(","))
    print("\n".join(report(verdicts)))
    if args.compare:
        print("\nchanged verdicts against " + args.compare + ":")
        print("\n".join(compare(json.loads(Path(args.compare).read_text()), verdicts)))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(v) for v in verdicts], indent=0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
