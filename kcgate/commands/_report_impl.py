"""``kcgate report``'s implementation: the gate over every runner's results, rendered and published.

Reads downloaded artifacts as untrusted data (never imports repository code, never needs torch),
diffs them against baselines under the policy, writes the PR comment, job summary, JUnit XML, step
outputs and annotations, optionally publishes to the PR, and exits 1 when anything blocks. A
failure to publish is reported, never turned into a different exit code.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kcgate.commands._options import COMMENT_MODES, emit, note
from kcgate.commands.diff import parse_today
from kcgate.errors import IOFault, UsageError, os_error
from kcgate.gate.decide import apply_fail_on, decide
from kcgate.history.source import source_of
from kcgate.history.store import open_store
from kcgate.history.view import load_view, recorded_commit
from kcgate.publish.outcome import missing_outcome
from kcgate.publish.settings import Settings, dig, head_sha
from kcgate.publish.step_files import append_text, output_text
from kcgate.render.annotations import check_annotation, make_annotations, render_workflow_commands, select
from kcgate.render.baseline_source import source_lines, source_ref
from kcgate.render.diff_formats import FORMATS as DIFF_FORMATS
from kcgate.render.escape import annotation_text, console_text, is_sha, md_text
from kcgate.render.junit_report import render_junit
from kcgate.render.labels import label
from kcgate.render.markdown import (
    CHECK_RUN_LIMIT,
    COMMENT_BUDGET,
    SUMMARY_LIMIT,
    RenderContext,
    Rerun,
    render_comment,
    render_report,
    render_summary,
)
from kcgate.render.pr_charts import charted
from kcgate.results.artifacts import collect_results
from kcgate.results.baseline import load_many, paused_gc, project_facts
from kcgate.results.model import write_atomic
from kcgate.results.records import OVERRIDES, VOLATILE_SUFFIXES

if TYPE_CHECKING:
    from kcgate.contracts.policy import Policy
    from kcgate.gate.decide import GateVerdict
    from kcgate.gate.model import Diff
    from kcgate.history.view import HistoryView
    from kcgate.publish.outcome import Outcome
    from kcgate.results.model import RunResult

HISTORY_COMMITS = 20  # recorded commits read for the comment's charts (they show the last few)


@dataclass(frozen=True)
class Options:
    """``kcgate report``'s flags, as given."""

    results: tuple[Path, ...]
    baseline: tuple[str, ...]
    contracts: Path | None
    expect_runner: tuple[str, ...]
    fail_on: str
    comment_out: Path | None
    summary_out: Path | None
    junit: Path | None
    annotations: bool | None
    publish: bool
    comment_mode: str
    check_run: bool
    today: str
    note: tuple[str, ...]
    gate_name: str
    history: Path | None = None  # a history database for the comment's charts
    fmt: str = ""  # console, github or json; "" follows annotations
    output: Path | None = None  # --output: what --format renders, instead of stdout


def report(o: Options) -> int:
    """The gate over every runner's results, rendered, written and published: its exit code (0 or 1)."""
    if o.comment_mode not in COMMENT_MODES:
        raise UsageError(f"--comment-mode {o.comment_mode[:40]!r} is not one of: {', '.join(COMMENT_MODES)}")
    if o.check_run and not o.publish:
        raise UsageError(
            "--check-run creates a check run through the API; add --publish (and set GITHUB_TOKEN)"
        )
    settings = replace(Settings.from_env(), gate_name=check_gate_name(o.gate_name))
    verdict, gate, runs, bases, policy, descriptions = _gate(
        o.results, o.baseline, o.contracts, o.expect_runner, o.fail_on, parse_today(o.today)
    )
    event = _event(settings)
    ctx = _context(settings, event, runs, _contracts_name(o.contracts))
    ctx = replace(ctx, contracts_file=_from_root(_contracts_name(o.contracts)))
    ctx = replace(
        ctx,
        descriptions=tuple(sorted(descriptions.items())),
        drift_rule=policy.budget_drift.describe(),
        base_ref=base_ref(settings, event, o.baseline),
        notes=tuple(n[:400] for n in o.note if n.strip()),
    )
    ctx = with_baseline_source(ctx, o.baseline, o.contracts)
    ctx = replace(ctx, base_source_url=_base_source(settings, ctx.base_ref, _contracts_name(o.contracts)))
    history, base = recorded_history(o.history, verdict, policy, bases if not ctx.base_ref else {})
    ctx = replace(ctx, charts=True, history=history, base_ref=ctx.base_ref or base)
    if o.publish:
        ctx = replace(ctx, job_urls=_job_urls(settings, event, verdict))
    outcomes = _publish(
        settings, event, verdict, ctx, o.publish, o.comment_mode, o.check_run, _contracts_name(o.contracts)
    )
    paths = _write_files(
        verdict, runs, ctx, o.comment_out, o.summary_out, o.junit, _contracts_name(o.contracts)
    )
    _write_step_files(settings, verdict, gate, ctx, outcomes, paths)
    annotate = settings.actions if o.annotations is None else o.annotations
    if o.fmt == "json":
        _print_json(verdict, outcomes, o.output)
    else:
        _print(verdict, gate, outcomes, annotate, _contracts_name(o.contracts), o.output)
    return gate.exit_code


