"""Find ``@kcgate.contract(...)`` declarations in source files without importing them.

``[project] discover = ["pkg.kernels"]`` names modules (a package means every module below it). Each
top-level function or class decorated with ``contract(...)`` (imported from kcgate, or as
``kcgate.contract``) becomes a contract whose ``kernel`` is ``module:name``; its keyword arguments are the
TOML keys (``cls`` for ``class``) and must be literals, so validate, diff and report can read them without
torch or the kernels' dependencies. Problems name the .py file and the decorator's (or keyword's) line.
Torch-free.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from kcgate.contracts.locate import module_source
from kcgate.contracts.validate import validate_contract
from kcgate.errors import Problem
from kcgate.util import bounded
from kcgate.util.pysource import decode_source
from kcgate.util.tomlsrc import LineMap

ALIASES = {"cls": "class"}  # keyword arguments that are Python keywords as TOML keys
MAX_SOURCE_BYTES = 2 << 20  # 2 MiB: 50,000 lines of kernels; parsing costs a few hundred times the bytes
MAX_DEPTH = 32  # a decorator value's nesting, as contracts.toml's (tomlsrc.MAX_DEPTH)
_SOURCE_FIX = (
    f"discover reads modules of at most {MAX_SOURCE_BYTES} bytes: move the @contract declarations into "
    "a smaller module and name it in [project] discover"
)


def _depth(node: ast.AST) -> int:
    """How deeply ``node``'s sub-nodes nest, one level at a time (no recursion on untrusted depth)."""
    depth, level = 0, [node]
    while level and depth <= MAX_DEPTH:
        depth += 1
        level = [child for n in level for child in ast.iter_child_nodes(n)]
    return depth


def discover(
    modules: list[str], roots: tuple[Path, ...], taken: set[str], first_index: int, locate: bool = True
) -> tuple[list[Any], list[Problem], list[str]]:
    """(contracts, problems, modules not found) for the modules named in ``[project].discover``."""
    found: list[Any] = []
    problems: list[Problem] = []
    missing: list[str] = []
    for module in modules:
        source = module_source(module, roots)
        if source is None:
            missing.append(module)
            continue
        for name, path in _module_files(module, source):
            for decl in declarations(path, name, problems):
                contract = _validated(decl, roots, taken, first_index + len(found), locate, problems)
                found.append(contract)
                if contract is not None:
                    taken.add(contract.id)
    return found, problems, missing


def _module_files(module: str, source: Path) -> Iterator[tuple[str, Path]]:
    """The module itself, and for a package every module below it (sorted: a stable plan order)."""
    yield module, source
    if source.name != "__init__.py":
        return
    base = source.parent
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(base).with_suffix("").parts
        if path == source or not all(p.isidentifier() for p in parts):
            continue
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        yield ".".join((module, *parts)), path


class Declaration:
    """One decorator: its keys, their lines, and where it is."""

    def __init__(self, file: Path, module: str, name: str, line: int) -> None:
        self.file, self.module, self.name, self.line = file, module, name, line
        self.keys: dict[str, Any] = {}
        self.lines: dict[str, int] = {}


def declarations(path: Path, module: str, problems: list[Problem]) -> list[Declaration]:
    try:  # untrusted like contracts.toml: capped while reading (a 40 MB module once took 15.8 GB to parse)
        tree = ast.parse(decode_source(bounded.read_capped(path, MAX_SOURCE_BYTES)))  # BOM, coding line
    except bounded.Refused as exc:
        problems.append(Problem(str(path), None, "", f"not read: {exc}", _SOURCE_FIX))
        return []
    except (SyntaxError, UnicodeDecodeError) as exc:
        problems.append(Problem(str(path), getattr(exc, "lineno", None) or 1, "", f"cannot parse: {exc}"))
        return []
    except (RecursionError, MemoryError):  # the parser's own depth limits: expressions nested by the thousand
        problems.append(
            Problem(str(path), None, "", "cannot parse: expressions nested too deeply", _SOURCE_FIX)
        )
        return []
    names, modules = _contract_names(tree)
    out = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for dec in node.decorator_list:
            if isinstance(dec, ast.Call) and _is_contract(dec.func, names, modules):
                out.append(_declaration(path, module, node.name, dec, problems))
    return out


def _contract_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Names bound to kcgate.contract (``from kcgate import contract as c``) and to kcgate itself."""
    names, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "kcgate":
            names |= {a.asname or a.name for a in node.names if a.name == "contract"}
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "kcgate"}
    return names, modules


def _is_contract(func: ast.expr, names: set[str], modules: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in names
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "contract"
        and isinstance(func.value, ast.Name)
        and func.value.id in modules
    )


def _declaration(path: Path, module: str, name: str, dec: ast.Call, problems: list[Problem]) -> Declaration:
    decl = Declaration(path, module, name, dec.lineno)
    where = f"@contract on {name}"
    if dec.args:
        problems.append(
            Problem(str(path), dec.lineno, where, "takes keyword arguments only", 'write @contract(op="...")')
        )
    for kw in dec.keywords:
        if kw.arg is None:
            problems.append(
                Problem(
                    str(path),
                    kw.value.lineno,
                    where,
                    "**keyword expansion cannot be read without importing the module",
                    "write each key inline as a literal",
                )
            )
            continue
        key = ALIASES.get(kw.arg, kw.arg)
        if _depth(kw.value) > MAX_DEPTH:
            problems.append(
                Problem(
                    str(path),
                    kw.value.lineno,
                    f"{where}.{key}",
                    f"nested more than {MAX_DEPTH} deep (a contract needs 4)",
                    "write the value as a flat literal",
                )
            )
            continue
        try:
            decl.keys[key] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, RecursionError):
            problems.append(
                Problem(
                    str(path),
                    kw.value.lineno,
                    f"{where}.{key}",
                    "must be a literal (string, number, list or dict) so kcgate can read it without importing",
                    'write the value inline, e.g. dtypes=["bfloat16"]',
                )
            )
            continue
        decl.lines[key] = kw.value.lineno
    return decl


def _validated(
    decl: Declaration,
    roots: tuple[Path, ...],
    taken: set[str],
    index: int,
    locate: bool,
    problems: list[Problem],
) -> Any:
    keys = {"id": decl.name, **decl.keys, "kernel": f"{decl.module}:{decl.name}"}
    lines = LineMap({("contract", index): decl.line})
    lines.lines |= {("contract", index, k): n for k, n in decl.lines.items()}
    contract, found = validate_contract(
        keys, file=str(decl.file), lines=lines, roots=roots, index=index, locate=locate
    )
    problems += found
    if contract is not None:  # roots[0] is the contracts file's directory: annotations join the two
        contract = replace(contract, source=Path(os.path.relpath(decl.file, roots[0])).as_posix())
    if contract is not None and contract.id in taken:
        problems.append(
            Problem(
                str(decl.file),
                decl.lines.get("id", decl.line),
                f"contract {contract.id!r}.id",
                "duplicate id (also defined in contracts.toml or another @contract)",
                'ids must be unique: pass id="another-name"',
            )
        )
        return None
    return contract
