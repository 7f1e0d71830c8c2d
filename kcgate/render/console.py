"""Plain-text tables for the terminal (pure: results in, str out)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from kcgate.plan import nonzero_phrase, repro_command
from kcgate.render.escape import console_text
from kcgate.results.model import CaseResult, RunResult, Status
from kcgate.vocab.dtypes import low_precision

MARK = {s.value: s.value.upper() for s in Status}


def fmt_budget(b: float | None) -> str:
    if b is None:
        return "inf"
    return f"{b:.3g}" if b < 1000 else f"{b:.2e}"


def timing(c: CaseResult) -> str:
    """Where a case's time went: its duration, then the kernel's own (device events on CUDA/ROCm, wall time
    after a synchronize elsewhere), the fp64 oracle's and kcgate's own (inputs, guards, comparisons)."""
    return (
        f"{c.duration_s:.2f} s: kernel {1e3 * c.kernel_s:.1f} ms, oracle {1e3 * c.oracle_s:.1f} ms, "
        f"harness {1e3 * c.harness_s:.1f} ms"
    )


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
        + (f" (output {o})" if (o := c.metrics.worst_output) else "")
        + _ratio(c),
        _ulp(c),
        why[:90],
    ]


def _ulp(c: CaseResult) -> str:
    """Max ULP for 16- and 8-bit dtypes only: in fp32 a tiny, allowed error near zero spans millions of ULPs."""
    return "" if c.metrics.max_ulp is None or not low_precision(c.dtype) else f"{c.metrics.max_ulp:.0f}"


def _ratio(c: CaseResult) -> str:
    """tolerance method "relative": the error over the baseline's, beside the budget."""
    ratio = dict(c.metrics.extra).get("relative_ratio")
    return "" if ratio is None else f" ({ratio:.3g}x baseline)"


def render_run(run: RunResult) -> str:
    rows = [_row(c) for c in run.cases]
    head = f"kcgate: {len(run.cases)} cases on runner {run.runner} ({run.fingerprint.device}, torch {run.fingerprint.torch})"
    body = table(rows, ["status", "case", "class", "budget", "max ulp (16/8-bit)", "signature / message"])
    return console_text(f"{head}\n{body}{shrunk_lines(run)}\n{summary_line(run)}")


def shrunk_lines(run: RunResult) -> str:
    """Each failure shrunk to a smaller shape (kcgate.engine.shrink), with the command that reproduces it."""
    lines = [_shrunk_line(c, _contracts(run)) for c in run.cases if c.shrunk_shape or c.shrunk_nonzero]
    return "\n\nshrunk reproductions:\n" + "\n".join(lines) if lines else ""


def _shrunk_line(c: CaseResult, contracts: str) -> str:
    cause = f"same cause, {c.signature.cause if c.signature else 'failed'}"
    sparse = nonzero_phrase(c.shrunk_nonzero)
    if not c.shrunk_shape:  # no smaller shape: the sparsest input at the case's own
        return f"  {c.case_id}: at its own shape {sparse} ({cause})"
    return (
        f"  {c.case_id}: smallest failing shape {'x'.join(map(str, c.shrunk_shape))} ({cause}): "
        + repro_command(c.contract_id, c.dtype, c.seed, c.shrunk_shape, contracts)
        + (f"; there it {sparse}" if sparse else "")
    )


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


# ---- progress in CI logs -----------------------------------------------------------------------------

PROGRESS_S = 30.0  # under CI, a progress line at least this often, even while one long case runs
PROGRESS_STEPS = 10  # and one each time another tenth of the cases has finished (pytest's [ 42%] lines)
PROGRESS_ENV = "KCGATE_PROGRESS_S"  # seconds between lines at most, instead of PROGRESS_S
MIN_PROGRESS_S = (
    1.0  # a smaller KCGATE_PROGRESS_S is raised to this (1e-300 printed 29,637 lines for 21 cases)
)


def progress_interval(env: Mapping[str, str]) -> float:
    """PROGRESS_S, or KCGATE_PROGRESS_S where it is a positive, finite number of seconds, at least
    MIN_PROGRESS_S."""
    try:
        value = float(env.get(PROGRESS_ENV, ""))
    except ValueError:
        return PROGRESS_S
    return max(value, MIN_PROGRESS_S) if 0 < value < math.inf else PROGRESS_S


def in_ci(env: Mapping[str, str]) -> bool:
    """CI=true (GitHub Actions, GitLab, Buildkite, ... set it); CI=false or 0 is not CI."""
    return env.get("CI", "").strip().lower() not in ("", "0", "false", "no")


class CiProgress:
    """A line every tenth of the cases or every ``interval_s``, whichever comes first: a CI log shows a run
    is alive (a single slow case included) without a line per case. ``with`` starts the thread that writes
    the timed lines; ``case_done`` is the run loop's progress callback. ``clock`` is injectable for tests."""

    def __init__(
        self,
        total: int,
        write: Callable[[str], None],
        interval_s: float = PROGRESS_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.write, self.interval, self.clock = total, write, interval_s, clock
        self.start = self.last = clock()
        self.done = self.not_ok = self.step = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def case_done(self, i: int, n: int, result: CaseResult) -> None:
        with self._lock:
            self.done, self.total = i, n
            self.not_ok += not result.ok
            step = i * PROGRESS_STEPS // max(n, 1)
            if step > self.step:
                self.step = step
                self._emit()

    def tick(self) -> None:
        """Write a line when none has been written for ``interval`` seconds."""
        with self._lock:
            if self.clock() - self.last >= self.interval:
                self._emit()

    def line(self) -> str:
        pct = 100 * self.done // max(self.total, 1)
        elapsed = int(self.clock() - self.start)
        bad = f", {self.not_ok} not ok" if self.not_ok else ""
        return f"[{pct:3d}%] {self.done}/{self.total} cases{bad}, {elapsed // 60}m{elapsed % 60:02d}s"

    def _emit(self) -> None:
        self.last = self.clock()
        self.write(self.line())

    def __enter__(self) -> CiProgress:
        self.write(self.line() + f" (a line every {PROGRESS_STEPS}% of the cases or {self.interval:g} s)")
        self._thread = threading.Thread(target=self._beat, name="kcgate-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.interval / 4)):
            self.tick()


class TerminalBar:
    """A live bar on one terminal line (rewritten in place), with a line of its own for each case that is not
    ok, so failures stay on screen: ``kcgate run`` in a terminal. ``write`` takes text without a newline."""

    WIDTH = 30

    def __init__(self, write: Callable[[str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.write, self.clock = write, clock
        self.start = clock()
        self.not_ok = 0

    def case_done(self, i: int, n: int, result: CaseResult) -> None:
        if not result.ok:
            self.not_ok += 1
            line = f"{MARK.get(result.status, result.status.upper()):<7} {result.case_id} ({result.duration_s:.2f} s)"
            self.write("\r\x1b[K" + console_text(line) + "\n")
        self.write("\r\x1b[K" + self.bar(i, n))

    def bar(self, i: int, n: int) -> str:
        filled = self.WIDTH * i // max(n, 1)
        bad = f", {self.not_ok} not ok" if self.not_ok else ""
        elapsed = int(self.clock() - self.start)
        return f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {100 * i // max(n, 1):3d}% {i}/{n} cases{bad}, {elapsed}s"

    def __enter__(self) -> TerminalBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.write("\n")  # the table starts on a line of its own