def check_gate_name(name: str) -> str:
    """A gate name goes into a check run's name and an HTML comment: letters, digits, '.', '_', '-'."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}", name):
        raise UsageError(
            f"--gate-name {name[:40]!r}: use 1-40 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


# ---- the gate -------------------------------------------------------------------------------------


def _gate(
    results: tuple[Path, ...],
    baseline: tuple[str, ...],
    contracts: Path | None,
    expected: tuple[str, ...],
    fail_on: str,
    today: dt.date,
) -> tuple[Diff, GateVerdict, dict[str, RunResult], dict[str, RunResult], Policy, dict[str, str]]:
    policy, baselines_dir, descriptions = project_facts(contracts)
    policy = apply_fail_on(policy, fail_on)
    with paused_gc():
        runs = collect_results(results)
        if not runs and not expected and not policy.required_runners:
            raise UsageError(
                f"no results files found in {', '.join(map(str, results))[:300]}; pass the artifacts of `kcgate run`"
            )
        sources: list[str | Path] = list(baseline) or (
            [baselines_dir] if baselines_dir and baselines_dir.is_dir() else []
        )
        bases = load_many(sources) if sources else {}
        verdict, gate = decide(runs, bases, policy, today, expected)
        return verdict, gate, runs, bases, policy, descriptions


# ---- rendering context ---------------------------------------------------------------------------


def recorded_history(
    db: Path | None,
    verdict: Diff,
    policy: Policy,
    bases: Mapping[str, RunResult] = {},  # noqa: B006
) -> tuple[HistoryView | None, str]:
    """The charted contracts' recorded budgets, and the recorded commit whose runs ``bases`` are (the
    baseline given by path: "" where none is); a missing or broken history is a warning (the charts then
    show the baseline and the head only), never a different verdict."""
    if db is None:
        return None, ""
    try:
        with open_store(db, create=False) as conn:
            view = load_view(conn, HISTORY_COMMITS, charted(verdict), (), policy.budget_drift)
            return view, recorded_commit(conn, [c.sha for c in view.commits], bases) if bases else ""
    except UsageError as exc:
        typer.echo(
            console_text(f"warning: {exc.message}; the charts show the baseline and the head only"), err=True
        )
        return None, ""


def _event(settings: Settings) -> dict[str, Any]:
    """The event payload, or {} with a warning: a broken payload must not change the verdict."""
    try:
        return settings.load_event()
    except UsageError as exc:
        typer.echo(console_text(f"warning: {exc.message}; links and PR lookup are disabled"), err=True)
        return {}


def _contracts_name(contracts: Path | None) -> str:
    """The path annotations point at: as given (relative to the repository root), or contracts.toml."""
    return contracts.as_posix() if contracts else "contracts.toml"


def _from_root(path: str) -> str:
    """The contracts file as a reproduce line names it: relative to the directory report runs in (the
    repository root in CI), so an absolute CI path still runs on a reviewer's checkout."""
    p = Path(path)
    if p.is_absolute():
        try:
            return p.relative_to(Path.cwd()).as_posix()
        except ValueError:
            return path
    return path


def _context(
    settings: Settings, event: dict[str, Any], runs: dict[str, RunResult], contracts: str
) -> RenderContext:
    sha = head_sha(settings, event)
    devices = tuple((name, _device(run)) for name, run in sorted(runs.items()))
    reruns = tuple((name, rerun(run)) for name, run in sorted(runs.items()))
    vendor = dig(event, "workflow_run", "html_url")
    return RenderContext(
        title=settings.gate_name,
        head_sha=sha,
        run_url=settings.run_url(),
        source_url=settings.blob_url(sha, contracts),
        devices=devices,
        reruns=reruns,
        vendor_run_url=vendor
        if isinstance(vendor, str) and vendor.startswith(settings.server_url + "/")
        else "",
    )


