"""Execute one case in this process: resolve the kernel, build the context, run the class check.

``kcgate.execution.executors`` wraps this in worker subprocesses; this module is what a worker runs.
Anything the kernel does (raise, exit, return garbage) becomes a CaseResult, never an exception.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from kcgate.contracts.records import Contract, Project
from kcgate.devices.base import HostStopwatch
from kcgate.engine.shrink import shrink_case
from kcgate.errors import KcgateError
from kcgate.plan import Case
from kcgate.results.model import GRAD_BUDGET, CaseResult, Metrics, Signature, Status
from kcgate.results.records import NO_KERNEL
from kcgate.util.resolve import resolve


class UserCode(Protocol):
    """The one seam between the judge and the code under test: the kernel, made callable as the harness calls
    it, and the contract's op family with the user's reference and input generator. ``LocalCode`` runs them
    in this process (``--isolation none``); ``kcgate.sandbox.client.CaseCode`` in sandbox processes of their
    own, forked fresh for the case (the kernel's, and the reference's), so that nothing they do reaches the
    judge."""

    def op(self, contract: Contract, paths: tuple[Path, ...]) -> Any:
        """The contract's op family (``op_for``), its user functions callable here."""

    def kernel(self, contract: Contract, target: str, paths: tuple[Path, ...], dtype: Any, op: Any) -> Any:
        """``kernel(*inputs, **extra)``: the import string resolved and adapted (kcgate.engine.invoke)."""

    def stopwatch(self, default: Callable[[], Any]) -> Callable[[], Any]:
        """The timer of the kernel's own work (``default``: the backend's, in this process)."""

    def case_changes(self) -> list[str]:
        """The process-wide torch state the case's kernel changed (restored), for the ``global-state`` check."""


class LocalCode:
    """The kernel in this process: resolved, adapted and called here."""

    def __init__(self, device: str) -> None:
        self.device = device

    def op(self, contract: Contract, paths: tuple[Path, ...]) -> Any:
        return op_for(contract, paths)

    def kernel(self, contract: Contract, target: str, paths: tuple[Path, ...], dtype: Any, op: Any) -> Any:
        from kcgate.engine.invoke import adapt

        return adapt(resolve(target, paths), contract, self.device, dtype, op)

    def stopwatch(self, default: Callable[[], Any]) -> Callable[[], Any]:
        return default

    def case_changes(self) -> list[str]:
        from kcgate.engine import torch_state

        return torch_state.case_changes()


def make_context(
    project: Project, case: Case, backend: Any, kernel: str | None = None, code: UserCode | None = None
) -> Any:
    from kcgate.engine.trial import CaseContext

    contract = project.contract(case.contract_id)
    device = backend.device()
    code = code or LocalCode(device)
    op = code.op(contract, project.import_paths)
    # calibration states (``kernel``): another import string, the same signature
    fn = code.kernel(contract, kernel or contract.kernel, project.import_paths, _dtype(case.dtype), op)
    return CaseContext(
        contract=contract,
        case=case,
        kernel=fn,
        op=op,
        device=device,
        synchronize=backend.synchronize,
        stopwatch=code.stopwatch(getattr(backend, "stopwatch", None) or _host_stopwatch(backend)),
        fp64_on_device=bool(getattr(backend, "fast_fp64", lambda: False)()),
    )


def _host_stopwatch(backend: Any) -> Any:
    return lambda: HostStopwatch(backend.synchronize)


def _dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def op_for(contract: Contract, paths: tuple[Path, ...], with_reference: bool = True) -> Any:
    """The contract's op family, its reference, generator and ``tolerance.baseline`` resolved here
    (``with_reference=False``: a family's own oracle kept and no baseline, for a kernel's sandbox, which never
    calls them, and for the judge's remote family, kcgate.sandbox.remote_op, which calls them remotely)."""
    op = _family(contract, paths, with_reference)
    if contract.tolerance.baseline and with_reference:
        return replace(op, baseline=resolve(contract.tolerance.baseline, paths))
    return op


