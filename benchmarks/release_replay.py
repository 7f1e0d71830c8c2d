"""Replay a kernel library's release history as pull requests through both modes of the action, at their
defaults, and count correct blocks, missed blocks and false blocks (issue 57.5).

The library is rotary-embedding-torch (pure PyTorch; CPU), its contracts written from its README before
any run (benchmarks/third_party/rotary/). A git repository holds the contracts and the library's package,
vendored: each release is a PR that replaces the package with the next release's, and each PR is merged.
Each step runs the commands the action runs (action.yml, action/baseline.sh), in its two modes:

- run leg (pull_request, the PR's checkout): `kcgate baseline fetch` of the merge base's recorded run from
  the data branch, then `kcgate run` (with `--baseline` and `--base-ref <merge base>` where this kcgate's
  `run` has them);
- report job (workflow_run, the default branch's checkout): `kcgate baseline fetch` for the PR's merge base
  (computed from the default branch and the PR head), then `kcgate report` against it; exit 1 = blocked;
- merge, then the push to the default branch: `kcgate run` on main and the history job (`kcgate history
  add --log` and `kcgate baseline record` into the data branch's directory).

Ground truth is pre-registered in PRS from the diffs of the releases' sources, never from a run: a PR
"introduces" a bug on a contracted path, "fixes" one, or changes "nothing" there. The last PR downgrades to
a release that still has a bug the window fixed: real code, a regression the PR introduces. The first
changes no kernel while main still has a crash: what main already has must not block it.

    python -m benchmarks.release_replay --wheels DIR --deps DIR [--work DIR] [--json out.json]

DIR of wheels: `pip download --no-deps -d DIR rotary-embedding-torch==V` for each V in PRS and BASE;
--deps: `pip install --target DIR --no-deps einops beartype`. Prints the machine, each PR's outcome and
the totals; figures and the command are in docs/history.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks._machine import ROOT, describe

PACKAGE = "rotary_embedding_torch"
CONTRACTS = ROOT / "benchmarks" / "third_party" / "rotary"
RUNNER = "cpu"
BASE = "0.5.3"
# (release, truth, why): from the diffs of rotary_embedding_torch.py, read before any run
PRS: tuple[tuple[str, str, str], ...] = (
    ("0.5.3", "nothing", "no kernel change (a notes file) while main has 0.5.3's cached-keys crash"),
    ("0.6.0", "fixes", "rotate_queries_with_cached_keys: 4-D queries shorter than the keys no longer crash"),
    ("0.6.1", "nothing", "an offset argument for rotate_queries_with_cached_keys (default 0)"),
    ("0.6.2", "fixes", "apply_rotary_emb returns the input's dtype (16-bit inputs came back fp32)"),
    ("0.6.3", "nothing", "typing; rotate_queries_or_keys takes a scale (xpos only)"),
    ("0.6.4", "nothing", "beartype dropped"),
    ("0.6.5", "nothing", "apply_rotary_emb rewritten without reassigning t: the same arithmetic"),
    ("0.7.0", "nothing", "torch.amp.autocast('cuda') instead of torch.cuda.amp.autocast"),
    ("0.8.0", "nothing", "xpos scale repeated per pair (xpos only)"),
    ("0.6.1", "introduces", "a downgrade: the 16-bit dtype bug 0.6.2 fixed is back"),
)


@dataclass
class Outcome:
    """One replayed PR: what it was, what the gate said, and how that scores against the truth."""

    release: str
    previous: str
    truth: str
    blocked: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    blocking: list[str] = field(default_factory=list)
    baseline_line: str = ""
    base_ref_used: bool = False
    seconds: float = 0.0

    @property
    def score(self) -> str:
        if self.truth == "introduces":
            return "correct block" if self.blocked else "missed block"
        return "false block" if self.blocked else "correct pass"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wheels", type=Path, required=True, help="the releases' wheels (pip download --no-deps)")
    p.add_argument("--deps", type=Path, required=True, help="einops and beartype (pip install --target)")
    p.add_argument("--work", type=Path, default=None, help="keep the repository and data branch here")
    p.add_argument("--json", type=Path, default=None, help="write the outcomes as JSON")
    p.add_argument("--prs", type=int, default=len(PRS), help="replay only the first N PRs")
    p.add_argument(
        "--reuse-pr-run",
        action="store_true",
        help="record the PR leg's results as main's run after the merge (the merged tree is the PR's, byte "
        "for byte) instead of running the contracts again on the push: half the time",
    )
    args = p.parse_args()
    print(describe())
    work = args.work or Path(tempfile.mkdtemp(prefix="kcgate-replay-"))
    replay = Replay(work, args.wheels.resolve(), args.deps.resolve(), args.reuse_pr_run)
    outcomes = replay.run(PRS[: args.prs])
    print(render(outcomes))
    if args.json:
        rows = [asdict(o) | {"score": o.score} for o in outcomes]
        args.json.write_text(json.dumps({"prs": rows, "totals": totals(outcomes)}, indent=1) + "\n")


class Replay:
    """The repository, its data branch (a directory, as the action's checkout of it) and the commands.
    ``seed`` (the first commit's files), ``vendor`` (a PR's one change), ``base`` and ``runner`` are what a
    replay of another history replaces (benchmarks/planted_replay.py)."""

    base, runner = BASE, RUNNER

    def __init__(self, work: Path, wheels: Path, deps: Path, reuse_pr_run: bool = False) -> None:
        self.work, self.wheels, self.deps, self.reuse = work, wheels, deps, reuse_pr_run
        self.repo, self.history = work / "repo", work / "kcgate-history"
        self.base_ref = "--base-ref" in self.kcgate("run", "--help", cwd=ROOT).stdout

    def run(self, prs: tuple[tuple[str, str, str], ...]) -> list[Outcome]:
        self.init_repo()
        self.push_run()
        outcomes, current = [], self.base
        for release, truth, _why in prs:
            start = time.monotonic()
            outcome = self.pull_request(release, current, truth)
            outcome.seconds = round(time.monotonic() - start, 1)
            outcomes.append(outcome)
            print(
                f"{current} -> {release}: {truth}, {outcome.score} {outcome.counts} {outcome.blocking[:3]}",
                flush=True,
            )
            current = release
        return outcomes

    # ---- the repository ---------------------------------------------------------------------------------

    def init_repo(self) -> None:
        shutil.rmtree(self.work / "repo", ignore_errors=True)
        shutil.rmtree(self.history, ignore_errors=True)
        self.repo.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")
        self.seed(self.repo)
        (self.repo / ".gitignore").write_text("kcgate-results/\n__pycache__/\n")
        self.vendor(self.repo, self.base)
        self.commit(self.repo, f"kcgate: contracts, {self.base}")

    def seed(self, tree: Path) -> None:
        """The first commit's files besides the vendored package: the contracts."""
        for name in ("contracts.toml", "contract_fns.py"):
            shutil.copy(CONTRACTS / name, tree / name)

    def vendor(self, tree: Path, release: str) -> None:
        """Replace the vendored package with the release's (the PR's one change)."""
        shutil.rmtree(tree / PACKAGE, ignore_errors=True)
        [wheel] = self.wheels.glob(f"{PACKAGE}-{release}-*.whl")
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.startswith(f"{PACKAGE}/"):
                    z.extract(name, tree)
        (tree / "requirements.txt").write_text(f"rotary-embedding-torch=={release}\n")

    def commit(self, tree: Path, message: str) -> str:
        self.git("add", "-A", cwd=tree)
        self.git("commit", "-q", "-m", message, cwd=tree)
        return self.git("rev-parse", "HEAD", cwd=tree)

    # ---- one PR: run leg, report job, merge, push run -----------------------------------------------------

    def pull_request(self, release: str, previous: str, truth: str) -> Outcome:
        pr_tree = self.work / f"pr-{release}-{int(time.time())}"
        self.git("worktree", "add", "-q", "-b", pr_tree.name, str(pr_tree), "main")
        if release == previous:  # a PR that changes no kernel
            (pr_tree / "NOTES.md").write_text(f"notes, {time.time()}\n")
        else:
            self.vendor(pr_tree, release)
        head = self.commit(pr_tree, f"{PACKAGE} {previous} -> {release}")
        results = self.run_leg(pr_tree, head)
        outcome = self.report(results, head, release, previous, truth)
        self.git("merge", "-q", "--ff-only", pr_tree.name)  # the PR is merged, as a team merges it
        kept = self.work / "pr-results.json"
        shutil.copy(results, kept)
        self.git("worktree", "remove", "--force", str(pr_tree))
        self.push_run(kept if self.reuse else None)
        return outcome

    def run_leg(self, tree: Path, head: str) -> Path:
        base = self.git("merge-base", "main", head)
        fetched = self.work / "run-leg-baseline"
        shutil.rmtree(fetched, ignore_errors=True)
        self.kcgate("baseline", "fetch", "--history", str(self.history), "--commit", base, "--repo-dir", str(tree),
                    "--runner", self.runner, "--dir", str(fetched), cwd=tree, check=True)  # fmt: skip
        extra = []
        if self.base_ref:
            extra = ["--base-ref", base]
            if (fetched / f"{self.runner}.json").is_file():
                extra += ["--baseline", str(fetched / f"{self.runner}.json")]
        return self.contracts_run(tree, extra)

    def contracts_run(self, tree: Path, extra: list[str]) -> Path:
        out = tree / "kcgate-results" / f"{self.runner}.json"
        done = self.kcgate("run", "-c", "contracts.toml", "--runner", self.runner, "--results", str(out), "--workers", "auto",
                           "--isolation", "process", "--quiet", *extra, cwd=tree)  # fmt: skip
        if done.returncode not in (0, 1):
            raise SystemExit(
                f"kcgate run failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        return out

    def report(self, results: Path, head: str, release: str, previous: str, truth: str) -> Outcome:
        fetched, verdict, comment = (self.work / n for n in ("report-baseline", "verdict.json", "comment.md"))
        shutil.rmtree(fetched, ignore_errors=True)
        self.kcgate("baseline", "fetch", "--history", str(self.history), "--commit", "main", "--head", head,
                    "--repo-dir", str(self.repo), "--dir", str(fetched), cwd=self.repo, check=True)  # fmt: skip
        done = self.kcgate("report", str(results.parent), "--baseline", str(fetched), "--contracts", "contracts.toml",
                           "--comment-out", str(comment), "--format", "json", "--output", str(verdict),
                           cwd=self.repo)  # fmt: skip
        if done.returncode not in (0, 1):
            raise SystemExit(f"kcgate report failed ({done.returncode}): {done.stderr[-3000:]}")
        doc = json.loads(verdict.read_text())
        text = comment.read_text()
        return Outcome(
            release,
            previous,
            truth,
            blocked=done.returncode == 1,
            counts=_counts(doc),
            blocking=[f"{c['category']}: {c['case_id']}" for c in _changes(doc) if c.get("blocking")],
            baseline_line=next(
                (ln for ln in text.splitlines() if ln.startswith(("Baseline for", "Baseline:"))), ""
            ),
            base_ref_used=self.base_ref,
        )

    def push_run(self, results: Path | None = None) -> None:
        """The push to main: its run (no baseline: not a pull request), then the history job."""
        results = results or self.contracts_run(self.repo, [])
        sha = self.git("rev-parse", "HEAD")
        db = self.work / "history.db"
        self.kcgate("history", "add", str(results), "--commit", sha, "--db", str(db), "--log", str(self.history),
                    cwd=self.repo, check=True)  # fmt: skip
        self.kcgate("baseline", "record", str(results), "--commit", sha, "--history", str(self.history),
                    cwd=self.repo, check=True)  # fmt: skip

    # ---- processes ------------------------------------------------------------------------------------------

    def kcgate(self, *args: str, cwd: Path, check: bool = False) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "KCGATE_"))}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(self.deps), str(ROOT)]
        )  # the repository's code: its checkout
        done = subprocess.run([sys.executable, "-m", "kcgate", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=3600)  # fmt: skip
        if check and done.returncode != 0:
            raise SystemExit(
                f"kcgate {' '.join(args[:2])} failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        return done

    def git(self, *args: str, cwd: Path | None = None) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env |= {"GIT_AUTHOR_NAME": "replay", "GIT_AUTHOR_EMAIL": "replay@example.com",
                "GIT_COMMITTER_NAME": "replay", "GIT_COMMITTER_EMAIL": "replay@example.com"}  # fmt: skip
        done = subprocess.run(
            ["git", *args], cwd=cwd or self.repo, env=env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise SystemExit(f"git {' '.join(args)} failed: {done.stderr}")
        return done.stdout.strip()


def _changes(doc: dict) -> list[dict]:  # type: ignore[type-arg]
    return [c for r in doc.get("runners", []) for c in r.get("changes", [])]


def _counts(doc: dict) -> dict[str, int]:  # type: ignore[type-arg]
    counts: dict[str, int] = {}
    for c in _changes(doc):
        counts[c["category"]] = counts.get(c["category"], 0) + 1
    return dict(sorted(counts.items()))


def totals(outcomes: list[Outcome]) -> dict[str, int]:
    scores = [o.score for o in outcomes]
    fixes = [o for o in outcomes if o.truth == "fixes"]
    return {
        "prs": len(outcomes),
        "introducing": sum(o.truth == "introduces" for o in outcomes),
        "correct_blocks": scores.count("correct block"),
        "missed_blocks": scores.count("missed block"),
        "false_blocks": scores.count("false block"),
        "fixes": len(fixes),
        "fixes_shown": sum(o.counts.get("fixed", 0) > 0 for o in fixes),
    }


def render(outcomes: list[Outcome]) -> str:
    lines = ["| PR | truth | gate | blocking | fixed | baseline |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        blocking = "; ".join(o.blocking[:3]) + (f" (+{len(o.blocking) - 3})" if len(o.blocking) > 3 else "")
        lines.append(f"| {o.previous} → {o.release} | {o.truth} | {o.score} | {blocking or '-'} | "
                     f"{o.counts.get('fixed', 0)} | {o.baseline_line[:90]} |")  # fmt: skip
    t = totals(outcomes)
    lines.append("")
    lines.append(
        f"{t['prs']} PRs, {t['introducing']} introducing a bug: {t['correct_blocks']} correct blocks, "
        f"{t['missed_blocks']} missed, {t['false_blocks']} false blocks; fixes shown as fixed: "
        f"{t['fixes_shown']} of {t['fixes']}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