def base_ref(settings: Settings, event: dict[str, Any], baseline: tuple[str, ...]) -> str:
    """The commit (or ref) the baselines were read at, for the comment: a git: source's ref, else the
    checked-out commit of a workflow that runs on the default branch, else the PR's base commit."""
    refs = [b.split(":", 2)[1] for b in baseline if b.startswith("git:") and b.count(":") >= 2]
    if refs:
        return refs[0]
    if baseline:
        return ""  # files given by path: no commit is known
    if settings.event_name in ("workflow_run", "push", "schedule", "workflow_dispatch") and is_sha(
        settings.sha
    ):
        return settings.sha
    base = dig(event, "pull_request", "base", "sha")
    return str(base) if is_sha(base) else ""


def with_baseline_source(
    ctx: RenderContext, baseline: tuple[str, ...], contracts: Path | None
) -> RenderContext:
    """Name the commit each runner's baseline is the run of, from the source file `kcgate baseline fetch`
    wrote beside the baselines (docs/history.md); an unreadable one is a warning, never the verdict."""
    try:
        source = source_of(baseline, project_facts(contracts)[1])
    except UsageError as exc:
        typer.echo(
            console_text(f"warning: {exc.message}; the comment does not name the baseline's commit"), err=True
        )
        return ctx
    if source is None:
        return ctx
    return replace(ctx, base_ref=source_ref(source), notes=source_lines(source) + ctx.notes)


def _base_source(settings: Settings, ref: str, contracts: str) -> str:
    return settings.blob_url(ref, contracts) if is_sha(ref) else ""


def _job_urls(settings: Settings, event: dict[str, Any], verdict: Diff) -> tuple[tuple[str, str], ...]:
    """Each runner's job log in the triggering run, for the comment's links (nothing without PyGithub)."""
    try:
        from kcgate.publish.github_pr import job_urls
    except ImportError:
        return ()
    return tuple(sorted(job_urls(settings, event, [r.runner for r in verdict.runners]).items()))


_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")  # a fingerprint flag that is an environment variable


def rerun(run: RunResult) -> Rerun:
    """How a runner ran its cases, for the reproduce lines: its device kind, the environment variables its
    fingerprint recorded set (a device-selection one excepted: it names this machine's device, not the
    numerics), and the command-line overrides its results recorded (``meta``: ``kcgate run``)."""
    env = tuple(
        (k, v)
        for k, v in run.fingerprint.flags
        if v and _ENV_NAME.fullmatch(k) and not k.endswith(VOLATILE_SUFFIXES)
    )
    meta = dict(run.meta)
    options: list[str] = []
    for flag, key in OVERRIDES:
        if meta.get(key):
            options += [flag, meta[key]]
    return Rerun(run.fingerprint.backend, env, tuple(options))


def _device(run: RunResult) -> str:
    fp = run.fingerprint
    return " ".join(x for x in (fp.backend, fp.device, fp.arch) if x)


# ---- publishing -----------------------------------------------------------------------------------


def _publish(
    settings: Settings,
    event: dict[str, Any],
    verdict: Diff,
    ctx: RenderContext,
    publish: bool,
    comment_mode: str,
    check_run: bool,
    contracts: str,
) -> list[Outcome]:
    if not publish:
        return []
    try:
        from kcgate.publish import github_pr
    except ImportError as exc:  # PyGithub is the `github` extra; the verdict stands without it
        return [missing_outcome(exc)]

    now = dt.datetime.now(dt.timezone.utc)
    budget = github_pr.Budget(settings.max_total)  # one cap for all of publishing
    outcomes = []
    if check_run:  # first, so the comment can link to it
        summary = render_report(verdict, ctx, CHECK_RUN_LIMIT - 1024, collapse=True)
        notes = [check_annotation(a) for a in make_annotations(verdict, contracts)]
        outcomes.append(github_pr.publish_check_run(settings, event, summary, notes, verdict.passed, budget))
        if outcomes[-1].action == "created" and outcomes[-1].url.startswith(settings.server_url + "/"):
            ctx = replace(ctx, check_run_url=outcomes[-1].url)
    if comment_mode == "sticky":
        comment = render_comment(verdict, ctx, COMMENT_BUDGET)
        outcomes.append(github_pr.publish_comment(settings, event, comment, now, budget))
    return outcomes


# ---- files and step outputs -----------------------------------------------------------------------


