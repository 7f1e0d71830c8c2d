"""The Python API: check a kernel against a contract from a test or a notebook, or declare the contract
on the kernel itself.

    import kcgate

    result = kcgate.check(my_rmsnorm, op="rmsnorm", cls="C-PRC-01", dtypes=["bfloat16"])
    kcgate.assert_contract(my_rmsnorm, op="rmsnorm", cls="C-PRC-01", dtypes=["bfloat16"])

    @kcgate.contract(op="matmul", cls="C-PRC-01", dtypes=["bfloat16"], accumulate="float32")
    def gemm(a, b): ...

Keyword arguments are the keys of a ``[[contract]]`` table (``cls`` stands for ``class``), validated by
the same code as contracts.toml with the same messages, less the file and line. Importing this module
does not import torch; running a check does (in this process, or in a worker with
``isolation="process"``).
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kcgate.adopt import local
from kcgate.contracts.policy import Policy
from kcgate.contracts.records import Contract, Project
from kcgate.contracts.validate import validate_contract
from kcgate.devices import check_name
from kcgate.errors import ContractsError, Problem
from kcgate.execution.executors import InProcessExecutor, isolated
from kcgate.plan import for_device, make_plan
from kcgate.render.violation import render_violations
from kcgate.results.model import CaseResult

T = TypeVar("T")
ISOLATIONS = ("none", "process")


class ContractError(ContractsError, ValueError):
    """The keyword arguments do not make a valid contract; ``str()`` lists each key, problem and fix."""

    def __str__(self) -> str:
        return "\n".join([self.message, *(_render(p) for p in self.problems)])


def _render(p: Problem) -> str:
    """A problem without file or line: the key, what is wrong, the fix."""
    text = f"{p.where}: {p.message}" if p.where else p.message
    return f"{text}\n    fix: {p.fix}" if p.fix else text


@dataclass(frozen=True)
class CheckResult:
    """The cases of one contract run by :func:`check`; iterable over its :class:`CaseResult` records."""

    contract: Contract
    cases: tuple[CaseResult, ...]
    seed: int

    @property
    def ok(self) -> bool:
        """Every case holds."""
        return bool(self.cases) and all(c.ok for c in self.cases)

    @property
    def failed(self) -> tuple[CaseResult, ...]:
        return tuple(c for c in self.cases if not c.ok)

    def summary(self) -> str:
        """kcgate's violation summary of every case that does not hold (as ``pytest --kcgate`` shows it)."""
        if self.ok:
            return f"kcgate: contract {self.contract.id}: all {len(self.cases)} cases hold"
        if not self.cases:
            return (
                f"kcgate: contract {self.contract.id}: no case ran on this device "
                f"(the contract's devices: {', '.join(self.contract.devices)})"
            )
        return render_violations(self.cases)

    def __iter__(self) -> Iterator[CaseResult]:
        return iter(self.cases)

    def __len__(self) -> int:
        return len(self.cases)


def contract_from_keys(kernel: str, keys: dict[str, Any], *, locate: bool = False) -> Contract:
    """A Contract from TOML keys (``cls`` or ``class``), or ContractError with every problem."""
    table = {("class" if k == "cls" else k): v for k, v in keys.items() if v is not None}
    table["kernel"] = kernel
    contract, problems = validate_contract(table, locate=locate)
    if contract is None or problems:
        n = len(problems)
        raise ContractError(f"invalid contract: {n} problem{'s' * (n != 1)}", problems)
    return contract


def check(
    kernel: Callable[..., Any] | str,
    *,
    op: str,
    cls: str | None = None,
    id: str | None = None,
    dtypes: Sequence[str] | None = None,
    shapes: Sequence[Sequence[int]] | None = None,
    isolation: str = "none",
    device: str | None = None,
    seed: int | None = None,
    timeout: float | None = None,
    **keys: Any,
) -> CheckResult:
    """Run one contract on ``kernel`` and return its case results (never raises for a violation).

    ``kernel``: the callable, or an import string ``"pkg.mod:fn"``. ``op``, ``cls`` (the TOML ``class``),
    ``id``, ``dtypes``, ``shapes`` and every other keyword are the TOML keys of a ``[[contract]]`` table,
    e.g. ``accumulate="float32"``, ``tolerance={"method": "ulp", "ulp": 2}``, ``protocol={"seeds": 1}``.
    ``isolation="process"`` runs the cases in a worker process as ``kcgate run`` does (the kernel must
    then be importable by its module and name); ``"none"`` (default) runs them here. ``device``: cpu,
    cuda, rocm, xpu, mps or npu (default: the best one here). ``seed``: the base seed (default: random).

    Raises :class:`ContractError` (a ``ValueError``) for invalid keys, with the key and a fix.
    """
    if isolation not in ISOLATIONS:
        raise ContractError(f"isolation={isolation!r}: choose 'none' or 'process'")
    target = _import_string(kernel, isolation)
    table = {"id": id or _default_id(kernel), "class": cls, "op": op, "dtypes": dtypes, **keys}
    if shapes is not None:
        table["shapes"] = [list(s) for s in shapes]
    if dtypes is not None:
        table["dtypes"] = list(dtypes)
    table = {k: v for k, v in table.items() if v is not None}
    contract = contract_from_keys(target, table, locate=False)
    base = seed if seed is not None else secrets.randbits(62)
    return CheckResult(contract, _run(contract, isolation, device, base, timeout), base)


