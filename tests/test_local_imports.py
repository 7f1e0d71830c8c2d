"""Function-local imports in kcgate have a reason, and the reason is checked, not trusted.

Read statically from the source (no import of kcgate's torch side). An import inside a function is
allowed when moving it to the top of its module would:
- ``heavy``: load torch, numpy or an optional extra into a module that does not load them already (the
  torch-free commands must stay so: the last test runs each with ``-X importtime`` where torch cannot be
  imported);
- ``optional``: need an optional extra (``github``, ``plot``, ``liger``, a vendor's torch extension), or
  the import sits in ``try: ... except ImportError`` (the code copes without it);
- ``cycle``: import a module that imports this one at its top (a real cycle);
- ``startup``: in a module every kcgate invocation or every pytest session loads (the CLI imports every
  command module; the plugin is a pytest11 entry point), load a module those do not load already: a
  command's implementation is imported when that command runs;
- or it is listed in ``KEPT`` with its reason, or its module in ``NOT_YET_REVIEWED``.
Anything else belongs at the top of its module, and the first test names it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import ROOT, kcgate
from tests.testing.report_samples import write_results_pair

PACKAGE = ROOT / "kcgate"
# torch and what comes with it (vendor extensions), and the optional extras
OPTIONAL = frozenset(
    {"github", "matplotlib", "triton", "liger_kernel", "torch_npu", "intel_extension_for_pytorch"}
)
HEAVY = frozenset({"torch", "numpy"}) | OPTIONAL
# Loaded by every kcgate invocation (the CLI imports every command module) and by every pytest session
# (the plugin is a pytest11 entry point): what they load at import is paid by all.
ENTRY_POINTS = ("kcgate.cli", "kcgate.adopt.plugin")

# (module, imported module): why the import stays inside a function though no rule above requires it.
KEPT: dict[tuple[str, str], str] = {}
# Modules (or packages, ending in ".") other changes of issue 13 rewrite this session: their function-local
# imports are reviewed with those changes, not here.
NOT_YET_REVIEWED: dict[str, str] = {}


@dataclass(frozen=True)
class LocalImport:
    module: str  # the module the function is in
    function: str
    line: int
    target: str  # the module imported (for ``from a import b``: a.b when that is a module, else a)
    guarded: bool = False  # inside ``try: ... except ImportError``: the code copes with its absence


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _targets(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:  # relative: from the containing package
        package = module.split(".")
        package = package[
            : len(package) - node.level + (1 if _modules()[module].name == "__init__.py" else 0)
        ]
        base = ".".join([*package, base] if base else package)
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in _modules()]
    return subs or [base]


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _top_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports run when the module is imported: module level, inside try/if (not TYPE_CHECKING)."""
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            stack += node.body + node.orelse
        elif isinstance(node, ast.Try):
            stack += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]


@cache
def _tree(module: str) -> ast.Module:
    return ast.parse(_modules()[module].read_text())


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


@cache
def _direct(module: str) -> frozenset[str]:
    found: set[str] = set()
    for node in _top_level_imports(_tree(module)):
        for target in _targets(node, module):
            found.update(_with_parents(target))
    return frozenset(found)


@cache
def closure(module: str) -> frozenset[str]:
    """Every module importing ``module`` loads: kcgate's own by name, others by top-level package."""
    seen: set[str] = set()
    todo = _with_parents(module)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in _modules():
            todo += [n for n in _direct(name) if n not in seen]
    return frozenset(n if n in _modules() else n.split(".")[0] for n in seen)


def _guarded_lines(fn: ast.AST) -> set[int]:
    """Lines of imports inside a ``try`` whose handlers catch ImportError."""
    lines: set[int] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Try) and any(
            h.type is not None and "ImportError" in ast.unparse(h.type) for h in node.handlers
        ):
            lines |= {
                n.lineno
                for s in node.body
                for n in ast.walk(s)
                if isinstance(n, (ast.Import, ast.ImportFrom))
            }
    return lines


def local_imports() -> Iterator[LocalImport]:
    for module in _modules():
        for fn in ast.walk(_tree(module)):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                guarded = _guarded_lines(fn)
                for node in fn.body:
                    for inner in ast.walk(node):
                        if isinstance(inner, (ast.Import, ast.ImportFrom)):
                            for target in _targets(inner, module):
                                yield LocalImport(
                                    module, fn.name, inner.lineno, target, inner.lineno in guarded
                                )


@cache
def entry_closure(entry: str) -> frozenset[str]:
    """What an entry point loads; for the CLI, with every command module it registers."""
    names = [entry]
    if entry == "kcgate.cli":
        names += [m for m in _modules() if m.startswith("kcgate.commands.") and "._" not in m]
    return frozenset().union(*(closure(n) for n in names))