def _write_files(
    verdict: Diff,
    runs: dict[str, RunResult],
    ctx: RenderContext,
    comment_out: Path | None,
    summary_out: Path | None,
    junit: Path | None,
    contracts: str,
) -> dict[str, str]:
    paths: dict[str, str] = {}
    if comment_out and _written(
        lambda: write_atomic(comment_out, render_comment(verdict, ctx, COMMENT_BUDGET))
    ):
        paths["comment-path"] = str(comment_out)
    if summary_out and _written(lambda: write_atomic(summary_out, render_summary(verdict, ctx))):
        paths["summary-path"] = str(summary_out)
    if junit and _written(lambda: write_atomic(junit, render_junit(verdict, runs, contracts))):
        paths["junit-path"] = str(junit)
    return paths


def _written(write: Callable[[], None]) -> bool:
    """Write one report file; a failure (full disk, no permission) is a warning: the verdict stands."""
    try:
        write()
    except IOFault as exc:
        typer.echo(console_text(f"warning: {exc.message}; the verdict stands"), err=True)
        return False
    except OSError as exc:
        typer.echo(console_text(f"warning: {exc.filename}: {os_error(exc)}; the verdict stands"), err=True)
        return False
    return True


def _write_step_files(
    settings: Settings,
    verdict: Diff,
    gate: GateVerdict,
    ctx: RenderContext,
    outcomes: list[Outcome],
    paths: dict[str, str],
) -> None:
    if settings.step_summary:
        notes = "".join(
            f"> **kcgate could not post to the pull request:** {_md(o.detail)}\n\n"
            for o in outcomes
            if o.failed
        )
        budget = SUMMARY_LIMIT - 4096 - len(notes.encode("utf-8"))
        text = notes + render_summary(verdict, ctx, budget)
        _written(lambda: append_text(settings.step_summary, text))
    if settings.output:
        _written(
            lambda: append_text(settings.output, output_text(step_outputs(verdict, gate, outcomes, paths)))
        )


def step_outputs(
    verdict: Diff, gate: GateVerdict, outcomes: list[Outcome], paths: dict[str, str]
) -> dict[str, str]:
    """verdict, counts (JSON), blocking, the written paths, and the comment's URL when one was posted."""
    counts = {k: v for k, v in verdict.counts().items() if v}
    out = {
        "verdict": "pass" if gate.passed else "fail",
        "counts": json.dumps(counts, sort_keys=True, separators=(",", ":")),
        "blocking": str(len(gate.blocking)),
        **paths,
    }
    for kind in ("comment", "check-run"):
        posted = [o.url for o in outcomes if o.kind == kind and o.action in ("created", "updated") and o.url]
        if posted:
            out[f"{kind}-url"] = posted[0]
    return out


def _md(text: str) -> str:
    return md_text(text, 400)


# ---- stdout ---------------------------------------------------------------------------------------


def _print(
    verdict: Diff,
    gate: GateVerdict,
    outcomes: list[Outcome],
    annotate: bool,
    contracts: str,
    output: Path | None = None,
) -> None:
    out = ""
    if annotate:
        kept, _omitted = select(make_annotations(verdict, contracts))
        out += render_workflow_commands(kept)
    for o in outcomes:
        if o.failed and annotate:
            out += f"::warning title=kcgate publish::{annotation_text(o.detail)}; the report is in the job summary\n"
        elif o.action == "skipped" and annotate:
            out += f"::notice title=kcgate publish::{annotation_text(o.detail)}\n"
        else:
            out += console_text(f"publish: {o.action}: {o.detail} {o.url}".rstrip()) + "\n"
    line = verdict_line(verdict, gate) + "\n"
    if annotate:  # the annotations are the errors: -q keeps them
        emit(out + line, output)
        return
    emit(out + line, output, verdict=line, detail=DIFF_FORMATS["console"](verdict) + "\n" + out + line)


def _print_json(verdict: Diff, outcomes: list[Outcome], output: Path | None) -> None:
    """``--format json``: the verdict as ``kcgate diff --format json`` writes it; publishing goes to stderr."""
    for o in outcomes:
        note(console_text(f"publish: {o.action}: {o.detail} {o.url}".rstrip()))
    emit(DIFF_FORMATS["json"](verdict), output)


def verdict_line(verdict: Diff, gate: GateVerdict) -> str:
    """One plain line for the log: PASS/FAIL, blocking counts by category, runners and cases."""
    detail = ", ".join(
        f"{label(r.category)} {r.changes}" for r in sorted(gate.reasons, key=lambda r: r.category)
    )
    head = f"FAIL: {len(gate.blocking)} blocking ({detail})" if gate.reasons else "PASS: nothing blocks"
    return f"kcgate report: {head}; {len(verdict.runners)} runners, {len(verdict.changes)} cases"
