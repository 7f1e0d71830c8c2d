"""The tree shows the pipeline: each layer of ``kcgate/`` imports only from the layers below it, and no
modules import each other in a loop. Read statically (every import, function-local and type-only ones
too), so it runs without torch."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Bottom to top. A module may import from its own layer and from the layers before it; never from a later
# one. ``kcgate/__init__.py`` (the lazy API), ``cli`` and ``__main__`` sit on top.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("util",),
    ("vocab",),
    ("contracts",),
    ("plan",),
    ("results",),
    ("devices",),
    ("numerics",),
    ("kernels",),
    ("engine",),
    ("sandbox",),
    ("execution",),
    ("gate",),
    ("history",),
    ("render",),
    ("publish",),
    ("calibration",),
    ("adopt",),
    ("commands",),
    ("cli", "__main__", "__init__"),
)
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, package: Path) -> Iterator[tuple[str, int]]:
    """Every kcgate module ``path`` imports (``from a import b``: ``a.b`` when that is a module)."""
    me = module_name(path, package)
    here = me if path.name == "__init__.py" else me.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names if a.name.startswith("kcgate"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            if base.split(".")[0] != "kcgate":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                yield (sub if _is_module(sub, package) else base), node.lineno


def _is_module(name: str, package: Path) -> bool:
    rel = Path(*name.split(".")[1:])
    return (package / rel).with_suffix(".py").is_file() or (package / rel / "__init__.py").is_file()


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def graph(package: Path) -> dict[str, set[tuple[str, int]]]:
    return {module_name(p, package): set(imports(p, package)) for p in sorted(package.rglob("*.py"))}


def upward(package: Path) -> list[str]:
    out = []
    for mod, targets in graph(package).items():
        for target, line in sorted(targets):
            if RANK[layer_of(target)] > RANK[layer_of(mod)]:  # the package's face (kcgate) is the top layer
                out.append(f"{mod}:{line} imports {target} ({layer_of(target)} is above {layer_of(mod)})")
    return out


def cycles(package: Path) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    edges = {m: {t for t, _ in ts if t != m} for m, ts in graph(package).items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


PACKAGE = ROOT / "kcgate"


def test_every_top_level_name_is_a_layer() -> None:
    names = {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()
    }
    assert names == set(RANK), (
        f"add {sorted(names - set(RANK))} to LAYERS, or drop {sorted(set(RANK) - names)}"
    )


def test_no_import_goes_up_a_layer() -> None:
    assert upward(PACKAGE) == []


def test_no_import_cycle() -> None:
    assert cycles(PACKAGE) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "kcgate"
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def test_a_planted_upward_import_is_named(tmp_path: Path) -> None:
    pkg = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "vocab/__init__.py": "",
            "vocab/dtypes.py": "def f():\n    from kcgate.engine.harness import run_trial\n",
            "engine/__init__.py": "",
            "engine/harness.py": "from kcgate.vocab import dtypes\n",
        },
    )
    assert upward(pkg) == ["kcgate.vocab.dtypes:2 imports kcgate.engine.harness (engine is above vocab)"]


def test_an_import_from_the_package_face_goes_up(tmp_path: Path) -> None:
    """``from kcgate import __version__`` below the top reads the package's face, the top layer."""
    pkg = _tree(
        tmp_path,
        {
            "__init__.py": "__version__ = '1'\n",
            "execution/__init__.py": "",
            "execution/runloop.py": "from kcgate import __version__\n",
        },
    )
    assert upward(pkg) == ["kcgate.execution.runloop:1 imports kcgate (__init__ is above execution)"]


def test_a_planted_cycle_is_found(tmp_path: Path) -> None:
    pkg = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "engine/__init__.py": "",
            "engine/a.py": "from kcgate.engine import b\n",
            "engine/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kcgate.engine.a import X\n",
        },
    )
    assert upward(pkg) == []
    assert cycles(pkg) == [["kcgate.engine.a", "kcgate.engine.b"]]


@pytest.mark.parametrize("module", ["kcgate.util", "kcgate.vocab", "kcgate.contracts", "kcgate.gate"])
def test_each_layer_package_says_what_it_is_for(module: str) -> None:
    init = PACKAGE.joinpath(*module.split(".")[1:], "__init__.py")
    assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))


# The sandbox split (issue 54, docs/layout.md): what runs beside the kernel (the sandbox's server and children:
# the kernel, the user's reference and input generator) and what judges. The judge's side never imports a
# module of the other, and an import string of the code under test (a kernel, reference, generator or
# ``tolerance.baseline``) is resolved only beside the kernel, or by the in-process path (engine/case.py's
# LocalCode and op_for, ``--isolation none``: docs/security.md#the-judge-and-the-sandbox).
BESIDE_THE_KERNEL = frozenset({"kcgate.sandbox.server", "kcgate.sandbox.case", "kcgate.sandbox.reference"})
JUDGE_SIDE = (
    "kcgate.execution.worker",
    "kcgate.sandbox.process",
    "kcgate.sandbox.client",
    "kcgate.sandbox.remote_op",
)
RESOLVERS = BESIDE_THE_KERNEL | {"kcgate.engine.case"}


def reach(package: Path, start: str) -> set[str]:
    """Every kcgate module ``start`` imports, directly or through others (function-local imports too)."""
    edges, seen, todo = graph(package), set(), [start]
    while todo:
        for target, _ in edges.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


@pytest.mark.parametrize("module", JUDGE_SIDE)
def test_the_judge_never_imports_what_runs_beside_the_kernel(module: str) -> None:
    assert not reach(PACKAGE, module) & BESIDE_THE_KERNEL, sorted(reach(PACKAGE, module) & BESIDE_THE_KERNEL)


def test_only_the_sandbox_resolves_user_code() -> None:
    resolvers = {
        m for m, targets in graph(PACKAGE).items() if any(t == "kcgate.util.resolve" for t, _ in targets)
    }
    assert resolvers <= RESOLVERS, sorted(resolvers - RESOLVERS)
    assert BESIDE_THE_KERNEL <= set(graph(PACKAGE))  # the split's modules exist under these names