def _family(contract: Contract, paths: tuple[Path, ...], with_reference: bool) -> Any:
    from kcgate.numerics.ops import OPS

    if (
        contract.op == "custom"
    ):  # imported only here: the tracer's torch._decomp costs other contracts nothing
        from kcgate.numerics.ops.custom import custom_op

        shape = contract.shapes[0] if contract.shapes else None  # the generator's input names are read there
        return custom_op(resolve(contract.inputs, paths), resolve(contract.reference, paths), shape)
    op = OPS[contract.op]
    if op.configure is not None:
        op = op.configure(contract.op_params())
    if contract.reference and with_reference:  # a user reference overrides the built-in oracle
        return replace(op, oracle=resolve(contract.reference, paths))
    return op


def execute_case(
    project: Project, case: Case, backend: Any, kernel: str | None = None, code: UserCode | None = None
) -> CaseResult:
    """Run one case and return its result, whatever the kernel does (short of killing the process that runs
    it). ``code``: where the kernel runs (default: here, ``LocalCode``).

    A case that changed torch's global state is recorded as ``global-state`` (the state is restored)."""
    code = code or LocalCode(backend.device())
    result = _execute(project, case, backend, kernel, code)
    return _global_state(case, result, code.case_changes())


def _global_state(case: Case, result: CaseResult, changed: list[str]) -> CaseResult:
    if not changed:
        return result
    summary = "the kernel changed process-wide torch state (restored; the next case runs in a fresh process)"
    return _result(
        case,
        status=Status.FAIL,
        metrics=result.metrics,
        signature=Signature("global-state", summary, (("changed", ", ".join(changed)[:1000]),)),
        message=f"global state changed: {', '.join(changed)[:1000]}",
        duration_s=result.duration_s,
        kernel_s=result.kernel_s,
        oracle_s=result.oracle_s,
    )


def _execute(project: Project, case: Case, backend: Any, kernel: str | None, code: UserCode) -> CaseResult:
    from kcgate.engine.checks import CHECKS

    t0 = time.perf_counter()
    try:
        ctx = make_context(project, case, backend, kernel, code)
        if why := _shape_rejected(ctx, case):
            return _result(case, status=Status.REFUSED, metrics=Metrics(), message=why, duration_s=0.0)
        _check_contract_functions(ctx)  # a vacuous reference or generator is the case's error, named
        finding = CHECKS[case.klass](ctx)
        # only where `run --shrink-s` gives it time: the smallest shape, then the fewest nonzero inputs
        finding, shrunk, nonzero = _shrink(ctx, finding, CHECKS[case.klass])
        backend.empty_cache()
    except BaseException as exc:  # noqa: BLE001 — SystemExit and KeyboardInterrupt from a kernel included
        if isinstance(exc, KeyboardInterrupt):
            raise
        return error_result(case, _describe(exc), time.perf_counter() - t0)
    return _result(
        case,
        status=finding.status,
        metrics=finding.metrics,
        signature=_with_grad(finding.signature, finding.metrics),
        message=finding.message,
        duration_s=time.perf_counter() - t0,
        kernel_s=ctx.kernel_s,
        oracle_s=ctx.oracle_s,
        shrunk_shape=shrunk,
        shrunk_nonzero=nonzero,
    )


def _shrink(ctx: Any, finding: Any, check: Any) -> tuple[Any, tuple[int, ...], tuple[int, ...]]:
    """The finding with its smallest failing shape; a kernel whose process dies at a smaller shape (its
    sandbox: nothing else ran there) leaves the case's verdict as found, and says why it is not shrunk."""
    try:
        shrunk, nonzero = shrink_case(ctx, finding, check)
    except BaseException as exc:  # SandboxLost is one, so that no check records it as the kernel raising
        if type(exc).__module__ != "kcgate.sandbox.client":  # SandboxLost: the kernel's own process died
            raise
        note = f"not shrunk: the search for a smaller failing shape ended the kernel's process ({str(exc)[:300]})"
        return replace(finding, message=f"{finding.message}; {note}" if finding.message else note), (), ()
    return finding, shrunk, nonzero


