"""Power kept (issue 53.6): a PR that introduces a shipped bug is blocked and attributed to it; a bug that main
already has is pre-existing.

A scratch git repository holds the 20 shipped bugs' contracts (tests/testing/corpus_files.py, the default
protocol) over a kernel module, ``mykernels.py``, that binds each contract's kernel to its bug's fixed twin
(tests/testing/faults/shipped_fixed.py). Main's run is the baseline. Then, per bug:

- **introduced**: a PR rebinds that one kernel to the bug as it shipped (tests/testing/faults/shipped_kernels.py);
  ``kcgate run -k <bug>/`` replays the baseline's seeds with a fresh one beside them and reruns each new
  failure on main's code (``--base-ref main``); the diff against the baseline (that contract's cases) must
  block, every blocking row attributed ``introduced``;
- **pre-existing**: the bug is merged without a baseline refresh (a forgotten one), and a PR that changes only
  an unrelated file runs the same way against the same, older baseline, rerunning on the merged main: nothing
  may block, and each failing row must be ``pre-existing`` (main's own rerun fails alike, on the replayed
  seeds and the fresh one).

Each run is a real ``kcgate run`` (worker subprocesses, the per-case sandbox, a git worktree for the rerun);
the diff is ``kcgate diff``'s (``kcgate.gate.diff.make_diff`` under the contracts' policy).

    python -m benchmarks.shipped_power [--only ID,...] [--no-pre-existing] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._machine import ROOT, describe

RUNNER = "cpu-power"
HEAD = '[project]\nname = "shipped-power"\npaths = ["."]\n'


@dataclass
class Outcome:
    """One bug: main's fixed twin, the PR that introduces the bug, and the PR after it was merged unnoticed."""

    bug: str
    main: dict[str, int] = field(default_factory=dict)  # the fixed twin's statuses on main
    blocked: bool = False
    introduced: int = 0  # blocking rows attributed to the PR
    blocking: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    later_blocked: bool | None = None  # the unrelated PR after the bug reached main (None: not run)
    pre_existing: int = 0  # its rows shown pre-existing
    later_failing: int = 0  # its failing rows
    later_counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def kept(self) -> bool:
        """Blocked, and every blocking row attributed to the PR."""
        return self.blocked and self.introduced == len(self.blocking)

    @property
    def shown_pre_existing(self) -> bool:
        return self.later_blocked is False and self.pre_existing == self.later_failing > 0


def ident(bug_id: str) -> str:
    return re.sub(r"\W", "_", bug_id)


def binding(bug: Any, fixed: bool) -> str:
    """``mykernels.py``'s line for one contract: its kernel, the fixed twin's or the bug's."""
    from tests.testing.corpus_files import _name_in
    from tests.testing.faults.shipped_fixed import FIXED

    if fixed:
        return f"{ident(bug.id)} = shipped_fixed.{FIXED[bug.id]}\n"
    module = sys.modules[bug.kernel.__module__]
    return f"{ident(bug.id)} = {module.__name__.rsplit('.', 1)[1]}.{_name_in(module, bug.kernel)}\n"


def kernels_text(bugs: list[Any], buggy: str = "") -> str:
    lines = [
        '"""The kernels under contract: each shipped bug\'s fixed twin (``buggy``: that one as it shipped)."""\n',
        "from tests.testing.faults import naming_kernels, shipped_fixed, shipped_kernels  # noqa: F401\n\n",
    ]
    return "".join(lines + [binding(b, b.id != buggy) for b in bugs])


def contracts_text(bugs: list[Any]) -> str:
    from tests.testing.corpus_files import shipped_contract

    return HEAD + "".join("\n" + shipped_contract(b, f"mykernels:{ident(b.id)}") for b in bugs)


class Repo:
    """The scratch repository and the commands, as test_base_rerun.py drives them."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def git(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env |= {"GIT_AUTHOR_NAME": "power", "GIT_AUTHOR_EMAIL": "power@example.com",
                "GIT_COMMITTER_NAME": "power", "GIT_COMMITTER_EMAIL": "power@example.com"}  # fmt: skip
        done = subprocess.run(["git", *args], cwd=self.path, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"git {' '.join(args)} failed: {done.stderr}")
        return done.stdout.strip()

    def commit(self, files: dict[str, str], message: str) -> str:
        for name, text in files.items():
            (self.path / name).write_text(text)
        self.git("add", "-A")
        self.git("commit", "-qm", message)
        return self.git("rev-parse", "HEAD")

    def run(self, out: str, *extra: str) -> Path:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "KCGATE_"))}
        env |= {"PYTHONPATH": str(ROOT), "CI": ""}
        args = ["run", "-q", "--runner", RUNNER, "--shrink-s", "0", "--results", out, *extra]
        done = subprocess.run([sys.executable, "-m", "kcgate", *args], cwd=self.path, env=env,
                              capture_output=True, text=True, timeout=3600)  # fmt: skip
        if done.returncode not in (0, 1):
            raise SystemExit(f"kcgate run failed ({done.returncode}): {done.stderr[-3000:]}")
        return self.path / out


def diff(base: Path, pr: Path, contracts: Path, bug: str) -> Any:
    """``kcgate diff BASE PR`` over the bug's contract alone (the PR ran ``-k <bug>/``)."""
    from kcgate.contracts.load import load_project
    from kcgate.gate.diff import make_diff
    from kcgate.results.model import load_run

    b, p = load_run(base), load_run(pr)
    b = b.with_cases(tuple(c for c in b.cases if c.contract_id == bug))
    policy = load_project(contracts, locate_kernels=False).policy
    return make_diff({p.runner: p}, {b.runner: b}, policy, dt.datetime.now(dt.timezone.utc).date())


