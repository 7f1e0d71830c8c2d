"""Run cases in worker subprocesses so a kernel that segfaults, aborts, exits, hangs, runs out of
memory, floods stdout, closes its stdio, forges results or changes torch's global state costs one case:
it is recorded (an error, or ``global-state``) and a fresh worker continues. Results come back on an
authenticated channel (``kcgate.execution.channel``); the worker's process group is killed when it is done.

The worker gets the parent's parsed contracts (``Project.to_json``) in its init line on the command pipe:
contracts.toml is parsed once per run, not again by every worker.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Protocol

from kcgate.contracts.records import Project
from kcgate.devices import default_backend, get_backend
from kcgate.engine.case import error_result, execute_case
from kcgate.errors import ExitCode, KcgateError, KernelStartError, UsageError
from kcgate.execution import channel, handoff
from kcgate.execution.worker import thread_count
from kcgate.plan import Case
from kcgate.results.model import CaseResult, Fingerprint
from kcgate.sandbox.process import SANDBOX_ENV, judge_env
from kcgate.vocab.causes import SLOW_REFERENCE
from kcgate.vocab.isolation import ISOLATION_MODES

STARTUP_TIMEOUT_S = 120.0
TAIL_CHARS = 2000


PIPELINE_DEPTH = 2  # cases on the worker's command pipe: the next is queued while one runs


@dataclass
class Sent:
    """A case on a worker's command pipe: its nonce ("" if the pipe had closed), where the worker's log
    stood and when it was sent."""

    case: Case
    nonce: str
    log_offset: int
    at: float


def case_timeout(project: Project, case: Case, override: float | None) -> float:
    """The one timeout rule: ``--timeout`` (the executor's override) if given, else the contract's
    ``protocol.timeout_s``; counted from when the worker could start the case."""
    return override or project.contract(case.contract_id).protocol.timeout_s


def timeout_message(limit: float, tail: str) -> str:
    """A timed-out case's message: where the worker said its custom op's reference is slow (a Python loop
    over time steps), that comes first, with what the derived bound would cost; else a bare timeout."""
    slow = next((line for line in reversed(tail.splitlines()) if line.startswith(SLOW_REFERENCE)), "")
    if slow:
        said = slow.removeprefix(SLOW_REFERENCE)
        return f"timed out after {limit:g} s (per-case timeout): the reference is slow: {said}; the worker was killed"
    return f"timed out after {limit:g} s (per-case timeout); the worker was killed"


def worker_env(env: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment: ``env``, with numpy's BLAS held to the worker's torch thread count
    (``worker.thread_count``) unless OPENBLAS_NUM_THREADS is set. torch imports numpy, whose OpenBLAS reads
    its count once, at load, and would otherwise run a large dot product on every core."""
    return {"OPENBLAS_NUM_THREADS": str(thread_count(env)), **env}


class Executor(Protocol):
    """What runs cases: in worker processes (IsolatedExecutor, EnvRouter) or here (InProcessExecutor)."""

    def start(self) -> None:
        """Begin start-up now (a worker's torch import overlaps the caller's work)."""

    def handshake(self) -> tuple[str, Fingerprint]:
        """The device the cases run on and its fingerprint, from the process that runs them."""

    def default_shapes(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        """The op families' default shapes, from the process that runs the cases."""

    def run(self, case: Case, kernel: str | None = None) -> CaseResult:
        """One case (``kernel``: another kernel in place of the contract's, e.g. a calibration state)."""

    def run_many(self, cases: list[Case], kernel: str | None = None) -> Iterator[CaseResult]:
        """The results of ``cases`` as each finishes: in plan order from one worker, in finishing order from a
        WorkerPool (callers that need plan order key the results by case id)."""

    def close(self) -> None:
        """Stop the workers; safe to call twice."""


class Halted(Exception):
    """The executor was halted (``halt``): it starts no worker any more."""


class WorkerDied(Exception):
    """The worker exited or was killed while running a case."""


class WorkerHandle:
    """One live worker process, its command pipe and its authenticated result channel."""

    def __init__(self, project: str, device: str, memory_limit: int, env: dict[str, str] | None) -> None:
        """``project``: the parsed contracts as ``handoff.encode`` text, sent in the init line."""
        self.log: IO[bytes] = tempfile.TemporaryFile()
        self.key = channel.new_key()
        r, w = os.pipe()
        cmd = [
            sys.executable,
            "-m",
            "kcgate.execution.worker",
            "--device",
            device,
            "--memory-limit",
            str(memory_limit),
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=self.log,
            pass_fds=(w,),
            env=worker_env(os.environ if env is None else env),
            start_new_session=True,  # its own process group: close() kills whatever a kernel forked
        )
        os.close(w)
        self.results = os.fdopen(r, "rb")
        self.buffer = b""
        self.retired = False
        self.answered_at = 0.0  # when the last answer came (the next queued case started then)
        self.answers = 0  # cases this worker has answered (a crash after some may be their damage)
        self.tail_from = 0, ""  # where the log of the case awaited begins, and its id
        self.hello_nonce = channel.new_nonce()
        self.hello: dict[str, Any] | None = (
            None  # the handshake, awaited lazily (start-up overlaps the parent)
        )
        try:  # on the pipe, never in argv; the project's text is spliced in, not encoded again per worker
            self._write(_init_line({"fd": w, "key": self.key, "nonce": self.hello_nonce}, project))
        except WorkerDied:
            pass  # it died at once: wait_ready reports it with its stderr

    def wait_ready(self) -> dict[str, Any]:
        if self.hello is None:
            self.hello = channel.verify(self.key, self.hello_nonce, self._read_line(STARTUP_TIMEOUT_S))
        return self.hello

    def send(self, case: Case, kernel: str | None = None) -> Sent:
        """Queue ``case`` on the command pipe (the worker starts it when it has answered those before)."""
        self.wait_ready()
        sent = Sent(case, channel.new_nonce(), self.log.seek(0, os.SEEK_END), time.monotonic())
        try:
            self._send({"case": case.to_json(), "kernel": kernel, "nonce": sent.nonce})
        except WorkerDied:
            sent.nonce = ""  # it is gone: its answer reports how it died
        return sent

    def answer(self, sent: Sent, timeout: float) -> dict[str, Any]:
        """The result of ``sent.case`` as the worker signed it; any other line is a ChannelError.
        ``timeout`` counts from when the worker could start the case (sent, and the one before answered)."""
        self.tail_from = sent.log_offset, sent.case.case_id
        if not sent.nonce:
            raise WorkerDied(self._death())
        start = max(sent.at, self.answered_at)
        answer = channel.verify(
            self.key, sent.nonce, self._read_line(max(start + timeout - time.monotonic(), 0.01))
        )
        self.answered_at = time.monotonic()
        self.answers += 1
        if answer.get("case_id") != sent.case.case_id or not isinstance(answer.get("result"), dict):
            raise channel.ChannelError(
                f"a signed answer for another case ({str(answer.get('case_id'))[:80]!r})"
            )
        self.retired = bool(answer.get("retire"))
        return answer["result"]  # type: ignore[no-any-return]

    def _send(self, message: dict[str, Any]) -> None:
        self._write(json.dumps(message) + "\n")

    def _write(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line.encode())
            self.proc.stdin.flush()
        except OSError:  # BrokenPipeError: it is gone
            raise WorkerDied("the worker's input pipe closed") from None

    def _read_line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.results], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.results.fileno(), 1 << 20)
                if not chunk:
                    raise WorkerDied(self._death())
                self.buffer += chunk
                if len(self.buffer) > channel.MAX_LINE_BYTES:
                    raise channel.ChannelError(f"over {channel.MAX_LINE_BYTES} bytes without a line end")
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _death(self) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        if code < 0:
            return f"worker killed by {_signal_name(-code)} (signal {-code})"
        return f"worker exited with code {code} mid-case"

    def stderr_tail(self) -> str:
        """The worker's output since the awaited case began (from its start marker, when it got that far)."""
        offset, case_id = self.tail_from
        self.log.seek(offset)
        text = self.log.read().decode("utf-8", "replace")
        marker = f"{channel.CASE_MARKER}{case_id}\n"
        if case_id and marker in text:  # output of the case before it may precede (it was queued meanwhile)
            text = text[text.rindex(marker) :]
        return text[-TAIL_CHARS:]

    def kill(self) -> None:
        """SIGKILL the worker's process group: the worker and every process its kernels forked."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        """Ask the worker to stop (its commands end), then kill its process group before reaping it, so
        no child a kernel forked outlives the run (and the group's id cannot have been reused)."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        _exited_within(self.proc.pid, 5.0)
        self.kill()
        self.proc.wait()
        self.results.close()
        self.log.close()


def _unshrunk(result: CaseResult, lost: str) -> CaseResult:
    """A result from the run without shrinking, saying why (``lost``: how the shrinking run ended)."""
    if not lost:
        return result
    note = f"not shrunk: the search for a smaller failing shape ended the worker ({lost[:300]}); run again without it"
    return replace(result, message=f"{result.message}; {note}" if result.message else note)


def _rerun(result: CaseResult, first: str) -> CaseResult:
    """A result from the case's rerun alone in a fresh worker, saying how its first worker ended (``first``)."""
    if not first:
        return result
    note = f"rerun alone in a fresh worker (its first worker ended: {first}); this is the rerun's result"
    return replace(result, message=f"{result.message}; {note}" if result.message else note)


def _init_line(fields: dict[str, Any], project: str) -> str:
    """The worker's first line: ``fields`` and ``"project"`` (``handoff.encode``'s base64 text, spliced in as
    a JSON string: it has nothing to escape) in one JSON object."""
    return json.dumps(fields)[:-1] + ', "project": "' + project + '"}\n'


def _exited_within(pid: int, seconds: float) -> bool:
    """Wait for ``pid`` to exit without reaping it (its id stays taken until Popen.wait reaps it)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        time.sleep(0.01)
    return False


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


class IsolatedExecutor:
    """Runs cases one at a time in a reused worker; replaces the worker after a crash, a timeout, a
    corrupted result channel, or a case that changed global state or the worker's stdio."""

    def __init__(
        self,
        project: Project,
        device: str = "auto",
        memory_limit: int = 0,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        project_text: str = "",
    ) -> None:
        """``project_text``: ``project`` already encoded (``handoff.encode``), shared by the executors of a run."""
        self.project, self.device, self.memory_limit = project, device, memory_limit
        self.timeout, self.env = timeout, env
        self.worker: WorkerHandle | None = None
        self.project_text = project_text
        self.halted = False
        self.blame: EnvBlame | None = None  # the contracts whose env this worker runs under, if any

    def start(self) -> None:
        """Spawn the worker now (its torch import then overlaps the parent's); failures surface later."""
        if self.worker is None:
            self.project_text = self.project_text or handoff.encode(self.project)  # once per executor
            self.worker = WorkerHandle(self.project_text, self.device, self.memory_limit, self.env)

    def handshake(self) -> tuple[str, Fingerprint]:
        """The device the worker resolved and its fingerprint: the process that runs kernels describes itself."""
        hello = self._worker().wait_ready()
        return str(hello["device"]), Fingerprint.from_json(hello["fingerprint"])

    def default_shapes(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        """The op families' default shapes, as the worker's kcgate knows them (this process stays torch-free)."""
        shapes = self._worker().wait_ready()["default_shapes"]
        return {op: tuple(tuple(s) for s in listed) for op, listed in shapes.items()}

    def run(self, case: Case, kernel: str | None = None) -> CaseResult:
        """Run ``case`` (with another kernel in place of the contract's, e.g. a calibration state)."""
        return next(self.run_many([case], kernel))

    def run_many(self, cases: list[Case], kernel: str | None = None) -> Iterator[CaseResult]:
        """The results of ``cases`` in order. The next case waits on the worker's pipe while one runs, so
        the worker never idles while this process records a result; a case whose worker is replaced (a
        crash, a timeout, a bad channel, changed state) before it began is sent again to the fresh one."""
        queue, sent = deque(cases), deque[Sent]()
        owner: WorkerHandle | None = None  # the worker the cases in ``sent`` were queued to
        unshrunk: dict[str, str] = {}  # case id -> how its shrinking ended the worker (it runs again without)
        rerun: dict[
            str, str
        ] = {}  # case id -> how it ended a worker that had run earlier cases (run again alone)
        while queue or sent:
            worker = self._worker()  # a fresh one if the last was replaced or died between answers
            if worker is not owner:  # what the old one had queued is sent again, as if never queued
                queue.extendleft(reversed([s.case for s in sent]))
                sent.clear()
                owner = worker
            while queue and len(sent) < PIPELINE_DEPTH:
                sent.append(worker.send(queue.popleft(), kernel))
            first = sent.popleft()
            earlier = worker.answers
            result, lost = self._answer(worker, first, case_timeout(self.project, first.case, self.timeout))
            if (
                lost
                and earlier
                and first.case.case_id not in rerun
                and not result.message.startswith("timed out")
            ):
                # ClusterFuzz's rule: a crash in a worker that had run other cases is reproduced alone, in a fresh
                # worker, before it is charged: the damage may be an earlier case's
                rerun[first.case.case_id] = (
                    f"{result.message.split(chr(10), 1)[0][:300]} after {earlier} earlier cases"
                )
                queue.extendleft(reversed([s.case for s in sent]))
                sent.clear()
                queue.appendleft(first.case)  # first, alone, in the fresh worker
                continue
            if lost and first.case.shrink_s > 0:
                # the kernel may have crashed or hung only at a smaller shape the shrink tried: the case's own
                # verdict is not lost with it; it runs again, first, without shrinking (kcgate.engine.shrink)
                unshrunk[first.case.case_id] = result.message.split("\n", 1)[0]
                queue.appendleft(replace(first.case, shrink_s=0.0))
                continue
            yield _rerun(
                _unshrunk(result, unshrunk.pop(first.case.case_id, "")), rerun.pop(first.case.case_id, "")
            )

    def _answer(self, worker: WorkerHandle, sent: Sent, limit: float) -> tuple[CaseResult, bool]:
        """The case's result, and whether it was lost with its worker (a crash, a timeout, a bad channel)."""
        t0 = time.perf_counter()
        try:
            result = CaseResult.from_json(worker.answer(sent, limit))
        except TimeoutError:
            message = timeout_message(limit, worker.stderr_tail())
        except WorkerDied as exc:
            message = str(exc)
        except (
            channel.ChannelError,
            ValueError,
        ) as exc:  # ValueError: a signed result that does not validate
            message = (
                f"the worker's result channel carried {exc}: a kernel wrote to it or corrupted the worker, "
                "so this case has no trustworthy result; the worker was replaced"
            )
        else:
            if worker.retired:  # it changed global state or its stdio: the next case gets a fresh worker
                self._discard()
            return result, False
        tail = worker.stderr_tail().strip()
        self._discard()
        full = message + (f"\n--- stderr tail ---\n{tail}" if tail else "")
        return error_result(sent.case, full, time.perf_counter() - t0), True

    def _worker(self) -> WorkerHandle:
        if self.halted:
            raise Halted("the run is stopping")
        if self.worker is not None and self.worker.hello is not None and not self.worker.alive():
            self._discard()  # it died between cases (a kernel's late damage): start the next case afresh
        try:
            self.start()
            assert self.worker is not None
            hello = self.worker.wait_ready()
        except (WorkerDied, TimeoutError, channel.ChannelError) as exc:
            tail = self.worker.stderr_tail().strip().splitlines()[-1:] if self.worker else []
            self._discard()
            said = f"; it said: {tail[0][:300]}" if tail else ""
            if self.blame:
                raise self.blame.error(f"{exc or 'timeout'}{said}") from None
            raise KcgateError(
                f"the worker process ({sys.executable}) failed to start ({exc or 'timeout'}){said}; "
                "run with --isolation none to see the error in this process"
            ) from None
        if not hello.get("ready"):
            self._discard()
            said = str(hello.get("error", "the worker refused to start"))
            if self.blame:
                raise self.blame.error(said)
            error = UsageError if hello.get("exit_code") == ExitCode.BAD_USAGE else KcgateError
            raise error(said)
        return self.worker

    def _discard(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker.close()
            self.worker = None

    def halt(self) -> None:
        """From another thread: start no more workers and kill the live one, so a read waiting on it returns
        (its case becomes an error the run no longer collects); ``close`` still reaps it."""
        self.halted = True
        worker = self.worker  # read once: the lane's thread may replace or drop it meanwhile
        if worker is not None:
            worker.kill()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


class InProcessExecutor:
    """No isolation (``--isolation none``): fastest, but a crashing kernel takes the run with it."""

    def __init__(self, project: Any, device: str = "auto") -> None:
        self.project = project
        self.backend = get_backend(default_backend() if device == "auto" else device)
        self.backend.configure()  # as a worker does: kcgate's numerics settings before the state is captured
        from kcgate.engine import torch_state

        torch_state.capture()  # a kernel's changes are restored and recorded, though the process is shared

    def start(self) -> None:
        pass

    def handshake(self) -> tuple[str, Fingerprint]:
        envs = {c.id: c.env for c in self.project.contracts if c.env}
        return self.backend.name, self.backend.fingerprint().with_contract_envs(envs)

    def default_shapes(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        from kcgate.numerics.ops import default_shapes

        return default_shapes()

    def run(self, case: Case, kernel: str | None = None) -> CaseResult:
        """In this process no timeout can be enforced: a hanging kernel hangs the run."""
        env = dict(self.project.contract(case.contract_id).env)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # best effort in-process: modules imported before keep what they read
        try:
            return execute_case(self.project, case, self.backend, kernel=kernel)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def run_many(self, cases: list[Case], kernel: str | None = None) -> Iterator[CaseResult]:
        for case in cases:
            yield self.run(case, kernel)

    def close(self) -> None:
        pass


def check_isolation(mode: str) -> None:
    if mode not in ISOLATION_MODES:
        raise UsageError(f"--isolation {mode!r}: choose 'process' or 'none'")


_SHADOWABLE = (
    "torch",
    "kcgate",
    "numpy",
)  # what the worker imports before any case: a contract must not hide them
_PATH_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "LD_PRELOAD", "LD_LIBRARY_PATH")


@dataclass(frozen=True)
class EnvBlame:
    """Contracts whose ``env`` a worker runs under: when it cannot start, theirs is the cause (exit 7, not
    kcgate's exit 4), and the message names them, the variable or shadowed module, and the fix."""

    contracts: tuple[str, ...]
    env: tuple[tuple[str, str], ...]

    def error(self, said: str) -> KernelStartError:
        ids = ", ".join(repr(c) for c in self.contracts[:5]) + (" ..." if len(self.contracts) > 5 else "")
        env = dict(self.env)
        shadows = _shadows(env.get("PYTHONPATH", ""))
        if shadows:
            var, fix = (
                "PYTHONPATH",
                (
                    f"{shadows[0]} shadows the real {Path(shadows[0]).stem}: remove that directory from the "
                    "contract's env.PYTHONPATH, or keep only the kernel's own modules there"
                ),
            )
        else:
            var = next((k for k in _PATH_VARS if k in env), ", ".join(env))
            fix = f"correct or remove env.{var.split(', ')[0]} in the contract, then `kcgate run -c ID` alone"
        return KernelStartError(
            f"contract {ids}: its worker failed to start under the contract's env ({var}): {said}\n"
            f"    fix: {fix}"
        )


def _shadows(pythonpath: str) -> list[str]:
    """Modules in a PYTHONPATH's directories named like one the worker needs (``dir/torch``, ``dir/torch.py``)
    that are not the one this process finds (a PYTHONPATH naming kcgate's own checkout shadows nothing)."""
    out = []
    for name in _SHADOWABLE:
        spec = importlib.util.find_spec(name)
        real = Path(spec.origin).resolve() if spec and spec.origin else None
        for entry in filter(None, pythonpath.split(os.pathsep)):
            for candidate in (Path(entry) / name / "__init__.py", Path(entry) / f"{name}.py"):
                if candidate.exists() and candidate.resolve() != real:
                    out.append(str(candidate.parent if candidate.name == "__init__.py" else candidate))
    return out


def _worker_env(base: Mapping[str, str], key: tuple[tuple[str, str], ...], blame: EnvBlame) -> dict[str, str]:
    """A contract env's worker environment. The variables that load code at a process's start reach only
    its sandbox servers (``sandbox.process.judge_env``), once a sandbox server's interpreter is seen to start
    under them (else exit 7 naming the contract, as a worker that cannot start). Where the kernels or the
    references run in the judge (KCGATE_SANDBOX=0, KCGATE_SANDBOX_REFERENCES=0: the cost comparisons), the
    judge gets them all."""
    full = {**base, **dict(key)}
    if "0" in (full.get("KCGATE_SANDBOX"), full.get("KCGATE_SANDBOX_REFERENCES")):
        return full
    env = judge_env(base, dict(key))
    if SANDBOX_ENV in env:
        probe = subprocess.run(
            [sys.executable, "-c", "import kcgate.sandbox.server"],
            env=full, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
            start_new_session=True,
        )  # fmt: skip
        if probe.returncode != 0:
            raise blame.error(f"exit {probe.returncode}: {probe.stderr.strip()[-600:]}")
    return env


class EnvRouter:
    """Cases of contracts that set ``env`` run in a worker of their own environment (one per distinct
    ``env``, started when its first case comes), set before the worker imports torch or any kernel."""

    def __init__(self, first: IsolatedExecutor, envs: dict[str, tuple[tuple[str, str], ...]]) -> None:
        self.first, self.envs = first, envs
        self.by_env: dict[tuple[tuple[str, str], ...], IsolatedExecutor] = {}

    def start(self) -> None:
        self.first.start()

    def handshake(self) -> tuple[str, Fingerprint]:
        """The first worker's device and fingerprint, with each contract's env recorded (digested) in it: the
        diff never compares a case computed under another env as unchanged."""
        device, fingerprint = self.first.handshake()
        return device, fingerprint.with_contract_envs(self.envs)

    def default_shapes(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        return self.first.default_shapes()

    def run(self, case: Case, kernel: str | None = None) -> CaseResult:
        return self._executor(case).run(case, kernel)

    def run_many(self, cases: list[Case], kernel: str | None = None) -> Iterator[CaseResult]:
        """Consecutive cases of one environment go to its worker as one pipelined stream."""
        for _, group in itertools.groupby(cases, key=lambda c: self.envs.get(c.contract_id, ())):
            batch = list(group)
            yield from self._executor(batch[0]).run_many(batch, kernel)

    def _executor(self, case: Case) -> IsolatedExecutor:
        key = self.envs.get(case.contract_id, ())
        if not key:
            return self.first
        if key not in self.by_env:
            if self.first.halted:
                raise Halted("the run is stopping")
            f = self.first
            blame = EnvBlame(tuple(c for c, e in self.envs.items() if e == key), key)
            executor = IsolatedExecutor(  # the project encoded once for every worker
                f.project,
                f.device,
                f.memory_limit,
                f.timeout,
                _worker_env(f.env or os.environ, key, blame),
                f.project_text,
            )
            executor.blame = blame
            self.by_env[key] = executor
        return self.by_env[key]

    def halt(self) -> None:
        for executor in (self.first, *list(self.by_env.values())):
            executor.halt()

    def close(self) -> None:
        for executor in (self.first, *self.by_env.values()):
            executor.close()


def isolated(
    project: Project,
    device: str,
    limit: int,
    timeout: float | None,
    env: dict[str, str] | None = None,
    project_text: str = "",
) -> IsolatedExecutor | EnvRouter:
    """One worker's executor, not yet started; with contracts that set ``env``, a router that adds their
    workers (``env``: the environment they all start from, default this process's)."""
    executor = IsolatedExecutor(project, device, limit, timeout, env, project_text)
    envs = {c.id: c.env for c in project.contracts if c.env}
    return EnvRouter(executor, envs) if envs else executor
