"""The pytest plugin: ``pytest --kcgate [contracts.toml]`` collects every case of a contracts file as a
pytest item (``contracts.toml::gemm-bf16[bfloat16-128x4096x128-s0]``), so ``-k``, ``-x``, ``--lf``,
``-n`` (pytest-xdist), markers and JUnit work unchanged.

Items run in the same isolated worker processes as ``kcgate run`` (a kernel that segfaults fails its own
item), a failing item's message is kcgate's violation summary, each item records its metrics with
``record_property``, and ``--kcgate-results PATH`` writes the results file that ``diff``, ``compare`` and
``report`` read.

Inert unless asked: without ``--kcgate`` this module only declares its options. It imports no other
kcgate module and no torch at import time; the kcgate machinery is loaded when ``--kcgate`` is given.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

DEFAULT_CONTRACTS = "contracts.toml"
MARKER = "kcgate"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kcgate", "kernel contracts (kcgate)")
    group.addoption(
        "--kcgate",
        nargs="?",
        const=DEFAULT_CONTRACTS,
        default=None,
        metavar="CONTRACTS",
        help="Collect every case of CONTRACTS (default contracts.toml) as a test item.",
    )
    group.addoption("--kcgate-results", metavar="PATH", default=None, help="Write the kcgate results file.")
    group.addoption("--kcgate-device", metavar="NAME", default=None, help="cpu, cuda, rocm, xpu, mps or npu.")
    group.addoption("--kcgate-runner", metavar="NAME", default=None, help="Runner name results are keyed by.")
    group.addoption("--kcgate-seed", type=int, default=None, help="Base seed (default: unpredictable).")
    group.addoption("--kcgate-timeout", type=float, default=None, help="Per-case timeout in seconds.")
    group.addoption(
        "--kcgate-memory-limit-gb", type=float, default=0.0, help="Worker address-space cap (0: half of RAM)."
    )


def pytest_configure(config: pytest.Config) -> None:
    target = config.getoption("kcgate")
    if target is None:
        return
    if Path(target).is_dir():  # `pytest --kcgate DIR`: the contracts file in that directory
        target = str(Path(target) / DEFAULT_CONTRACTS)
    config.addinivalue_line("markers", f"{MARKER}: a case of a kcgate contract (pytest --kcgate)")
    state = KcgateState(config, Path(target))
    config.stash[STATE] = state
    config.pluginmanager.register(state, "kcgate-state")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(state), "kcgate-xdist")
    _collect_contracts_file(config, target)


def _collect_contracts_file(config: pytest.Config, target: str) -> None:
    """The contracts file replaces the default test paths; named test paths are collected beside it."""
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args = [target]
    elif not any(Path(a.split("::")[0]).resolve() == Path(target).resolve() for a in config.args):
        config.args = [*config.args, target]


class CaseFailed(Exception):
    """A case that did not hold; ``repr_failure`` shows kcgate's summary instead of a traceback."""

    def __init__(self, summary: str) -> None:
        super().__init__(summary)
        self.summary = summary