def one_bug(repo: Repo, bugs: list[Any], bug: Any, main: str, baseline: Path, later: bool) -> Outcome:
    from kcgate.results.model import load_run

    t0 = time.perf_counter()
    out = Outcome(bug.id)
    for c in load_run(baseline).cases:
        if c.contract_id == bug.id:
            out.main[str(c.status)] = out.main.get(str(c.status), 0) + 1
    branch = f"pr-{ident(bug.id)}"
    repo.git("checkout", "-qb", branch, main)
    repo.commit({"mykernels.py": kernels_text(bugs, bug.id)}, f"{bug.id}: as it shipped")
    pr = repo.run(
        f"results/{branch}.json", "-k", f"{bug.id}/", "--baseline", str(baseline), "--base-ref", main
    )
    d = diff(baseline, pr, repo.path / "contracts.toml", bug.id)
    out.blocked = not d.passed
    out.blocking = [f"{c.category} {c.attribution or '-'} {c.case_id}" for c in d.blocking]
    out.introduced = sum(c.attribution == "introduced" for c in d.blocking)
    out.counts = {k: v for k, v in d.counts().items() if v}
    if later:  # the bug merged, the baseline not refreshed; a PR that touches another file
        merged = repo.git("rev-parse", "HEAD")
        repo.git("checkout", "-qb", f"later-{ident(bug.id)}")
        repo.commit({"NOTES.md": f"unrelated, after {bug.id}\n"}, "an unrelated change")
        pr2 = repo.run(
            f"results/later-{ident(bug.id)}.json", "-k", f"{bug.id}/", "--baseline", str(baseline),
            "--base-ref", merged,
        )  # fmt: skip
        d2 = diff(baseline, pr2, repo.path / "contracts.toml", bug.id)
        failing = [c for c in d2.changes if c.status in ("fail", "error", "refused")]
        out.later_blocked = not d2.passed
        out.later_failing = len(failing)
        out.pre_existing = sum(c.category == "pre-existing" for c in failing)
        out.later_counts = {k: v for k, v in d2.counts().items() if v}
    repo.git("checkout", "-q", main)
    out.seconds = round(time.perf_counter() - t0, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="bug ids, comma-separated (default: all 20)")
    ap.add_argument("--no-pre-existing", action="store_true", help="skip the unrelated PR after each merge")
    ap.add_argument("--json", type=Path, help="write every bug's outcome here")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.testing.faults.naming_sets_shipped import SHIPPED

    bugs = [s.named.bug for s in SHIPPED]
    only = set(a.only.split(",")) if a.only else {b.id for b in bugs}
    print(describe(), flush=True)
    t0 = time.perf_counter()
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="kcgate-power-") as tmp:
        repo = Repo(Path(tmp))
        repo.git("init", "-q", "-b", "main")
        files = {"contracts.toml": contracts_text(bugs), "mykernels.py": kernels_text(bugs)}
        files[".gitignore"] = "results/\n__pycache__/\n"
        main_sha = repo.commit(files, "main: the fixed kernels")
        t = time.perf_counter()
        baseline = repo.run("results/main.json", "--baseline", "none", "--base-ref", "none")
        print(f"main's run (the baseline): {time.perf_counter() - t:.0f} s", flush=True)
        for bug in bugs:
            if bug.id not in only:
                continue
            o = one_bug(repo, bugs, bug, main_sha, baseline, not a.no_pre_existing)
            outcomes.append(o)
            print(line(o), flush=True)
    print(render(outcomes, time.perf_counter() - t0))
    if a.json:
        a.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1) + "\n")
    return 0


def line(o: Outcome) -> str:
    later = (
        ""
        if o.later_blocked is None
        else f"; after the merge: {'BLOCKED' if o.later_blocked else 'not blocked'}, "
        f"{o.pre_existing} of {o.later_failing} failing rows pre-existing"
    )
    return (
        f"{o.bug}: main {o.main}; PR {'blocked' if o.blocked else 'NOT BLOCKED'} "
        f"({o.introduced} of {len(o.blocking)} blocking rows introduced) {o.counts}{later} [{o.seconds} s]"
    )


def render(outcomes: list[Outcome], seconds: float) -> str:
    rows = ["| bug | main (fixed twin) | PR introducing it | blocking rows introduced | after merge |",
            "|---|---|---|---:|---|"]  # fmt: skip
    for o in outcomes:
        later = "-" if o.later_blocked is None else (
            f"{'blocked' if o.later_blocked else 'not blocked'}, {o.pre_existing}/{o.later_failing} pre-existing"
        )  # fmt: skip
        main = ", ".join(f"{k} {v}" for k, v in sorted(o.main.items()))
        rows.append(f"| {o.bug} | {main} | {'blocked' if o.blocked else 'not blocked'} | "
                    f"{o.introduced}/{len(o.blocking)} | {later} |")  # fmt: skip
    kept = sum(o.kept for o in outcomes)
    ran = [o for o in outcomes if o.later_blocked is not None]
    shown = sum(o.shown_pre_existing for o in ran)
    rows.append("")
    rows.append(
        f"introduced and blocked, every blocking row attributed to the PR: {kept} of {len(outcomes)}; "
        f"already on main, not blocked and shown pre-existing: {shown} of {len(ran)}; {seconds:.0f} s"
    )
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