def _costly(modules: frozenset[str]) -> frozenset[str]:
    """Modules worth counting at startup: kcgate's own and third-party ones (the standard library is not)."""
    return frozenset(m for m in modules if m not in sys.stdlib_module_names)


def reason(imp: LocalImport) -> str:
    """The rule that keeps an import inside its function, or "" when it belongs at the top."""
    target, here = closure(imp.target), closure(imp.module)
    if imp.guarded or imp.target.split(".")[0] in OPTIONAL or (target & OPTIONAL) - here:
        return "optional"
    if (target & HEAVY) - here:
        return "heavy"
    if imp.module in target:
        return "cycle"
    for entry in ENTRY_POINTS:
        loaded = entry_closure(entry)
        if imp.module in loaded and not _costly(target) <= loaded:
            return "startup"
    return KEPT.get((imp.module, imp.target)) or _not_yet_reviewed(imp.module)


def _not_yet_reviewed(module: str) -> str:
    for name, why in NOT_YET_REVIEWED.items():
        if module == name or (name.endswith(".") and module.startswith(name)):
            return why
    return ""


@pytest.mark.slow
def test_every_function_local_import_has_a_reason() -> None:
    stray = sorted(
        {f"{i.module}:{i.line} {i.function}() imports {i.target}" for i in local_imports() if not reason(i)}
    )
    assert not stray, (
        "move these to the top of their module (or list them in KEPT with a reason):\n" + "\n".join(stray)
    )


def test_kept_entries_are_still_needed() -> None:
    present = {(i.module, i.target) for i in local_imports()}
    assert not set(KEPT) - present, f"KEPT lists imports that no longer exist: {sorted(set(KEPT) - present)}"


def test_the_rules_see_torch_and_cycles() -> None:
    """The static closure is right where it matters: the CLI is torch-free, the harness is not."""
    assert "torch" not in closure("kcgate.cli") and "numpy" not in closure("kcgate.cli")
    assert "torch" in closure("kcgate.engine.harness")
    assert reason(LocalImport("kcgate.commands.run", "f", 0, "kcgate.engine.harness")) == "heavy"
    assert reason(LocalImport("kcgate.commands.report", "f", 0, "kcgate.publish.github_pr")) == "optional"
    assert reason(LocalImport("kcgate.commands.report", "f", 0, "kcgate.errors")) == ""


def test_no_module_loaded_by_the_cli_imports_torch_at_its_top() -> None:
    """What ``python -X importtime -m kcgate --help`` loads, by the same static reading."""
    assert not entry_closure("kcgate.cli") & HEAVY, sorted(entry_closure("kcgate.cli") & HEAVY)
    assert not entry_closure("kcgate.adopt.plugin") & HEAVY


def _imported(proc: subprocess.CompletedProcess[str]) -> set[str]:
    """Top-level packages in a ``-X importtime`` report."""
    rows = [
        line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")
    ]
    return {r.split(".")[0] for r in rows[1:]}


@pytest.mark.slow
def test_torch_free_commands_import_no_torch_or_numpy(tmp_path: Path, no_torch_env: dict[str, str]) -> None:
    """Each reporting command, run for real with ``-X importtime`` where torch cannot be imported: a
    top-level import that pulls torch (or numpy) into one of them fails here, naming the command."""
    base, artifacts = write_results_pair(tmp_path)
    current = next(artifacts.rglob("*.json"))
    runs = {
        "--help": (["--help"], 0),
        "validate": (["validate", str(ROOT / "contracts.toml")], 0),
        "schema": (["schema", "results"], 0),
        "diff": (["diff", str(base), str(artifacts)], 1),
        "compare": (["compare", str(artifacts), "--format", "json"], 0),
        "merge": (["merge", str(current), "--results", str(tmp_path / "merged.json")], 0),
        "report": (["report", str(artifacts), "--baseline", str(base)], 1),
        "history add": (
            ["history", "add", str(artifacts), "--commit", "a" * 40, "--db", "h.db", "--log", "log"],
            0,
        ),
        "history": (["history", "--db", "h.db", "--html", "site"], 0),
        "history rebuild": (["history", "rebuild", "log", "--db", "h2.db"], 0),
    }
    for name, (args, code) in runs.items():
        proc = kcgate(*args, env=no_torch_env, python_flags=("-X", "importtime"), cwd=tmp_path)
        assert proc.returncode == code, (name, proc.stderr[-2000:])
        assert not _imported(proc) & {"torch", "numpy"}, (name, sorted(_imported(proc) & HEAVY))
