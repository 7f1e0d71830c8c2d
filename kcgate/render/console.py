"""Plain-text tables for the terminal (pure: results in, str out)."""

from __future__ import annotations

from collections.abc import Sequence

from kcgate.plan import repro_command
from kcgate.render.escape import console_text
from kcgate.results.model import CaseResult, RunResult, Status

MARK = {s.value: s.value.upper() for s in Status}


def fmt_budget(b: float | None) -> str:
    if b is None:
        return "inf"
    return f"{b:.3g}" if b < 1000 else f"{b:.2e}"


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def _row(c: CaseResult) -> list[str]:
    why = c.signature.summary if c.signature else (c.message.splitlines()[0] if c.message else "")
    return [
        MARK.get(c.status, c.status.upper()),
        c.case_id,
        c.klass,
        fmt_budget(c.metrics.budget_used)
        + (f" (grad {g})" if (g := c.metrics.worst_grad) else "")
        + _ratio(c),
        "" if c.metrics.max_ulp is None else f"{c.metrics.max_ulp:.0f}",
        why[:90],
    ]


def _ratio(c: CaseResult) -> str:
    """tolerance method "relative": the error over the baseline's, beside the budget."""
    ratio = dict(c.metrics.extra).get("relative_ratio")
    return "" if ratio is None else f" ({ratio:.3g}x baseline)"


def render_run(run: RunResult) -> str:
    rows = [_row(c) for c in run.cases]
    head = f"kcgate: {len(run.cases)} cases on runner {run.runner} ({run.fingerprint.device}, torch {run.fingerprint.torch})"
    body = table(rows, ["status", "case", "class", "budget", "max ulp", "signature / message"])
    return console_text(f"{head}\n{body}{shrunk_lines(run)}\n{summary_line(run)}")


def shrunk_lines(run: RunResult) -> str:
    """Each failure shrunk to a smaller shape (kcgate.engine.shrink), with the command that reproduces it."""
    lines = [
        f"  {c.case_id}: smallest failing shape {'x'.join(map(str, c.shrunk_shape))} "
        f"(same cause, {c.signature.cause if c.signature else 'failed'}): "
        + repro_command(c.contract_id, c.dtype, c.seed, c.shrunk_shape, _contracts(run))
        for c in run.cases
        if c.shrunk_shape
    ]
    return "\n\nshrunk reproductions:\n" + "\n".join(lines) if lines else ""


def _contracts(run: RunResult) -> str:
    return "" if run.contracts_file in ("", "contracts.toml") else run.contracts_file


def summary_line(run: RunResult) -> str:
    counts = {s: sum(c.status == s for c in run.cases) for s in MARK}
    parts = [f"{n} {s}" for s, n in counts.items() if n]
    verdict = "all contracts hold" if counts[Status.PASS] == len(run.cases) else "VIOLATIONS"
    return f"{verdict}: " + ", ".join(parts)


def render_plan(cases: Sequence[object]) -> str:
    rows = [[c.case_id, c.klass, c.op, c.dtype, "x".join(map(str, c.shape))] for c in cases]  # type: ignore[attr-defined]
    return console_text(table(rows, ["case", "class", "op", "dtype", "shape"]) + f"\n{len(rows)} cases")