class KcgateState:
    """Per-process state: the project, its plan, one isolated executor, and (on the controlling process)
    the results gathered from every item's report."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config, self.path = config, path
        self.results_path = config.getoption("kcgate_results")
        workerinput = getattr(config, "workerinput", None)
        seed = config.getoption("kcgate_seed")
        if workerinput is not None and "kcgate_seed" in workerinput:
            seed = workerinput["kcgate_seed"]  # every xdist worker plans with the controller's seed
        self.seed: int = seed if seed is not None else secrets.randbits(62)
        self.executor: Any = None
        self.project: Any = None
        self.selected = 0
        self.gathered: dict[str, tuple[int, dict[str, Any]]] = {}
        self.fingerprint: dict[str, Any] | None = None
        self.runner = ""
        self.device = ""

    # -- planning and running (this process) -------------------------------------------------------

    def plan(self) -> list[Any]:
        from kcgate.contracts.load import load_project
        from kcgate.plan import make_plan

        self.project = load_project(self.path)
        return make_plan(self.project, self.seed, self._default_shapes(), boundary=True)

    def _default_shapes(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        if all(c.shapes for c in self.project.contracts):
            return {}  # every contract names its shapes: no need to wait for the worker
        return self._executor().default_shapes()  # type: ignore[no-any-return]

    def _executor(self) -> Any:
        if self.executor is None:
            from kcgate.execution.pool import make_executor

            o = self.config.getoption
            self.executor = make_executor(
                "process",
                self.project,
                o("kcgate_device"),
                o("kcgate_memory_limit_gb"),
                o("kcgate_timeout"),
            )
        return self.executor

    def run(self, case: Any) -> Any:
        from kcgate.engine.case import error_result
        from kcgate.errors import KcgateError
        from kcgate.plan import runs_on

        try:
            executor = self._executor()
            if self.fingerprint is None:
                self.device, fingerprint = executor.handshake()
                self.fingerprint = fingerprint.to_json()
                self.runner = (
                    self.config.getoption("kcgate_runner")
                    or os.environ.get("KCGATE_RUNNER")
                    or (f"{self.device}-{fingerprint.arch or 'generic'}".lower())
                )
            if not runs_on(case, self.project, self.device):
                pytest.skip(f"{case.contract_id}: its contract's devices leaves {self.device} out")
            return executor.run(case)
        except KcgateError as exc:  # the worker cannot start: this item fails with the reason
            return error_result(case, exc.render())

    def reproduce(self, case_id: str) -> str:
        """The command that reruns one case: ``--seed`` is the run seed, from which the case's own derives."""
        device = self.config.getoption("kcgate_device")
        on = f" --device {device}" if device else ""
        return f"kcgate run -c {self.path}{on} -k '{case_id}' --seed {self.seed}"

    # -- hooks -------------------------------------------------------------------------------------

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if file_path.resolve() == self.path.resolve():
            return ContractsFile.from_parent(parent, path=file_path)  # type: ignore[no-any-return]
        return None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.selected = sum(isinstance(i, CaseItem) for i in items)  # after -k, -m and --lf deselection

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, Any]:
        report: Any = yield
        result = getattr(item, "kcgate_result", None)
        if call.when == "call" and isinstance(item, CaseItem) and result is not None:
            # plain JSON attributes survive pytest-xdist's report serialization to the controller
            report.kcgate_case = result.to_json()
            report.kcgate_index = item.index
            report.kcgate_total = self.selected
            report.kcgate_fingerprint = self.fingerprint
            report.kcgate_runner = self.runner
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        case = getattr(report, "kcgate_case", None)
        if case is None:
            return
        self.gathered[case["case_id"]] = (report.kcgate_index, case)
        self.selected = max(self.selected, report.kcgate_total)
        if self.fingerprint is None and report.kcgate_fingerprint:
            self.fingerprint, self.runner = report.kcgate_fingerprint, report.kcgate_runner

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.executor is not None:
            self.executor.close()
            self.executor = None
        if self.results_path and not hasattr(self.config, "workerinput"):
            self._write_results(Path(self.results_path))

    def _write_results(self, out: Path) -> None:
        from kcgate.execution.runloop import new_run
        from kcgate.results.model import CaseResult, Fingerprint, write_run

        if self.fingerprint is None:
            return  # no case ran: nothing to write
        run = new_run(self.runner, Fingerprint.from_json(self.fingerprint), str(self.path))
        ordered = sorted(self.gathered.values(), key=lambda pair: pair[0])
        cases = tuple(CaseResult.from_json(c) for _, c in ordered)
        write_run(out, run.with_cases(cases, complete=len(cases) == self.selected))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.results_path and not hasattr(self.config, "workerinput") and self.fingerprint is not None:
            terminalreporter.write_line(f"kcgate results: {self.results_path} (seed {self.seed})")


class XdistHooks:
    """Registered only where pytest-xdist is installed (its hooks are unknown elsewhere)."""

    def __init__(self, state: KcgateState) -> None:
        self.state = state

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["kcgate_seed"] = self.state.seed


STATE = pytest.StashKey[KcgateState]()


class ContractsFile(pytest.File):
    """A contracts file: one item per planned case, in plan order."""

    def collect(self) -> Iterator[pytest.Item]:
        from kcgate.errors import KcgateError

        state = self.config.stash[STATE]
        try:
            cases = state.plan()
        except KcgateError as exc:
            raise self.CollectError(exc.render()) from None
        for index, case in enumerate(cases):
            name = item_name(case)
            # the id as a string, so pytest 9 splits off the [params] as it does for its own items (and
            # --lf matches the ids it stored)
            nodeid = f"{self.nodeid}::{name}"
            yield CaseItem.from_parent(self, name=name, nodeid=nodeid, case=case, index=index)


def item_name(case: Any) -> str:
    """``gemm-bf16[bfloat16-128x4096x128-s0]``: the contract id, then the case's dtype, shape and seed."""
    return f"{case.contract_id}[{case.dtype}-{'x'.join(map(str, case.shape))}-s{case.seed_index}]"


class CaseItem(pytest.Item):
    """One case of a contract, run in kcgate's isolated worker."""

    def __init__(self, *, case: Any, index: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case, self.index = case, index
        self.kcgate_result: Any = None
        self.add_marker(MARKER)
        self.extra_keyword_matches.update({case.klass, case.op, case.dtype, case.contract_id})

    def runtest(self) -> None:
        from kcgate.render.violation import render_violation

        state = self.config.stash[STATE]
        result = self.kcgate_result = state.run(self.case)
        for key, value in properties(result):
            self.user_properties.append((key, value))
        if not result.ok:
            raise CaseFailed(render_violation(result, state.reproduce(result.case_id)))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailed):
            return excinfo.value.summary
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """The contract's file and line: contracts.toml, or the .py a discovered contract is declared in."""
        line = self.case.line - 1 if self.case.line else None
        path = self.path.parent / self.case.source if self.case.source else self.path
        return path, line, self.case.case_id


def properties(result: Any) -> list[tuple[str, str]]:
    """The case's JUnit properties as ``kcgate.<column>`` pairs for ``record_property`` (pytest's JUnit
    shows them): the column table's (``records.junit_properties``), with the columns that name the case,
    since pytest's item has its own name, class and outcome."""
    from kcgate.results.records import junit_properties

    return [(f"kcgate.{c.name}", text) for c, text in junit_properties(result, identity=True)]
