"""The comment's lines saying which commit each runner's baseline is the run of (pure: a BaselineSource
in, plain-text lines out; the Markdown renderer escapes them as it does every note)."""

from __future__ import annotations

from kcgate.history.source import BaselineSource, Origin


def source_ref(source: BaselineSource) -> str:
    """The commit to name as the baselines' origin: the one recorded commit every runner's baseline
    comes from, else the merge base they were looked up for."""
    commits = {o.commit for o in source.origins if o.how == "recorded"}
    return commits.pop() if len(commits) == 1 else source.merge_base


def source_lines(source: BaselineSource) -> tuple[str, ...]:
    base = source.merge_base[:12]
    if source.first_run:
        return (
            f"Baseline: no recorded ancestor: first run (no default-branch run recorded at the merge base "
            f"{base} or the {source.max_back} commits before it); nothing is compared with a baseline.",
        )
    return tuple(_line(o, base, source.max_back) for o in source.origins)


def _line(o: Origin, base: str, max_back: int) -> str:
    if o.how == "committed":
        return f"Baseline for {o.runner}: the repository's committed baselines file (it overrides the recorded runs)."
    if o.how == "none":
        return (
            f"Baseline for {o.runner}: no recorded ancestor: first run on this runner (nothing recorded at "
            f"the merge base {base} or the {max_back} commits before it)."
        )
    if o.back == 0:
        return f"Baseline for {o.runner}: the default branch's run of {o.commit[:12]}, the merge base."
    commits = "commit" if o.back == 1 else "commits"
    return (
        f"Baseline for {o.runner}: the default branch's run of {o.commit[:12]}, {o.back} {commits} before "
        f"the merge base {base} (the nearest recorded ancestor)."
    )