def _check_contract_functions(ctx: Any) -> None:
    from kcgate.engine.reference_checks import check_contract_functions

    check_contract_functions(ctx)


def _shape_rejected(ctx: Any, case: Case) -> str:
    """A boundary shape (kcgate's, not declared) that the contract's own generator or reference rejects is
    refused with a note naming the constraint to declare: never the kernel's failure (issue 47)."""
    from kcgate.engine.trial import reference_rejects

    if tuple(case.shape) in {tuple(s) for s in ctx.contract.shapes}:
        return ""
    return reference_rejects(ctx, case.shape)


def _with_grad(signature: Any, metrics: Metrics) -> Any:
    """A backward case's signature names the gradient it was measured on (``grad = "w"``), and a case of
    several outputs the output (``output = "residual"``), so the diff, report and PR comment say which broke. A signature that names the tensor it measured
    (``tensor``: the sensitivity gate's forward output) keeps its own name: a figure from one tensor is
    never shown under another's; so does one that names the phase a kernel wrote its inputs in (``phase``):
    an overwrite is no gradient's."""
    grad, output = metrics.worst_grad, metrics.worst_output
    named = any(
        k in ("grad", "tensor", "phase", "output") for k, _ in (signature.evidence if signature else ())
    )
    backward = any(k.startswith(GRAD_BUDGET) for k, _ in metrics.extra)  # the forward decided a backward case
    if signature is None or named or not (grad or output or backward):
        return signature
    key, value, what = (
        ("grad", grad, f"gradient of {grad!r}")
        if grad
        else ("output", output, f"output {output!r}")
        if output
        else ("tensor", "forward output", "forward output")
    )
    evidence = tuple(sorted((*signature.evidence, (key, value))))
    if what in signature.summary or f"{key} of {value}" in signature.summary.replace("gradient", "grad"):
        # the diagnosis named it already ("output 'res' scaled by 1.05", "the gradient of w scaled by 1.25")
        return Signature(signature.cause, signature.summary, evidence)
    return Signature(signature.cause, f"{what}: {signature.summary}", evidence)


def error_result(case: Case, message: str, duration: float = 0.0) -> CaseResult:
    return _result(case, status=Status.ERROR, metrics=Metrics(), message=message[:4000], duration_s=duration)


def _result(case: Case, **outcome: Any) -> CaseResult:
    """A case's result: its identity from the plan, the outcome from the run (kcgate's own share of its
    time, ``harness_s``, is what the kernel and the oracle did not take)."""
    spent = outcome.get("kernel_s", 0.0) + outcome.get("oracle_s", 0.0)
    outcome.setdefault("harness_s", max(0.0, outcome.get("duration_s", 0.0) - spent))
    return CaseResult(
        case_id=case.case_id,
        contract_id=case.contract_id,
        klass=case.klass,
        op=case.op,
        dtype=case.dtype,
        shape=case.shape,
        seed=case.seed,
        line=case.line,
        source=case.source,
        **outcome,
    )


def _describe(exc: BaseException) -> str:
    from kcgate.engine.reference_checks import ReferenceFault

    if isinstance(exc, ReferenceFault):
        return str(exc)
    if isinstance(exc, SystemExit):
        return f"the kernel called sys.exit({exc.code!r}) mid-case"
    if isinstance(
        exc, KcgateError
    ):  # the contract's own mistake, found when it ran: its message says the fix
        return exc.message
    if isinstance(exc, ImportError):
        return f"{NO_KERNEL}{type(exc).__name__}: {exc}"
    if type(exc).__module__ == "kcgate.sandbox.client":  # SandboxLost: the kernel's own process died
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