def assert_contract(kernel: Callable[..., Any] | str, **keys: Any) -> CheckResult:
    """:func:`check`, raising ``AssertionError`` with kcgate's violation summary when a case fails."""
    result = check(kernel, **keys)
    if not result.ok:
        raise AssertionError(result.summary())
    return result


# ---- the decorator ---------------------------------------------------------------------------------

_REGISTRY: list[Contract] = []


def contract(*, op: str, cls: str | None = None, id: str | None = None, **keys: Any) -> Callable[[T], T]:
    """Declare a contract on a kernel (a function, an ``autograd.Function`` or an ``nn.Module`` class).

    ``kcgate run`` and ``pytest --kcgate`` find it through ``[project] discover = ["pkg.kernels"]`` by
    reading the source, so the arguments must be literals. The kernel is ``module:name`` of the decorated
    object (top level of its module) and ``id`` defaults to its name. The keys are validated when the
    module is imported; the kernel is returned unchanged.
    """

    def register(obj: T) -> T:
        name = getattr(obj, "__name__", "")
        table = {"id": id or name, "class": cls, "op": op, **keys}
        declared = contract_from_keys(f"{getattr(obj, '__module__', '')}:{name}", table)
        _REGISTRY.append(declared)
        return obj

    return register


def registered() -> tuple[Contract, ...]:
    """The contracts declared with :func:`contract` in the modules imported so far."""
    return tuple(_REGISTRY)


# ---- running ---------------------------------------------------------------------------------------


def _default_id(kernel: Callable[..., Any] | str) -> str:
    name = kernel.split(":")[-1] if isinstance(kernel, str) else getattr(kernel, "__name__", "kernel")
    return "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in name).strip("-._") or "kernel"


def _import_string(kernel: Callable[..., Any] | str, isolation: str) -> str:
    """The kernel's import string: given, or found from the callable's module and name; a callable that
    cannot be imported by name (a lambda, a closure, a notebook cell) is parked in kcgate.adopt.local
    for an in-process check."""
    if isinstance(kernel, str):
        return kernel
    if not callable(kernel):
        raise ContractError(f"kernel {kernel!r} is neither callable nor an import string")
    module, name = getattr(kernel, "__module__", None), getattr(kernel, "__qualname__", "")
    if module and module != "__main__" and name.isidentifier():
        if getattr(sys.modules.get(module), name, None) is kernel:
            return f"{module}:{name}"
    if isolation == "process":
        raise ContractError(
            f"kernel {kernel!r} cannot be imported by name in a worker process",
            (
                Problem(
                    "",
                    None,
                    "isolation",
                    "a worker process imports the kernel by module and name",
                    'define it at the top level of an importable module, or use isolation="none"',
                ),
            ),
        )

    return local.park(kernel)


def _run(
    contract: Contract, isolation: str, device: str | None, seed: int, timeout: float | None
) -> tuple[CaseResult, ...]:
    # no file: a worker gets the project itself (Project.to_json), so the contract is the one built here
    project = Project(
        path=Path("kcgate-check.toml"), name="kcgate-check", contracts=(contract,), policy=Policy()
    )
    executor = _executor(project, isolation, device, timeout)
    try:
        cases, _ = for_device(
            make_plan(project, seed, executor.default_shapes()), project, executor.handshake()[0]
        )
        return tuple(executor.run_many(cases))
    finally:
        executor.close()


def _executor(project: Any, isolation: str, device: str | None, timeout: float | None) -> Any:
    if device:
        check_name(device)
    if isolation == "none":
        return InProcessExecutor(project, device or "auto")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # what this process imports
    executor = isolated(project, device or "auto", 0, timeout, env)  # a contract's env: its own worker
    executor.start()
    return executor
